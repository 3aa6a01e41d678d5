#include "ipu_backend/engine/engine.h"

#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>

#include <fmt/format.h>

#include "ipu_backend/compiler/op_shapes.h"
#include "ipu_backend/ir/op_defs.h"
#include "ipu_backend/kernels/fused.h"
#include "ipu_backend/kernels/reference.h"

namespace ipu {
namespace {

namespace ref = kernels::ref;
namespace fz = kernels::fused;
using kernels::Range;
using FW = kernels::Window<float>;
using IW = kernels::Window<std::int32_t>;

// 64-byte aligned, allocated once.
struct AlignedBytes {
  std::byte* p = nullptr;
  size_t n = 0;
  explicit AlignedBytes(size_t bytes) : n(bytes) {
    size_t rounded = (std::max<size_t>(bytes, 64) + 63) / 64 * 64;
    p = static_cast<std::byte*>(std::aligned_alloc(64, rounded));
    if (!p) throw std::bad_alloc();
    std::memset(p, 0, rounded);  // touch every page now, not in the first step
  }
  ~AlignedBytes() { std::free(p); }
  AlignedBytes(const AlignedBytes&) = delete;
  AlignedBytes& operator=(const AlignedBytes&) = delete;
};

std::vector<int> toIntPerm(const std::vector<i64>& p) {
  return {p.begin(), p.end()};
}

}  // namespace

std::string_view engineModeName(EngineMode m) {
  return m == EngineMode::Tile ? "tile" : "fused";
}

EngineMode parseEngineMode(std::string_view s) {
  if (s == "tile") return EngineMode::Tile;
  if (s == "fused") return EngineMode::Fused;
  throw std::invalid_argument(fmt::format("unknown engine mode '{}' (expected tile or fused)", s));
}

struct Engine::Impl {
  const Executable& exe;
  const Graph& g;
  EngineMode mode;
  // Fused: one buffer per IR tensor. Tile: one arena per tile.
  std::vector<std::unique_ptr<AlignedBytes>> tensorMem;
  std::vector<std::unique_ptr<AlignedBytes>> arenas;
  std::vector<std::function<void()>> fusedSteps;              // per op
  std::vector<std::vector<std::function<void()>>> vertexFns;  // per compute set
  std::vector<std::shared_ptr<void>> kernelObjects;           // keeps fused kernels alive
  std::vector<const void*> inputs;
  std::vector<void*> outputs;
  float zero = 0.0f;
  ReplicaContext replica;
  // Tile mode: replica ops run off the tiles on host copies of their operands (per tensor).
  std::vector<std::function<void()>> replicaFns;  // per compute set (empty: tile vertices)
  std::map<int, std::vector<float>> staging;

  Impl(const Executable& e, EngineMode m, ReplicaContext rc)
      : exe(e), g(e.graph), mode(m), replica(rc) {
    inputs.assign(g.tensors().size(), nullptr);
    outputs.assign(g.tensors().size(), nullptr);
    if (mode == EngineMode::Fused) {
      for (const Tensor& t : g.tensors())
        tensorMem.push_back(std::make_unique<AlignedBytes>(static_cast<size_t>(t.bytes())));
      for (const Op& op : g.ops())
        fusedSteps.push_back(isReplicaOp(op.kind) ? makeReplicaOp(op) : makeFused(op));
    } else {
      for (i64 b : exe.arenaBytes) arenas.push_back(std::make_unique<AlignedBytes>(b));
      for (const ComputeSet& cs : exe.computeSets) {
        std::vector<std::function<void()>> fns;
        if (isReplicaOp(g.op(cs.op).kind)) {
          replicaFns.push_back(makeReplicaOp(g.op(cs.op)));
        } else {
          replicaFns.emplace_back();
          for (const Vertex& v : cs.vertices) fns.push_back(makeVertex(cs, v));
        }
        vertexFns.push_back(std::move(fns));
      }
    }
  }

  // ---- replica ops (both modes) -------------------------------------------------------------
  // Operand pointers: the tensor itself (fused) or its host staging copy (tile).
  float* P(int t) {
    if (mode == EngineMode::Fused) return F(t);
    auto [it, inserted] = staging.try_emplace(t);
    if (inserted) it->second.resize(static_cast<size_t>(g.tensor(t).elements()));
    return it->second.data();
  }

  std::function<void()> makeReplicaOp(const Op& op) {
    const i64 replicas = op.attrs.getInt("replicas");
    Collective* coll = replica.collective;
    if (replicas > 1 && (!coll || coll->replicas() != replicas))
      throw std::invalid_argument(fmt::format(
          "engine: op '{}' on '{}' is compiled for {} replicas but this engine has {}; build the "
          "engines with a ReplicaContext (replication::ReplicaGroup does)",
          opName(op.kind), g.tensor(op.inputs[0]).name, replicas, coll ? coll->replicas() : 1));
    const int r = replica.replica;
    std::function<void()> body;
    switch (op.kind) {
      case OpKind::CrossReplicaReduceScatter: {
        const float* x = P(op.inputs[0]);
        float* y = P(op.outputs[0]);
        const i64 n = g.tensor(op.inputs[0]).elements();
        const float scale = static_cast<float>(op.attrs.getFloat("scale", 1.0));
        const std::string what = g.tensor(op.outputs[0]).name;
        if (replicas == 1)
          body = [=] { for (i64 i = 0; i < n; ++i) y[i] = x[i] * scale; };
        else
          body = [=] { coll->reduceScatter(r, x, n, y, scale, what); };
        break;
      }
      case OpKind::CrossReplicaAllGather: {
        const float* x = P(op.inputs[0]);
        float* y = P(op.outputs[0]);
        const i64 n = g.tensor(op.outputs[0]).elements();
        const std::string what = g.tensor(op.outputs[0]).name;
        if (replicas == 1)
          body = [=] { std::copy(x, x + n, y); };
        else
          body = [=] { coll->allGather(r, x, y, n, what); };
        break;
      }
      case OpKind::ShardedSgdUpdate: {
        const float* w = P(op.inputs[0]);
        float *v = P(op.inputs[1]), *gr = P(op.inputs[2]), *lr = P(op.inputs[3]);
        float* y = P(op.outputs[0]);
        const i64 n = g.tensor(op.inputs[0]).elements(), s = chunkElements(n, static_cast<int>(replicas));
        const i64 begin = std::min(n, r * s), len = std::min(n, begin + s) - begin;
        const float m = static_cast<float>(op.attrs.getFloat("momentum"));
        const float wd = static_cast<float>(op.attrs.getFloat("weight_decay"));
        const bool nest = op.attrs.getBool("nesterov", false);
        body = [=] {
          std::copy(w + begin, w + begin + len, y);
          std::fill(y + len, y + s, 0.0f);
          fz::sgdMomentumUpdate(*lr, m, wd, nest, y, v, gr, len);
        };
        break;
      }
      default:
        throw std::logic_error(fmt::format("engine: '{}' is not a replica op", opName(op.kind)));
    }
    if (mode == EngineMode::Fused) return body;
    // Tile mode: copy the operands off the tiles, run, copy the results (and the updated
    // momentum) back.
    std::vector<int> ins = op.inputs, outs = op.outputs;
    for (int w : opDef(op.kind).writesInputs) outs.push_back(op.inputs[static_cast<size_t>(w)]);
    return [this, ins, outs, body] {
      for (int t : ins) read(t, P(t));
      body();
      for (int t : outs) write(t, P(t));
    };
  }

  // ---- fused mode ---------------------------------------------------------------------------
  float* F(int t) { return reinterpret_cast<float*>(tensorMem[t]->p); }
  const std::int32_t* I(int t) { return reinterpret_cast<const std::int32_t*>(tensorMem[t]->p); }

  template <typename K, typename... A>
  K* keep(A&&... args) {
    auto k = std::make_shared<K>(std::forward<A>(args)...);
    kernelObjects.push_back(k);
    return k.get();
  }

  std::function<void()> makeFused(const Op& op) {
    auto in = [&](int i) { return op.inputs[i]; };
    int out = op.outputs.empty() ? -1 : op.outputs[0];
    switch (op.kind) {
      case OpKind::Conv2d: {
        auto* k = keep<fz::Conv2dForward>(convShapeOf(g, op));
        float *x = F(in(0)), *w = F(in(1)), *y = F(out);
        return [=] { k->run(x, w, y); };
      }
      case OpKind::Conv2dBackwardData: {
        auto* k = keep<fz::Conv2dBackwardData>(convShapeOf(g, op));
        float *dy = F(in(0)), *w = F(in(1)), *dx = F(out);
        return [=] { k->run(dy, w, dx); };
      }
      case OpKind::Conv2dBackwardFilter: {
        auto* k = keep<fz::Conv2dBackwardFilter>(convShapeOf(g, op));
        float *x = F(in(0)), *dy = F(in(1)), *dw = F(out);
        return [=] { k->run(x, dy, dw); };
      }
      case OpKind::MatMul: {
        auto* k = keep<fz::MatMul>(matMulShapeOf(g, op));
        float *a = F(in(0)), *b = F(in(1)), *c = F(out);
        return [=] { k->run(a, b, c); };
      }
      case OpKind::BatchNormTrain: {
        auto [rows, c] = rowsChannelsOf(g, in(0));
        auto* k = keep<fz::BatchNormForwardTraining>(rows, c,
                                                     static_cast<float>(op.attrs.getFloat("eps")));
        float *x = F(in(0)), *ga = F(in(1)), *be = F(in(2)), *y = F(out);
        float *mean = F(op.outputs[1]), *var = F(op.outputs[2]);
        return [=] { k->run(x, ga, be, y, mean, var); };
      }
      case OpKind::BatchNormInference: {
        auto [rows, c] = rowsChannelsOf(g, in(0));
        auto* k = keep<fz::BatchNormForwardInference>(rows, c,
                                                      static_cast<float>(op.attrs.getFloat("eps")));
        float *x = F(in(0)), *ga = F(in(1)), *be = F(in(2)), *mean = F(in(3)), *var = F(in(4));
        float* y = F(out);
        return [=] { k->run(x, ga, be, mean, var, y); };
      }
      case OpKind::BatchNormBackward: {
        auto [rows, c] = rowsChannelsOf(g, in(0));
        auto* k =
            keep<fz::BatchNormBackward>(rows, c, static_cast<float>(op.attrs.getFloat("eps")));
        float *x = F(in(0)), *dy = F(in(1)), *ga = F(in(2)), *mean = F(in(3)), *var = F(in(4));
        float *dx = F(out), *dga = F(op.outputs[1]), *dbe = F(op.outputs[2]);
        return [=] { k->run(x, dy, ga, mean, var, dx, dga, dbe); };
      }
      case OpKind::Unary: {
        auto kind = unaryKindOf(op);
        float alpha = static_cast<float>(op.attrs.getFloat("alpha", 1.0));
        float *x = F(in(0)), *y = F(out);
        i64 n = g.tensor(out).elements();
        return [=] { fz::unary(kind, alpha, x, y, n); };
      }
      case OpKind::UnaryGrad: {
        auto kind = unaryKindOf(op);
        float alpha = static_cast<float>(op.attrs.getFloat("alpha", 1.0));
        float *x = F(in(0)), *dy = F(in(1)), *dx = F(out);
        i64 n = g.tensor(out).elements();
        return [=] { fz::unaryGrad(kind, alpha, x, dy, dx, n); };
      }
      case OpKind::Binary: {
        auto kind = binaryKindOf(op);
        auto bs = binaryShapeOf(g, op);
        float *a = F(in(0)), *b = F(in(1)), *y = F(out);
        return [=] { fz::binary(kind, bs, a, b, y); };
      }
      case OpKind::Broadcast: {
        // x broadcast to the output shape: x + 0 with the zero broadcast everywhere.
        auto bs = binaryShapeOf(g, op);
        float *x = F(in(0)), *y = F(out), *z = &zero;
        return [=] { fz::binary(kernels::BinaryKind::Add, bs, x, z, y); };
      }
      case OpKind::Reduce: {
        auto kind = reduceKindOf(op);
        auto s = reduceShapeOf(g, op);
        float *x = F(in(0)), *y = F(out);
        return [=] { fz::reduce(kind, s, x, y); };
      }
      case OpKind::Reshape: {
        const void* x = tensorMem[in(0)]->p;
        void* y = tensorMem[out]->p;
        size_t n = static_cast<size_t>(g.tensor(out).bytes());
        return [=] { std::memcpy(y, x, n); };
      }
      case OpKind::Transpose: {
        Shape dims = g.tensor(in(0)).shape;
        auto perm = toIntPerm(op.attrs.getInts("perm"));
        float *x = F(in(0)), *y = F(out);
        return [=] { fz::transpose(dims, perm, x, y); };
      }
      case OpKind::MaxPool: {
        auto* k = keep<fz::MaxPoolForward>(poolShapeOf(g, op));
        float *x = F(in(0)), *y = F(out);
        return [=] { k->run(x, y); };
      }
      case OpKind::MaxPoolGrad: {
        auto* k = keep<fz::MaxPoolBackward>(poolShapeOf(g, op));
        float *x = F(in(0)), *dy = F(in(1)), *dx = F(out);
        return [=] { k->run(x, dy, dx); };
      }
      case OpKind::AvgPool: {
        auto* k = keep<fz::AvgPoolForward>(poolShapeOf(g, op));
        float *x = F(in(0)), *y = F(out);
        return [=] { k->run(x, y); };
      }
      case OpKind::AvgPoolGrad: {
        auto* k = keep<fz::AvgPoolBackward>(poolShapeOf(g, op));
        float *dy = F(in(0)), *dx = F(out);
        return [=] { k->run(dy, dx); };
      }
      case OpKind::Softmax: {
        i64 cols = g.tensor(out).shape.back(), rows = g.tensor(out).elements() / cols;
        float *x = F(in(0)), *y = F(out);
        return [=] { fz::softmax(rows, cols, x, y); };
      }
      case OpKind::SoftmaxGrad: {
        i64 cols = g.tensor(out).shape.back(), rows = g.tensor(out).elements() / cols;
        float *y = F(in(0)), *dy = F(in(1)), *dx = F(out);
        return [=] { fz::softmaxGrad(rows, cols, y, dy, dx); };
      }
      case OpKind::SoftmaxCrossEntropy: {
        const Shape& s = g.tensor(in(0)).shape;
        float eps = static_cast<float>(op.attrs.getFloat("smoothing", 0.0));
        float *lg = F(in(0)), *loss = F(out);
        const std::int32_t* lb = I(in(1));
        i64 n = s[0], c = s[1];
        return [=] { fz::softmaxCrossEntropy(n, c, eps, lg, lb, loss); };
      }
      case OpKind::SoftmaxCrossEntropyGrad: {
        const Shape& s = g.tensor(in(0)).shape;
        float eps = static_cast<float>(op.attrs.getFloat("smoothing", 0.0));
        float *lg = F(in(0)), *dl = F(in(2)), *dlg = F(out);
        const std::int32_t* lb = I(in(1));
        i64 n = s[0], c = s[1];
        return [=] { fz::softmaxCrossEntropyGrad(n, c, eps, lg, lb, dl, dlg); };
      }
      case OpKind::Constant: {
        float* y = F(out);
        i64 n = g.tensor(out).elements();
        float v = static_cast<float>(op.attrs.getFloat("value"));
        return [=] { std::fill(y, y + n, v); };
      }
      case OpKind::SgdUpdate: {
        float *w = F(in(0)), *v = F(in(1)), *gr = F(in(2)), *lr = F(in(3));
        float m = static_cast<float>(op.attrs.getFloat("momentum"));
        float wd = static_cast<float>(op.attrs.getFloat("weight_decay"));
        bool nest = op.attrs.getBool("nesterov", false);
        i64 n = g.tensor(in(0)).elements();
        return [=] { fz::sgdMomentumUpdate(*lr, m, wd, nest, w, v, gr, n); };
      }
      case OpKind::Assign: {
        float *dst = F(in(0)), *src = F(in(1));
        i64 n = g.tensor(in(0)).elements();
        return [=] { std::copy(src, src + n, dst); };
      }
      case OpKind::Accumulate: {
        float *acc = F(in(0)), *x = F(in(1));
        i64 n = g.tensor(in(0)).elements();
        return [=] {
#pragma omp parallel for schedule(static)
          for (i64 i = 0; i < n; ++i) acc[i] += x[i];
        };
      }
      case OpKind::CrossReplicaReduceScatter:
      case OpKind::CrossReplicaAllGather:
      case OpKind::ShardedSgdUpdate:
        break;  // makeReplicaOp
      case OpKind::EmaUpdate: {
        float *r = F(in(0)), *v = F(in(1));
        float m = static_cast<float>(op.attrs.getFloat("momentum"));
        float sc = static_cast<float>(op.attrs.getFloat("scale", 1.0));
        i64 n = g.tensor(in(0)).elements();
        return [=] { fz::emaUpdate(m, sc, r, v, n); };
      }
    }
    throw std::logic_error(fmt::format("fused engine: no kernel for op '{}'", opName(op.kind)));
  }

  // ---- tile mode ----------------------------------------------------------------------------
  std::byte* sliceAddr(int tile, int buffer, i64 e) {
    const TileSlice& s = exe.sliceOf(buffer, e);
    if (s.tile != tile)
      throw std::logic_error(
          fmt::format("tile engine: vertex on tile {} addresses '{}'[{}] that "
                      "lives on tile {}",
                      tile, exe.buffers[buffer].name, e, s.tile));
    return arenas[tile]->p + s.offset + (e - s.begin) * sizeOf(exe.buffers[buffer].dtype);
  }
  const std::byte* windowAddr(int tile, const Window& w) {
    return w.gather ? arenas[tile]->p + w.gatherOffset : sliceAddr(tile, w.buffer, w.begin);
  }
  FW fw(int tile, const Window& w) {
    return FW{reinterpret_cast<const float*>(windowAddr(tile, w)), w.begin, w.end - w.begin};
  }
  IW iw(int tile, const Window& w) {
    return IW{reinterpret_cast<const std::int32_t*>(windowAddr(tile, w)), w.begin, w.end - w.begin};
  }
  float* outPtr(int tile, const OutRegion& o) {
    return reinterpret_cast<float*>(sliceAddr(tile, o.buffer, o.begin));
  }

  std::function<void()> makeVertex(const ComputeSet& cs, const Vertex& v) {
    const Op& op = g.op(cs.op);
    const int t = v.tile;
    std::vector<FW> W;
    for (const Window& w : v.inputs) W.push_back(fw(t, w));
    float* y = v.outputs.empty() ? nullptr : outPtr(t, v.outputs[0]);
    const Range work = v.work, red = v.red;
    auto attrF = [&](const char* k, double d) {
      return static_cast<float>(op.attrs.getFloat(k, d));
    };
    // Combine partial rows (phase 1 of a split reduction): windows are the rows, in order.
    auto combine = [W, y, work](bool isMax) {
      return [W, y, work, isMax] {
        for (i64 i = 0; i < work.size(); ++i) {
          float acc = W[0].data[i];
          for (size_t p = 1; p < W.size(); ++p)
            acc = isMax ? std::max(acc, W[p].data[i]) : acc + W[p].data[i];
          y[i] = acc;
        }
      };
    };
    switch (op.kind) {
      case OpKind::Unary: {
        auto k = unaryKindOf(op);
        float a = attrF("alpha", 1.0);
        return [=] { ref::unary(k, a, W[0], y, work); };
      }
      case OpKind::UnaryGrad: {
        auto k = unaryKindOf(op);
        float a = attrF("alpha", 1.0);
        return [=] { ref::unaryGrad(k, a, W[0], W[1], y, work); };
      }
      case OpKind::Binary: {
        auto k = binaryKindOf(op);
        auto bs = binaryShapeOf(g, op);
        return [=] { ref::binary(k, bs, W[0], W[1], y, work); };
      }
      case OpKind::Broadcast: {
        auto bs = binaryShapeOf(g, op);
        FW z{&zero, 0, 1};
        return [=] { ref::binary(kernels::BinaryKind::Add, bs, W[0], z, y, work); };
      }
      case OpKind::Reshape:
        return [=] {
          for (i64 i = work.begin; i < work.end; ++i) y[i - work.begin] = W[0][i];
        };
      case OpKind::Transpose: {
        Shape dims = g.tensor(op.inputs[0]).shape;
        auto perm = toIntPerm(op.attrs.getInts("perm"));
        return [=] { ref::transpose(dims, perm, W[0], y, work); };
      }
      case OpKind::Constant: {
        float val = attrF("value", 0.0);
        return [=] { std::fill(y, y + work.size(), val); };
      }
      case OpKind::Conv2d: {
        auto s = convShapeOf(g, op);
        return [=] { ref::conv2dForward(s, W[0], W[1], y, work); };
      }
      case OpKind::Conv2dBackwardData: {
        if (cs.phase == 1) return combine(false);
        auto s = convShapeOf(g, op);
        const Range ks = red.size() > 0 ? red : Range{0, s.k};  // split over k: partials
        return [=] { ref::conv2dBackwardData(s, W[0], W[1], y, work, ks); };
      }
      case OpKind::Conv2dBackwardFilter: {
        if (cs.phase == 1) return combine(false);
        auto s = convShapeOf(g, op);
        return [=] { ref::conv2dBackwardFilter(s, W[0], W[1], y, work, red); };
      }
      case OpKind::MatMul: {
        if (cs.phase == 1) return combine(false);
        auto s = matMulShapeOf(g, op);
        const Range ks = red.size() > 0 ? red : Range{0, s.k};  // split over k: partials
        return [=] { ref::matMul(s, W[0], W[1], y, work, ks); };
      }
      case OpKind::Reduce: {
        auto k = reduceKindOf(op);
        if (cs.phase == 1) return combine(k == kernels::ReduceKind::Max);
        auto s = reduceShapeOf(g, op);
        return [=] { ref::reduce(k, s, W[0], y, work, red); };
      }
      case OpKind::MaxPool: {
        auto s = poolShapeOf(g, op);
        return [=] { ref::maxPoolForward(s, W[0], y, work); };
      }
      case OpKind::AvgPool: {
        auto s = poolShapeOf(g, op);
        return [=] { ref::avgPoolForward(s, W[0], y, work); };
      }
      case OpKind::MaxPoolGrad: {
        auto s = poolShapeOf(g, op);
        return [=] { ref::maxPoolBackward(s, W[0], W[1], y, work); };
      }
      case OpKind::AvgPoolGrad: {
        auto s = poolShapeOf(g, op);
        return [=] { ref::avgPoolBackward(s, W[0], y, work); };
      }
      case OpKind::Softmax: {
        i64 cols = g.tensor(op.inputs[0]).shape.back();
        return [=] { ref::softmax(cols, W[0], y, work); };
      }
      case OpKind::SoftmaxGrad: {
        i64 cols = g.tensor(op.inputs[0]).shape.back();
        return [=] { ref::softmaxGrad(cols, W[0], W[1], y, work); };
      }
      case OpKind::SoftmaxCrossEntropy: {
        i64 cls = g.tensor(op.inputs[0]).shape[1];
        float eps = attrF("smoothing", 0.0);
        IW lb = iw(t, v.inputs[1]);
        return [=] { ref::softmaxCrossEntropy(cls, eps, W[0], lb, y, work); };
      }
      case OpKind::SoftmaxCrossEntropyGrad: {
        i64 cls = g.tensor(op.inputs[0]).shape[1];
        float eps = attrF("smoothing", 0.0);
        IW lb = iw(t, v.inputs[1]);
        return [=] { ref::softmaxCrossEntropyGrad(cls, eps, W[0], lb, W[2], y, work); };
      }
      case OpKind::BatchNormInference: {
        auto [rows, c] = rowsChannelsOf(g, op.inputs[0]);
        float eps = attrF("eps", 1e-5);
        // windows: x, gamma, beta, mean, var
        return
            [=] { ref::batchNormNormalize(rows, c, eps, W[0], W[3], W[4], W[1], W[2], y, work); };
      }
      case OpKind::BatchNormTrain:
      case OpKind::BatchNormBackward: {
        auto [rows, c] = rowsChannelsOf(g, op.inputs[0]);
        float eps = attrF("eps", 1e-5);
        bool train = op.kind == OpKind::BatchNormTrain;
        if (cs.phase == 0) {
          float* y2 = outPtr(t, v.outputs[1]);
          if (train) return [=] { ref::batchNormSums(rows, c, W[0], y, y2, work, red); };
          return [=] {
            ref::batchNormBackwardSums(rows, c, eps, W[0], W[1], W[2], W[3], y, y2, work, red);
          };
        }
        if (cs.phase == 1) {
          // Windows: the (first, second) partial rows of every part, interleaved.
          float* y2 = outPtr(t, v.outputs[1]);
          double inv = 1.0 / static_cast<double>(rows);
          return [=] {
            for (i64 i = 0; i < work.size(); ++i) {
              double a = 0, b = 0;
              for (size_t p = 0; p + 1 < W.size(); p += 2) {
                a += W[p].data[i];
                b += W[p + 1].data[i];
              }
              if (train) {  // mean, biased variance
                double mean = a * inv;
                y[i] = static_cast<float>(mean);
                y2[i] = static_cast<float>(std::max(0.0, b * inv - mean * mean));
              } else {  // dbeta = sum dy, dgamma = sum dy * xhat
                y[i] = static_cast<float>(a);
                y2[i] = static_cast<float>(b);
              }
            }
          };
        }
        if (train)  // windows: x, mean, var, gamma, beta
          return
              [=] { ref::batchNormNormalize(rows, c, eps, W[0], W[1], W[2], W[3], W[4], y, work); };
        // windows: x, dy, mean, var, gamma, dbeta (sumDy), dgamma (sumDyXhat)
        return [=] {
          ref::batchNormBackwardData(rows, c, eps, W[0], W[1], W[2], W[3], W[4], W[5], W[6], y,
                                     work);
        };
      }
      case OpKind::SgdUpdate: {
        float* vel = outPtr(t, v.outputs[1]);
        float m = attrF("momentum", 0.0), wd = attrF("weight_decay", 0.0);
        bool nest = op.attrs.getBool("nesterov", false);
        return
            [=] { ref::sgdMomentumUpdate(W[1][0], m, wd, nest, y, vel, W[0].data, work.size()); };
      }
      case OpKind::EmaUpdate: {
        float m = attrF("momentum", 0.0), sc = attrF("scale", 1.0);
        return [=] { ref::emaUpdate(m, sc, y, W[0].data, work.size()); };
      }
      case OpKind::Assign:
        return [=] { std::copy(W[0].data, W[0].data + work.size(), y); };
      case OpKind::Accumulate:
        return [=] {
          for (i64 i = 0; i < work.size(); ++i) y[i] += W[0].data[i];
        };
      case OpKind::CrossReplicaReduceScatter:
      case OpKind::CrossReplicaAllGather:
      case OpKind::ShardedSgdUpdate:
        break;  // makeReplicaOp
    }
    throw std::logic_error(
        fmt::format("tile engine: no vertex kernel for op '{}'", opName(op.kind)));
  }

  void runComputeSet(int c) {
    if (replicaFns[c]) return replicaFns[c]();
    const ComputeSet& cs = exe.computeSets[c];
    // Exchange phase: statically planned copies between arenas (disjoint destinations).
    const auto& ex = cs.exchange;
#pragma omp parallel for schedule(dynamic, 64)
    for (size_t i = 0; i < ex.size(); ++i)
      std::memcpy(arenas[ex[i].dstTile]->p + ex[i].dstOffset,
                  arenas[ex[i].srcTile]->p + ex[i].srcOffset, static_cast<size_t>(ex[i].bytes));
    // Sync, then the compute phase: vertices write disjoint regions of their own tiles.
    auto& fns = vertexFns[c];
#pragma omp parallel for schedule(dynamic, 16)
    for (size_t i = 0; i < fns.size(); ++i) fns[i]();
  }

  // ---- host access --------------------------------------------------------------------------
  void write(int t, const void* data) {
    const Tensor& T = g.tensor(t);
    if (mode == EngineMode::Fused) {
      std::memcpy(tensorMem[t]->p, data, static_cast<size_t>(T.bytes()));
      return;
    }
    i64 es = sizeOf(T.dtype);
    for (const TileSlice& s : exe.mapping[t])
      std::memcpy(arenas[s.tile]->p + s.offset, static_cast<const std::byte*>(data) + s.begin * es,
                  static_cast<size_t>((s.end - s.begin) * es));
  }
  void read(int t, void* data) const {
    const Tensor& T = g.tensor(t);
    if (mode == EngineMode::Fused) {
      std::memcpy(data, tensorMem[t]->p, static_cast<size_t>(T.bytes()));
      return;
    }
    i64 es = sizeOf(T.dtype);
    for (const TileSlice& s : exe.mapping[t])
      std::memcpy(static_cast<std::byte*>(data) + s.begin * es, arenas[s.tile]->p + s.offset,
                  static_cast<size_t>((s.end - s.begin) * es));
  }

  void run() {
    const Program& p = exe.program;
    const size_t microEnd = p.updateBegin >= 0 ? static_cast<size_t>(p.updateBegin) : p.body.size();
    const int accumulation = p.updateBegin >= 0 ? p.accumulationSteps : 1;
    for (int it = 0; it < p.deviceIterations; ++it) {
      for (int a = 0; a < accumulation; ++a) runSteps(0, microEnd, it * accumulation + a);
      runSteps(microEnd, p.body.size(), it * accumulation + accumulation - 1);
    }
  }

  // body[begin, end) with host stream slot `it`.
  void runSteps(size_t begin, size_t end, int it) {
    const Program& p = exe.program;
    {
      for (size_t i = begin; i < end; ++i) {
        const Program::Step& st = p.body[i];
        switch (st.kind) {
          case Program::Step::Kind::StreamIn: {
            const Tensor& T = g.tensor(st.index);
            if (!inputs[st.index])
              throw std::runtime_error(
                  fmt::format("engine: input stream '{}' {}{} is not "
                              "connected (call connectInput)",
                              T.name, dtypeName(T.dtype), shapeStr(T.shape)));
            write(st.index, static_cast<const std::byte*>(inputs[st.index]) + it * T.bytes());
            break;
          }
          case Program::Step::Kind::Execute:
            if (mode == EngineMode::Fused) {
              const ComputeSet& cs = exe.computeSets[st.index];
              if (cs.phase == 0) fusedSteps[cs.op]();  // one host kernel per op
            } else {
              runComputeSet(st.index);
            }
            break;
          case Program::Step::Kind::StreamOut: {
            const Tensor& T = g.tensor(st.index);
            if (outputs[st.index])
              read(st.index, static_cast<std::byte*>(outputs[st.index]) + it * T.bytes());
            break;
          }
        }
      }
    }
  }
};

Engine::Engine(std::shared_ptr<const Executable> exe, EngineMode mode, ReplicaContext replica)
    : exe_(std::move(exe)),
      mode_(mode),
      replica_(replica),
      impl_(std::make_unique<Impl>(*exe_, mode, replica)) {}

Engine::~Engine() = default;

namespace {
void checkBytes(const Tensor& t, size_t bytes, const char* what) {
  if (static_cast<i64>(bytes) != t.bytes())
    throw std::invalid_argument(fmt::format("{} '{}' {}{}: got {} bytes, expected {}", what, t.name,
                                            dtypeName(t.dtype), shapeStr(t.shape), bytes,
                                            t.bytes()));
}
}  // namespace

void Engine::writeTensor(int tensor, const void* data, size_t bytes) {
  checkBytes(exe_->graph.tensor(tensor), bytes, "writeTensor");
  impl_->write(tensor, data);
}

void Engine::readTensor(int tensor, void* data, size_t bytes) const {
  checkBytes(exe_->graph.tensor(tensor), bytes, "readTensor");
  impl_->read(tensor, data);
}

void Engine::writeTensor(const std::string& name, const std::vector<float>& v) {
  int id = exe_->graph.get(name);
  writeTensor(id, v.data(), v.size() * sizeof(float));
}

std::vector<float> Engine::readFloats(int tensor) const {
  const Tensor& t = exe_->graph.tensor(tensor);
  if (t.dtype != DType::F32)
    throw std::invalid_argument(
        fmt::format("readFloats: '{}' is {}, not f32", t.name, dtypeName(t.dtype)));
  std::vector<float> v(static_cast<size_t>(t.elements()));
  readTensor(tensor, v.data(), v.size() * sizeof(float));
  return v;
}

std::vector<float> Engine::readFloats(const std::string& name) const {
  return readFloats(exe_->graph.get(name));
}

void Engine::connectInput(int tensor, const void* data) {
  if (exe_->graph.tensor(tensor).kind != TensorKind::Input)
    throw std::invalid_argument(fmt::format("connectInput: '{}' is not a host input stream",
                                            exe_->graph.tensor(tensor).name));
  impl_->inputs.at(tensor) = data;
}

void Engine::connectOutput(int tensor, void* data) {
  const auto& outs = exe_->graph.outputs();
  if (std::find(outs.begin(), outs.end(), tensor) == outs.end())
    throw std::invalid_argument(fmt::format("connectOutput: '{}' is not marked as a graph output",
                                            exe_->graph.tensor(tensor).name));
  impl_->outputs.at(tensor) = data;
}

void Engine::run() {
  impl_->run();
}

}  // namespace ipu
