#include "ipu_backend/engine/engine.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <optional>
#include <unordered_map>

#include <fmt/format.h>

#include "ipu_backend/compiler/first_fit.h"
#include "ipu_backend/compiler/op_shapes.h"
#include "ipu_backend/engine/host_fusion.h"
#include "ipu_backend/ir/op_defs.h"
#include "ipu_backend/kernels/apply_update.h"
#include "ipu_backend/kernels/fused.h"
#include "ipu_backend/kernels/fused_bf16.h"
#include "ipu_backend/kernels/lamb_update.h"
#include "ipu_backend/kernels/reference.h"
#include "ipu_backend/ops/op_info.h"
#include "ipu_backend/precision/half.h"
#include "ipu_backend/precision/stochastic_rounding.h"

namespace ipu {
namespace {

namespace ref = kernels::ref;
namespace fz = kernels::fused;
using kernels::Range;
using FW = kernels::Window<float>;
using IW = kernels::Window<std::int32_t>;

// Walks elements [begin, begin + len) of a result of shape.outDims in runs along its innermost
// dimension: run(done, offset, length) for `length` elements from begin + done, whose operand
// starts at element `offset` (its element strides per result dimension in shape.aStrides, 0
// where it repeats) and steps by the innermost stride.
template <typename Run>
void forEachBroadcastRun(const kernels::BroadcastShape& shape, i64 begin, i64 len, Run&& run) {
  const int inner = shape.rank - 1;
  i64 coord[kernels::BroadcastShape::kMaxRank] = {};
  for (i64 d = inner, rest = begin; d >= 0; --d) {
    coord[d] = rest % shape.outDims[d];
    rest /= shape.outDims[d];
  }
  i64 offset = 0;
  for (int d = 0; d <= inner; ++d) offset += coord[d] * shape.aStrides[d];
  const i64 stride = shape.aStrides[inner];
  for (i64 done = 0; done < len;) {
    const i64 length = std::min(len - done, shape.outDims[inner] - coord[inner]);
    run(done, offset, length);
    done += length;
    offset += length * stride;
    coord[inner] += length;
    // Carry into the outer dimensions (an odometer), moving the offset with them.
    for (int d = inner; d > 0 && coord[d] == shape.outDims[d]; --d) {
      offset -= coord[d] * shape.aStrides[d];
      coord[d] = 0;
      ++coord[d - 1];
      offset += shape.aStrides[d - 1];
    }
  }
}

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

// ---- 16-bit storage ---------------------------------------------------------------------------
// f16 / bf16 tensors are stored as 16 bits. Kernels compute in f32: an op's 16-bit operands are
// widened into f32 scratch before it runs and its 16-bit results rounded back after (RNE, or
// stochastic rounding where the op asks for it). Both engine modes apply exactly these rules
// at op (fused) or vertex (tile) granularity, so they round identically.
bool isHalf(DType t) {
  return t == DType::F16 || t == DType::BF16;
}

void widen(DType t, const void* src, float* dst, i64 n) {
  if (t == DType::F16)
    precision::toFloat(static_cast<const precision::f16*>(src), dst, n);
  else
    precision::toFloat(static_cast<const precision::bf16*>(src), dst, n);
}

// Rounds n results to t. Stochastic rounding draws element i's bits from (seed, firstIndex + i),
// so any split of a tensor into slices (tiles) gets the bits the whole tensor would.
void narrow(DType t, const float* src, void* dst, i64 n, bool stochastic, std::uint64_t seed,
            i64 firstIndex) {
  if (t == DType::F16) {
    auto* d = static_cast<precision::f16*>(dst);
    if (stochastic)
      precision::stochasticRoundToF16(src, d, n, seed, firstIndex);
    else
      precision::toF16(src, d, n);
  } else {
    auto* d = static_cast<precision::bf16*>(dst);
    if (stochastic)
      precision::stochasticRoundToBF16(src, d, n, seed, firstIndex);
    else
      precision::toBF16(src, d, n);
  }
}

// The seed of (step, tensor): every tile rounding part of `tensor` in `step` uses it.
std::uint64_t roundingSeed(std::uint64_t base, std::uint64_t step, int tensor) {
  return precision::deriveSeed(precision::deriveSeed(base, step),
                               static_cast<std::uint64_t>(tensor));
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
  // Fused: one arena, every IR tensor at an offset in it (tensorMem). Tile: one arena per tile.
  std::unique_ptr<AlignedBytes> fusedArena;
  std::vector<std::byte*> tensorMem;
  std::vector<std::unique_ptr<AlignedBytes>> arenas;
  std::vector<std::function<void()>> fusedSteps;  // per op
  HostFusionPlan fusion;  // fused: op pairs run as one kernel (host_fusion.h)
  // Side buffers of fused ops, per producing op id, read by a later fused op: a fused batch norm
  // forward's ReLU mask (bf16, oneDNN) or its map y = x * a + b (for its backward, or for the
  // add of batch_norm_train -> add -> relu), and that add's ReLU bits (for its gradient's
  // add + relu_grad).
  std::unordered_map<int, std::shared_ptr<AlignedBytes>> fusionBuffers;
  void* allocateFusionBuffer(int op, size_t bytes) {
    auto& m = fusionBuffers[op];
    m = std::make_shared<AlignedBytes>(bytes);
    return m->p;
  }
  std::byte* fusionBuffer(int op) const { return fusionBuffers.at(op)->p; }
  std::vector<std::vector<std::function<void()>>> vertexFns;  // per compute set
  std::vector<const void*> inputs;
  std::vector<void*> outputs;
  ReplicaContext replica;
  // Tile mode: replica ops run off the tiles on host copies of their operands (per tensor).
  std::vector<std::function<void()>> replicaFns;  // per compute set (empty: tile vertices)
  std::map<int, std::vector<float>> staging;
  // Stochastic rounding: base seed and the step counter (device iterations so far).
  std::uint64_t roundingSeedBase = 0x5eed;
  std::uint64_t step = 0;
  // While building one op's (fused) or vertex's (tile) kernel: f32 stand-ins for its 16-bit
  // operands and the conversions to run before and after it.
  std::unordered_map<int, float*> halfScratch;  // fused: tensor -> f32 scratch
  std::vector<std::function<void()>> preConvert, postConvert;
  std::vector<std::unique_ptr<AlignedBytes>> fusedScratchPool;     // fused: one per operand slot
  std::vector<std::shared_ptr<std::vector<float>>> vertexScratch;  // tile: kept alive
  bool profiling = false, profileCpuTime = false;
  double profileClock() const {
    if (!profileCpuTime)
      return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
          .count();
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  }
  std::vector<double> opSeconds;   // fused profiling, per op id
  bool buildingInPlaceOp = false;  // tile: outputs are read-modify-write (update ops)
  const Op* buildingOp = nullptr;

  Impl(const Executable& e, EngineMode m, ReplicaContext rc, bool microBatchesInterleaved)
      : exe(e), g(e.graph), mode(m), replica(rc) {
    inputs.assign(g.tensors().size(), nullptr);
    outputs.assign(g.tensors().size(), nullptr);
    if (mode == EngineMode::Fused) {
      fusion = planHostFusions(g, {fz::bf16PrimitivesAvailable(), !microBatchesInterleaved,
                                   !microBatchesInterleaved, exe.options.updateFirstOp});
      allocateFusedTensors();
      allocateFusedScratch();
      for (const Op& op : g.ops())
        fusedSteps.push_back(fusion.role[op.id] == HostFusionPlan::Role::kAbsorbed
                                 ? std::function<void()>([] {})
                             : isReplicaOp(op.kind) ? makeReplicaOp(op)
                                                    : makeFusedWithConversions(op));
    } else {
      for (i64 b : exe.arenaBytes) arenas.push_back(std::make_unique<AlignedBytes>(b));
      for (const ComputeSet& cs : exe.computeSets) {
        std::vector<std::function<void()>> fns;
        if (isReplicaOp(g.op(cs.op).kind)) {
          replicaFns.push_back(makeReplicaOp(g.op(cs.op)));
        } else {
          replicaFns.emplace_back();
          for (const Vertex& v : cs.vertices) fns.push_back(makeVertexWithConversions(cs, v));
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
    const i64 replicas = replicasOf(op);
    Collective* coll = replica.collective;
    if (replicas > 1 && (!coll || coll->replicas() != replicas))
      throw std::invalid_argument(fmt::format(
          "engine: op '{}' on '{}' is compiled for {} replicas but this engine has {}; build the "
          "engines with a ReplicaContext (replication::ReplicaGroup does)",
          opName(op.kind), g.tensor(op.inputs[0]).name, replicas, coll ? coll->replicas() : 1));
    for (int t : op.inputs)
      if (g.tensor(t).dtype != DType::F32)
        throw std::invalid_argument(
            fmt::format("engine: '{}' reads '{}' in {}; cross-replica ops take f32 operands (the "
                        "replication pass widens 16-bit gradients: cast the operand to f32 first)",
                        opName(op.kind), g.tensor(t).name, dtypeName(g.tensor(t).dtype)));
    ops::ReplicaArgs a{g, op, replicas > 1 ? coll : nullptr, replica.replica, replicas, {}, {}};
    for (int t : op.inputs) a.in.push_back(P(t));
    for (int t : op.outputs) a.out.push_back(P(t));
    std::function<void()> body = ops::find(op.kind)->replica(a);
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

  // ---- 16-bit operands --------------------------------------------------------------------
  // Fused reshape moves raw bytes and never changes the dtype: it needs no conversion (tile
  // vertices copy element-wise, so they convert like every other op).
  static bool convertsOperands(const Op& op) { return op.kind != OpKind::Reshape; }
  bool stochasticWrites(const Op& op) const {
    return op.attrs.getBool("stochastic_rounding", false);
  }
  // The distinct 16-bit tensors an op reads or writes, inputs first (fused scratch slots).
  std::vector<int> halfOperands(const Op& op) const {
    std::vector<int> r;
    auto add = [&](int t) {
      if (isHalf(g.tensor(t).dtype) && std::find(r.begin(), r.end(), t) == r.end()) r.push_back(t);
    };
    if (!convertsOperands(op)) return r;
    for (int t : op.inputs) add(t);
    for (int t : op.outputs) add(t);
    return r;
  }
  // Fused ops run one at a time, so slot k of every op shares one f32 scratch buffer.
  void allocateFusedScratch() {
    std::vector<i64> slotElems;
    for (const Op& op : g.ops()) {
      auto ops = halfOperands(op);
      if (slotElems.size() < ops.size()) slotElems.resize(ops.size(), 0);
      for (size_t k = 0; k < ops.size(); ++k)
        slotElems[k] = std::max(slotElems[k], g.tensor(ops[k]).elements());
    }
    for (i64 n : slotElems)
      fusedScratchPool.push_back(std::make_unique<AlignedBytes>(static_cast<size_t>(n) * 4));
  }

  static std::function<void()> withConversions(std::function<void()> fn,
                                               std::vector<std::function<void()>> pre,
                                               std::vector<std::function<void()>> post) {
    if (pre.empty() && post.empty()) return fn;
    return [fn = std::move(fn), pre = std::move(pre), post = std::move(post)] {
      for (const auto& p : pre) p();
      fn();
      for (const auto& p : post) p();
    };
  }

  // Elementwise ops with a halfChunk facet (unary, unary_grad, same-shape binary, cast) on
  // 16-bit operands: widened, computed (the same element functions as the tile vertices, in
  // vectorised loops) and rounded chunk by chunk in cache, instead of whole tensors through the
  // scratch pool; same results, a third of the traffic. The add of an add + ReLU host fusion
  // applies the ReLU to each chunk of its sums.
  std::function<void()> makeFusedElementwise(const Op& op) {
    const ops::OpInfo* info = ops::find(op.kind);
    if (!info || !info->halfChunk) return {};
    const bool addRelu = fusion.role[op.id] == HostFusionPlan::Role::kAddRelu;
    const bool widened = fusion.role[op.id] == HostFusionPlan::Role::kWidenedOutput;
    if (fusion.role[op.id] != HostFusionPlan::Role::kNone && !addRelu && !widened) return {};
    const i64 n = g.tensor(op.outputs[0]).elements();
    for (int t : op.inputs)
      if (g.tensor(t).elements() != n) return {};  // broadcasts take the general path
    if (op.inputs.size() > ops::kMaxChunkInputs)
      throw std::logic_error(
          fmt::format("engine: {} has {} inputs; the 16-bit chunk path takes "
                      "at most {}",
                      opName(op.kind), op.inputs.size(), ops::kMaxChunkInputs));
    ops::ElementChunk elements = info->halfChunk(g, op);
    if (!elements) return {};
    struct Operand {
      DType dt;
      std::byte* p;
    };
    auto operand = [&](int t) { return Operand{g.tensor(t).dtype, tensorMem[t]}; };
    std::vector<Operand> ins;
    for (int t : op.inputs) ins.push_back(operand(t));
    const Operand out = operand(addRelu   ? fusion.reluOut[op.id]
                                : widened ? fusion.widenOut[op.id]
                                          : op.outputs[0]);
    const DType rounded = g.tensor(op.outputs[0]).dtype;  // widened: the op's own 16-bit type
    ops::ElementChunk chunk = elements;
    if (addRelu)
      chunk = [elements](const FW* w, float* y, Range r) {
        elements(w, y, r);
        fz::unaryChunk(kernels::UnaryKind::Relu, 1.0f, y, y, r.size());
      };
    constexpr i64 kChunk = 4096;
    return [=] {
      const i64 chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
      for (i64 c = 0; c < chunks; ++c) {
        float buf[ops::kMaxChunkInputs + 1][kChunk];
        FW w[ops::kMaxChunkInputs];
        const Range r{c * kChunk, std::min(n, (c + 1) * kChunk)};
        for (size_t i = 0; i < ins.size(); ++i) {
          const Operand& o = ins[i];
          const float* d = reinterpret_cast<const float*>(o.p) + r.begin;
          if (isHalf(o.dt)) {
            widen(o.dt, o.p + r.begin * 2, buf[i], r.size());
            d = buf[i];
          }
          w[i] = FW{d, r.begin, r.size()};
        }
        float* y =
            isHalf(out.dt) ? buf[ops::kMaxChunkInputs] : reinterpret_cast<float*>(out.p) + r.begin;
        chunk(w, y, r);
        if (isHalf(out.dt)) narrow(out.dt, y, out.p + r.begin * 2, r.size(), false, 0, 0);
        if (widened) {  // the 16-bit result as the op would write it, then the cast's widening
          std::uint16_t half[kChunk];
          narrow(rounded, y, half, r.size(), false, 0, 0);
          widen(rounded, half, y, r.size());
        }
      }
    };
  }

  // An op's native fused kernel (ops/op_info.h, nativeFused): on its operands as stored, and
  // its part in a host fusion; empty when it declines.
  std::function<void()> makeNativeFused(const ops::OpInfo& info, const Op& op) {
    auto memory = [this](int t) { return static_cast<void*>(tensorMem[static_cast<size_t>(t)]); };
    ops::NativeFusedArgs a{
        g,
        op,
        {},
        {},
        fusion,
        fz::bf16PrimitivesAvailable(),
        memory,
        [this, id = op.id](size_t bytes) { return allocateFusionBuffer(id, bytes); },
        [this](int producer) { return static_cast<void*>(fusionBuffer(producer)); }};
    for (int t : op.inputs) a.in.push_back(memory(t));
    for (int t : op.outputs) a.out.push_back(memory(t));
    return info.nativeFused(a);
  }

  std::function<void()> makeFusedWithConversions(const Op& op) {
    if (op.kind == OpKind::Reshape && isView(op.outputs[0])) return [] {};
    if (fusion.role[op.id] == HostFusionPlan::Role::kWidenedOutput) {
      if (auto chunked = makeFusedElementwise(op)) return chunked;
      throw std::logic_error(fmt::format(
          "engine: op {} ('{}') is planned to write its widened result but has no 16-bit chunk "
          "kernel",
          op.id, opName(op.kind)));
    }
    // Native kernels first (bf16 primitives on bf16 data, host fusions); AVX2-only CPUs have
    // no oneDNN bf16 primitives: the conversion path below serves them.
    if (const ops::OpInfo* info = ops::find(op.kind); info && info->nativeFused) {
      if (auto native = makeNativeFused(*info, op)) return native;
      // Batch norm's fusion roles only its native kernel runs; the engine's own (elementwise
      // chains, update groups, add + ReLU, square sums: binary and reduce have native kernels
      // for bf16 alone) are left to the paths below, which refuse what they cannot run.
      const HostFusionPlan::Role role = fusion.role[op.id];
      if (role == HostFusionPlan::Role::kBatchNormRelu ||
          role == HostFusionPlan::Role::kBatchNormReluBackward ||
          role == HostFusionPlan::Role::kBatchNormStatistics)
        throw std::logic_error(fmt::format(
            "engine: op {} ('{}') is planned as a host fusion but its native kernel declined it",
            op.id, opName(op.kind)));
    }
    auto ops = halfOperands(op);
    if (ops.empty()) return makeFused(op);
    if (auto chunked = makeFusedElementwise(op)) return chunked;
    if (fusion.role[op.id] != HostFusionPlan::Role::kNone)
      throw std::logic_error(fmt::format(
          "engine: op {} ('{}') is planned as a host fusion but has no fusing 16-bit kernel", op.id,
          opName(op.kind)));
    const OpDef& def = opDef(op.kind);
    std::vector<std::function<void()>> pre, post;
    for (size_t k = 0; k < ops.size(); ++k) {
      int t = ops[k];
      float* f = reinterpret_cast<float*>(fusedScratchPool[k]->p);
      halfScratch[t] = f;
      const Tensor& T = g.tensor(t);
      DType dt = T.dtype;
      i64 n = T.elements();
      const void* mem = tensorMem[t];
      bool isInput = std::find(op.inputs.begin(), op.inputs.end(), t) != op.inputs.end();
      bool written = std::find(op.outputs.begin(), op.outputs.end(), t) != op.outputs.end();
      for (int w : def.writesInputs) written = written || op.inputs[w] == t;
      if (isInput) pre.push_back([=] { widen(dt, mem, f, n); });
      if (written) {
        void* dst = tensorMem[t];
        bool sr = stochasticWrites(op);
        const int key = roundingKeyOf(t);
        std::uint64_t* stepPtr = &step;
        const std::uint64_t* basePtr = &roundingSeedBase;
        post.push_back(
            [=] { narrow(dt, f, dst, n, sr, sr ? roundingSeed(*basePtr, *stepPtr, key) : 0, 0); });
      }
    }
    auto fn = makeFused(op);
    halfScratch.clear();
    return withConversions(std::move(fn), std::move(pre), std::move(post));
  }

  std::function<void()> makeVertexWithConversions(const ComputeSet& cs, const Vertex& v) {
    const Op& op = g.op(cs.op);
    buildingOp = &op;
    buildingInPlaceOp = hasSideEffects(op.kind);
    preConvert.clear();
    postConvert.clear();
    auto fn = makeVertex(cs, v);
    buildingOp = nullptr;
    return withConversions(std::move(fn), std::move(preConvert), std::move(postConvert));
  }

  // ---- fused mode ---------------------------------------------------------------------------
  // Fused mode runs an op's one kernel at its first compute set (whatever that set's phase: the
  // transposed plan of conv2d_backward_data starts at phase 2).
  bool startsOp(int computeSet) const {
    return exe.opFirstComputeSet[static_cast<size_t>(exe.computeSets[computeSet].op)] == computeSet;
  }
  // Tensor memory as on the device: a tensor holds bytes from the first program step that
  // writes or reads it to the last one (program order, the op's first compute set), so
  // activations whose lifetimes do not overlap share memory (first fit, 64-byte aligned).
  // Variables, host streams and graph outputs keep their bytes for the engine's life. An op's
  // inputs and outputs are live at its own step, so they never alias.
  void allocateFusedTensors() {
    const size_t n = g.tensors().size();
    const i64 end = static_cast<i64>(exe.program.body.size());
    std::vector<i64> first(n, end), last(n, -1);
    i64 pos = 0;
    auto touch = [&](int t) {
      first[t] = std::min(first[t], pos);
      last[t] = std::max(last[t], pos);
    };
    for (const Program::Step& st : exe.program.body) {
      if (st.kind != Program::Step::Kind::Execute) {
        touch(st.index);
      } else if (const ComputeSet& cs = exe.computeSets[st.index]; startsOp(st.index)) {
        for (int t : fusion.inputsOf(g.op(cs.op))) touch(t);
        for (int t : fusion.outputsOf(g.op(cs.op))) touch(t);
      }
      ++pos;
    }
    std::vector<bool> persistent(n, false);
    for (const Tensor& t : g.tensors())
      persistent[t.id] =
          !fusion.elided[t.id] && (t.kind != TensorKind::Activation || last[t.id] < 0);
    for (int t : g.outputs()) persistent[t] = true;
    planReshapeViews(persistent, first, last);

    auto aligned = [](i64 b) { return (std::max<i64>(b, 1) + 63) / 64 * 64; };
    std::vector<i64> offset(n, 0);
    i64 persistentBytes = 0;
    for (const Tensor& t : g.tensors())
      if (persistent[t.id]) {
        offset[t.id] = persistentBytes;
        persistentBytes += aligned(t.bytes());
      }
    // First fit over lifetimes (larger tensors first among those born at the same step); a
    // reshape's view takes its source's bytes (below).
    std::vector<int> order;
    for (const Tensor& t : g.tensors())
      if (!persistent[t.id] && !fusion.elided[t.id] && viewOf[t.id] < 0) order.push_back(t.id);
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return g.tensor(a).bytes() > g.tensor(b).bytes(); });
    std::vector<LiveRange> ranges;
    for (int t : order) ranges.push_back({first[t], last[t], g.tensor(t).bytes()});
    const i64 peak = placeFirstFit(ranges, 64);
    for (size_t i = 0; i < order.size(); ++i) offset[order[i]] = persistentBytes + ranges[i].offset;
    fusedArena = std::make_unique<AlignedBytes>(static_cast<size_t>(persistentBytes + peak));
    for (size_t t = 0; t < n; ++t)
      tensorMem.push_back(fusion.elided[t] ? nullptr
                                           : fusedArena->p + offset[viewOf[t] < 0 ? t : viewOf[t]]);
  }

  // A reshape moves no bytes: its output is a view of its input's memory when both are
  // activations the engine places by lifetime (never written in place: only variables are),
  // so the reshape runs nothing and the source lives as long as its last view is read. The
  // [2, 16, 512, 512] attention scores' reshapes copied 4 MB each (BERT at sequence 512).
  // viewOf[t]: the tensor whose memory t is (never itself a view), or -1.
  std::vector<int> viewOf;
  void planReshapeViews(const std::vector<bool>& persistent, std::vector<i64>& first,
                        std::vector<i64>& last) {
    viewOf.assign(g.tensors().size(), -1);
    auto placed = [&](int t) {
      return !persistent[t] && !fusion.elided[t] && last[t] >= 0 &&
             g.tensor(t).kind == TensorKind::Activation;
    };
    for (const Op& op : g.ops()) {  // program order: a view's source is planned first
      if (op.kind != OpKind::Reshape || fusion.role[op.id] != HostFusionPlan::Role::kNone) continue;
      const int x = op.inputs[0], y = op.outputs[0];
      if (!placed(x) || !placed(y)) continue;
      const int root = viewOf[x] < 0 ? x : viewOf[x];
      viewOf[y] = root;
      first[root] = std::min(first[root], first[y]);
      last[root] = std::max(last[root], last[y]);
    }
  }
  bool isView(int t) const {
    return !viewOf.empty() && viewOf[t] >= 0;
  }

  float* F(int t) {
    if (auto it = halfScratch.find(t); it != halfScratch.end()) return it->second;
    return reinterpret_cast<float*>(tensorMem[t]);
  }
  const std::int32_t* I(int t) {
    return reinterpret_cast<const std::int32_t*>(tensorMem[t]);
  }

  // An elementwise chain (host_fusion.h): all its ops over one cache-sized chunk at a time, the
  // links in a chunk buffer, never in memory; the same element loops as the ops run one by one
  // (a single-value operand is spread over a chunk, a broadcast one gathered into it; an
  // absorbed broadcast op's values get its + 0), so the results are the same bits.
  std::function<void()> makeElementwiseChain(const Op& last) {
    struct Step {
      bool binary = false;
      kernels::UnaryKind unary{};
      kernels::BinaryKind binaryKind{};
      float alpha = 1.0f;
      int arity = 1;
      std::array<const float*, 2> in{};  // nullptr: the previous op's output (the link)
      std::array<bool, 2> single{};      // a one-element operand
      // An operand broadcast to the result: its strides per result dimension (rank > 0), and
      // whether it stands for an absorbed broadcast op (x + 0, taken once per run into
      // `zeroed`).
      std::array<kernels::BroadcastShape, 2> broadcast{};
      std::array<bool, 2> plusZero{};
      std::array<i64, 2> elements{};
    };
    const std::vector<int>& ids = fusion.chain[last.id];
    std::vector<Step> steps;
    for (size_t i = 0; i < ids.size(); ++i) {
      const Op& op = g.op(ids[i]);
      if (op.kind == OpKind::ApplyUpdate) break;  // the end (below)
      Step s;
      s.binary = op.kind == OpKind::Binary;
      if (s.binary) {
        s.binaryKind = binaryKindOf(op);
      } else {
        s.unary = unaryKindOf(op);
        s.alpha = static_cast<float>(op.attrs.getFloat("alpha", 1.0));
      }
      s.arity = static_cast<int>(op.inputs.size());
      const Tensor& y = g.tensor(op.outputs[0]);
      for (int k = 0; k < s.arity; ++k) {
        const auto ks = static_cast<size_t>(k);
        int t = op.inputs[ks];
        const bool link = i > 0 && t == g.op(ids[i - 1]).outputs[0];
        if (link) continue;
        if (fusion.elided[static_cast<size_t>(t)]) {  // an absorbed broadcast op's result
          t = g.op(g.tensor(t).producer).inputs[0];
          s.plusZero[ks] = true;
        }
        s.in[ks] = F(t);
        const i64 e = g.tensor(t).elements();
        s.elements[ks] = e;
        s.single[ks] = e == 1 && !s.plusZero[ks];
        if (e != y.elements() && !s.single[ks]) {
          const kernels::BroadcastShape b =
              kernels::BroadcastShape::make(y.shape, g.tensor(t).shape);
          s.broadcast[ks].rank = b.rank;
          for (int d = 0; d < b.rank; ++d) {
            s.broadcast[ks].outDims[d] = b.outDims[d];
            s.broadcast[ks].aStrides[d] = b.bStrides[d];  // the operand's strides
          }
        }
      }
      steps.push_back(s);
    }
    // An apply_update ending the chain: its addends (the link among them) into its target.
    const bool update = last.kind == OpKind::ApplyUpdate;
    ApplyUpdateForm u;
    std::array<const float*, 3> addends{};  // nullptr: the link
    const float *factor = nullptr, *skip = nullptr;
    if (update) {
      u = applyUpdateForm(last);
      const int link = g.op(ids[ids.size() - 2]).outputs[0];
      for (int i = 0; i < u.k; ++i)
        addends[static_cast<size_t>(i)] =
            last.inputs[static_cast<size_t>(1 + i)] == link ? nullptr : F(last.inputs[1 + i]);
      factor = u.factorInput >= 0 ? F(last.inputs[u.factorInput]) : nullptr;
      skip = u.skipInput >= 0 ? F(last.inputs[u.skipInput]) : nullptr;
    }
    float* y = F(update ? last.inputs[0] : last.outputs[0]);
    const i64 n = g.tensor(update ? last.inputs[0] : last.outputs[0]).elements();
    // The absorbed broadcast ops' values (x + 0), per step and operand.
    auto zeroed = std::make_shared<std::vector<std::vector<float>>>(2 * steps.size());
    for (size_t i = 0; i < steps.size(); ++i)
      for (size_t k = 0; k < 2; ++k)
        if (steps[i].plusZero[k])
          (*zeroed)[2 * i + k].resize(static_cast<size_t>(steps[i].elements[k]));
    return [steps, y, n, update, u, addends, factor, skip, zeroed] {
      if (update && skip && *skip != 0.0f) return;  // as apply_update: NaN (overflow) too
      std::vector<Step> run = steps;
      for (size_t i = 0; i < run.size(); ++i)
        for (size_t k = 0; k < 2; ++k)
          if (run[i].plusZero[k]) {
            std::vector<float>& z = (*zeroed)[2 * i + k];
            for (size_t j = 0; j < z.size(); ++j) z[j] = run[i].in[k][j] + 0.0f;
            run[i].in[k] = z.data();
          }
      // 512 elements: the link and two operand chunks stay in L1 beside the streamed operands
      // (2,048 ran the SE gradient's chain at half the speed of a lone binary op).
      constexpr i64 kChunk = 512;
      const i64 chunks = (n + kChunk - 1) / kChunk;
      const int team = n < (i64{1} << 14) ? 1 : fz::numThreads();
#pragma omp parallel for schedule(static) num_threads(team)
      for (i64 c = 0; c < chunks; ++c) {
        float link[kChunk], spread[2][kChunk];
        const i64 b = c * kChunk, len = std::min(kChunk, n - b);
        for (size_t i = 0; i < run.size(); ++i) {
          const Step& s = run[i];
          float* out = i + 1 == run.size() && !update ? y + b : link;
          // A broadcast operand: the op over each run of the result's innermost dimension,
          // reading the operand where it is (or its one value spread, where it repeats
          // innermost).
          const int bk = s.broadcast[0].rank > 0 ? 0 : (s.broadcast[1].rank > 0 ? 1 : -1);
          if (bk >= 0) {
            const kernels::BroadcastShape& shape = s.broadcast[static_cast<size_t>(bk)];
            const i64 stride = shape.aStrides[shape.rank - 1];
            const int other = 1 - bk;
            const bool otherBroadcast = s.broadcast[static_cast<size_t>(other)].rank > 0;
            if (otherBroadcast)  // both broadcast: the other gathered whole into its buffer
              forEachBroadcastRun(
                  s.broadcast[static_cast<size_t>(other)], b, len,
                  [&](i64 done, i64 offset, i64 length) {
                    const float* p = s.in[static_cast<size_t>(other)];
                    const i64 st = s.broadcast[static_cast<size_t>(other)]
                                       .aStrides[s.broadcast[static_cast<size_t>(other)].rank - 1];
                    for (i64 j = 0; j < length; ++j) spread[other][done + j] = p[offset + j * st];
                  });
            forEachBroadcastRun(shape, b, len, [&](i64 done, i64 offset, i64 length) {
              const float* p = s.in[static_cast<size_t>(bk)] + offset;
              if (stride == 0) {
                std::fill(spread[bk] + done, spread[bk] + done + length, *p);
                p = spread[bk] + done;
              }
              const float* q = s.in[static_cast<size_t>(other)];
              if (!q)
                q = link + done;
              else if (otherBroadcast)
                q = spread[other] + done;
              else if (s.single[static_cast<size_t>(other)])
                q = nullptr;
              else
                q = q + b + done;
              std::array<const float*, 2> x{};
              x[static_cast<size_t>(bk)] = p;
              if (q) {
                x[static_cast<size_t>(other)] = q;
              } else {  // one value
                std::fill(spread[other] + done, spread[other] + done + length,
                          *s.in[static_cast<size_t>(other)]);
                x[static_cast<size_t>(other)] = spread[other] + done;
              }
              fz::binaryChunk(s.binaryKind, x[0], x[1], out + done, length);
            });
            continue;
          }
          std::array<const float*, 2> x{};
          for (int k = 0; k < s.arity; ++k) {
            const float* p = s.in[static_cast<size_t>(k)];
            if (!p) {
              x[static_cast<size_t>(k)] = link;
            } else if (s.single[static_cast<size_t>(k)]) {
              std::fill(spread[k], spread[k] + len, *p);
              x[static_cast<size_t>(k)] = spread[k];
            } else {
              x[static_cast<size_t>(k)] = p + b;
            }
          }
          if (s.binary)
            fz::binaryChunk(s.binaryKind, x[0], x[1], out, len);
          else
            fz::unaryChunk(s.unary, s.alpha, x[0], out, len);
        }
        if (update) {
          std::array<const float*, 3> xb{};
          for (int i = 0; i < u.k; ++i) {
            const float* a = addends[static_cast<size_t>(i)];
            xb[static_cast<size_t>(i)] = a ? a + b : link;
          }
          kernels::applyUpdate(u.keep, factor ? *factor : 1.0f, u.k, xb.data(), u.c.data(), y + b,
                               len);
        }
      }
    };
  }

  // An update group (host_fusion.h): its ops over one cache-sized chunk at a time, in program
  // order, with the element loops of the ops and of apply_update (the same bits as op by op);
  // tensors only the group reads live in chunk buffers, the others are written as the ops
  // produce them; a square's sum is taken in double per chunk and the chunks' sums added in
  // order (the same for any thread count).
  // An update group that is LAMB's moments and update direction (kernels/lamb_update.h): the
  // tensors and constants fixed at build time, the single values it reads at each run.
  struct LambWiring {
    kernels::LambMoments fixed;
    const float *clip = nullptr, *mCorrection = nullptr, *vCorrection = nullptr, *eps = nullptr;
    const float *mFactor = nullptr, *vFactor = nullptr, *mSkip = nullptr, *vSkip = nullptr;
    kernels::LambMoments thisRun() const {
      kernels::LambMoments a = fixed;
      a.clip = *clip;
      a.mCorrection = *mCorrection;
      a.vCorrection = *vCorrection;
      a.eps = *eps;
      a.mFactor = mFactor ? *mFactor : 1.0f;
      a.vFactor = vFactor ? *vFactor : 1.0f;
      a.mSkipped = mSkip && *mSkip != 0.0f;  // as apply_update: NaN (overflow) too
      a.vSkipped = vSkip && *vSkip != 0.0f;
      return a;
    }
  };

  std::function<void()> makeUpdateGroup(const Op& runner) {
    enum class Kind : unsigned char { kUnary, kBinary, kUpdate, kSquareSum };
    // Where an operand's chunk comes from: memory (at the chunk's first element), a chunk
    // buffer, or a single value spread over a buffer.
    struct Source {
      const float* memory = nullptr;
      int buffer = -1;
    };
    struct Member {
      Kind kind{};
      kernels::UnaryKind unary{};
      kernels::BinaryKind binary{};
      float alpha = 1.0f;
      int arity = 0;
      std::array<Source, 3> in{};  // unary / binary operands, or apply_update's addends
      float* outMemory = nullptr;  // output (or apply_update's target) in memory, or
      int outBuffer = -1;          // in a chunk buffer
      ApplyUpdateForm u{};
      const float *factor = nullptr, *skip = nullptr;
      float* sum = nullptr;  // kSquareSum: the reduce's output
      int sumIndex = -1;
    };
    const std::vector<int>& ids = fusion.group[runner.id];
    std::unordered_map<int, int> bufferOf;   // elided tensor -> chunk buffer
    std::vector<const float*> spreadValues;  // buffer -> the single value it spreads (or null)
    auto newBuffer = [&](const float* value) {
      spreadValues.push_back(value);
      return static_cast<int>(spreadValues.size()) - 1;
    };
    auto source = [&](int t) {
      if (auto it = bufferOf.find(t); it != bufferOf.end()) return Source{nullptr, it->second};
      if (g.tensor(t).elements() == 1) return Source{nullptr, newBuffer(F(t))};
      return Source{F(t), -1};
    };
    std::vector<Member> members;
    int sums = 0;
    i64 n = 0;
    for (int id : ids) {
      const Op& op = g.op(id);
      Member m;
      if (fusion.sumOut[id] >= 0) {  // a square whose sum the group takes (its reduce: skipped)
        m.kind = Kind::kSquareSum;
        m.arity = 1;
        m.in[0] = source(op.inputs[0]);
        m.sum = F(fusion.sumOut[id]);
        m.sumIndex = sums++;
        n = g.tensor(op.inputs[0]).elements();
        members.push_back(m);
        continue;
      }
      if (op.kind == OpKind::ApplyUpdate) {
        m.kind = Kind::kUpdate;
        m.u = applyUpdateForm(op);
        m.arity = m.u.k;
        for (int i = 0; i < m.u.k; ++i) m.in[static_cast<size_t>(i)] = source(op.inputs[1 + i]);
        m.factor = m.u.factorInput >= 0 ? F(op.inputs[m.u.factorInput]) : nullptr;
        m.skip = m.u.skipInput >= 0 ? F(op.inputs[m.u.skipInput]) : nullptr;
        m.outMemory = F(op.inputs[0]);
        n = g.tensor(op.inputs[0]).elements();
        members.push_back(m);
        continue;
      }
      if (op.kind != OpKind::Unary && op.kind != OpKind::Binary) continue;  // a square's reduce
      m.kind = op.kind == OpKind::Binary ? Kind::kBinary : Kind::kUnary;
      if (m.kind == Kind::kBinary) {
        m.binary = binaryKindOf(op);
      } else {
        m.unary = unaryKindOf(op);
        m.alpha = static_cast<float>(op.attrs.getFloat("alpha", 1.0));
      }
      m.arity = static_cast<int>(op.inputs.size());
      for (int k = 0; k < m.arity; ++k)
        m.in[static_cast<size_t>(k)] = source(op.inputs[static_cast<size_t>(k)]);
      const int y = op.outputs[0];
      if (fusion.elided[static_cast<size_t>(y)])
        bufferOf[y] = m.outBuffer = newBuffer(nullptr);
      else
        m.outMemory = F(y);
      n = g.tensor(y).elements();
      members.push_back(m);
    }
    static constexpr i64 kChunk = 1024;
    const i64 chunks = (n + kChunk - 1) / kChunk;
    const int buffers = static_cast<int>(spreadValues.size());
    auto partials = std::make_shared<std::vector<double>>(static_cast<size_t>(chunks * sums));
    // LAMB's moments and update direction for one weight (11 members as optimizers/ lowers
    // them, then the square-sums of w and u) run as one loop (kernels/lamb_update.h); members
    // before them (another weight's update of the same size) run as before, chunk by chunk.
    size_t lambFirst = members.size();
    const std::optional<LambWiring> lamb = [&]() -> std::optional<LambWiring> {
      std::vector<size_t> at;  // the members but the square-sums
      for (size_t i = 0; i < members.size(); ++i)
        if (members[i].kind != Kind::kSquareSum) at.push_back(i);
      if (at.size() < 11) return std::nullopt;
      const size_t first = at[at.size() - 11];
      std::vector<const Member*> s;
      for (size_t k = at.size() - 11; k < at.size(); ++k) s.push_back(&members[at[k]]);
      auto spread = [&](const Source& x) {
        return x.buffer >= 0 ? spreadValues[static_cast<size_t>(x.buffer)] : nullptr;
      };
      auto slot = [&](const Source& x) {  // an intermediate's buffer, or -1
        return x.buffer >= 0 && !spreadValues[static_cast<size_t>(x.buffer)] ? x.buffer : -1;
      };
      auto binary = [&](const Member* m, kernels::BinaryKind k) {
        return m->kind == Kind::kBinary && m->binary == k && m->outBuffer >= 0;
      };
      auto unary = [&](const Member* m, kernels::UnaryKind k) {
        return m->kind == Kind::kUnary && m->unary == k && m->outBuffer >= 0;
      };
      auto update = [&](const Member* m, int in) {
        return m->kind == Kind::kUpdate && m->arity == 1 && slot(m->in[0]) == in;
      };
      using BK = kernels::BinaryKind;
      using UK = kernels::UnaryKind;
      const int gc = s[0]->outBuffer, g2 = s[2]->outBuffer, mHat = s[4]->outBuffer,
                vHat = s[5]->outBuffer, vSqrt = s[6]->outBuffer, denominator = s[7]->outBuffer,
                step = s[8]->outBuffer, decay = s[9]->outBuffer;
      const float* m = s[1]->outMemory;
      const float* v = s[3]->outMemory;
      // gc = g * clip; m, v updates; m / c1; v / c2; sqrt; + eps; div; decay * w; u = sum.
      const bool wired =
          binary(s[0], BK::Mul) && s[0]->in[0].memory && spread(s[0]->in[1]) && update(s[1], gc) &&
          unary(s[2], UK::Square) && slot(s[2]->in[0]) == gc && update(s[3], g2) &&
          binary(s[4], BK::Div) && s[4]->in[0].memory == m && spread(s[4]->in[1]) &&
          binary(s[5], BK::Div) && s[5]->in[0].memory == v && spread(s[5]->in[1]) &&
          unary(s[6], UK::Sqrt) && slot(s[6]->in[0]) == vHat && binary(s[7], BK::Add) &&
          slot(s[7]->in[0]) == vSqrt && spread(s[7]->in[1]) && binary(s[8], BK::Div) &&
          slot(s[8]->in[0]) == mHat && slot(s[8]->in[1]) == denominator && unary(s[9], UK::Scale) &&
          s[9]->in[0].memory && s[10]->kind == Kind::kBinary && s[10]->binary == BK::Add &&
          s[10]->outMemory && slot(s[10]->in[0]) == step && slot(s[10]->in[1]) == decay;
      if (!wired) return std::nullopt;
      const float* g = s[0]->in[0].memory;
      const float* w = s[9]->in[0].memory;
      const float* u = s[10]->outMemory;
      // The loop reads and writes each element once: g, m, v, w and u must not overlap (the
      // arena shares memory between tensors whose lifetimes do not meet).
      const std::vector<const float*> tensors = {g, m, v, w, u};
      for (size_t i = 0; i < tensors.size(); ++i)
        for (size_t j = i + 1; j < tensors.size(); ++j)
          if (tensors[i] < tensors[j] + n && tensors[j] < tensors[i] + n) return std::nullopt;
      // Members before the eleven run first: they must not touch what the loop writes nor
      // write what it reads; the square-sums come after them and read w or u.
      auto touches = [&](const float* p) {
        return p && (p == m || p == v || p == u || p == g || p == w);
      };
      for (size_t i = 0; i < members.size(); ++i) {
        const Member& x = members[i];
        if (x.kind == Kind::kSquareSum) {
          if (i < first || (x.in[0].memory != w && x.in[0].memory != u)) return std::nullopt;
          continue;
        }
        if (i >= first) continue;
        if (touches(x.outMemory)) return std::nullopt;
        for (int k = 0; k < x.arity; ++k) {
          const float* p = x.in[static_cast<size_t>(k)].memory;
          if (p && (p == m || p == v || p == u)) return std::nullopt;
        }
      }
      lambFirst = first;
      LambWiring l;
      l.fixed.g = g;
      l.fixed.m = s[1]->outMemory;
      l.fixed.mKeep = s[1]->u.keep;
      l.fixed.mC = s[1]->u.c[0];
      l.fixed.v = s[3]->outMemory;
      l.fixed.vKeep = s[3]->u.keep;
      l.fixed.vC = s[3]->u.c[0];
      l.fixed.w = w;
      l.fixed.decay = s[9]->alpha;
      l.fixed.u = s[10]->outMemory;
      l.clip = spread(s[0]->in[1]);
      l.mCorrection = spread(s[4]->in[1]);
      l.vCorrection = spread(s[5]->in[1]);
      l.eps = spread(s[7]->in[1]);
      l.mFactor = s[1]->factor;
      l.vFactor = s[3]->factor;
      l.mSkip = s[1]->skip;
      l.vSkip = s[3]->skip;
      return l;
    }();
    return [members, spreadValues, buffers, n, chunks, sums, partials, lamb, lambFirst] {
      std::vector<bool> skipped(members.size(), false);  // as apply_update: NaN (overflow) too
      for (size_t i = 0; i < members.size(); ++i)
        skipped[i] = members[i].skip && *members[i].skip != 0.0f;
      std::optional<kernels::LambMoments> moments;
      if (lamb) moments = lamb->thisRun();
      const int team = n < (i64{1} << 14) ? 1 : fz::numThreads();
      double* part = partials->data();
#pragma omp parallel num_threads(team)
      {
        std::vector<float> space(static_cast<size_t>(buffers * kChunk));
        auto buffer = [&](int b) { return space.data() + static_cast<i64>(b) * kChunk; };
        for (int b = 0; b < buffers; ++b)
          if (spreadValues[static_cast<size_t>(b)])
            std::fill(buffer(b), buffer(b) + kChunk, *spreadValues[static_cast<size_t>(b)]);
#pragma omp for schedule(static)
        for (i64 c = 0; c < chunks; ++c) {
          const i64 begin = c * kChunk, len = std::min(kChunk, n - begin);
          auto at = [&](const Source& s) {
            return s.memory ? s.memory + begin : static_cast<const float*>(buffer(s.buffer));
          };
          auto run = [&](size_t i) {
            const Member& m = members[i];
            switch (m.kind) {
              case Kind::kSquareSum: {
                const float* x = at(m.in[0]);
                double acc = 0;
#pragma omp simd reduction(+ : acc)
                for (i64 k = 0; k < len; ++k) acc += static_cast<double>(x[k]) * x[k];
                part[c * sums + m.sumIndex] = acc;
                break;
              }
              case Kind::kUpdate: {
                if (skipped[i]) break;
                std::array<const float*, 3> x{};
                for (int k = 0; k < m.arity; ++k)
                  x[static_cast<size_t>(k)] = at(m.in[static_cast<size_t>(k)]);
                kernels::applyUpdate(m.u.keep, m.factor ? *m.factor : 1.0f, m.arity, x.data(),
                                     m.u.c.data(), m.outMemory + begin, len);
                break;
              }
              case Kind::kUnary:
              case Kind::kBinary: {
                float* y = m.outMemory ? m.outMemory + begin : buffer(m.outBuffer);
                if (m.kind == Kind::kBinary)
                  fz::binaryChunk(m.binary, at(m.in[0]), at(m.in[1]), y, len);
                else
                  fz::unaryChunk(m.unary, m.alpha, at(m.in[0]), y, len);
                break;
              }
            }
          };
          if (moments) {
            for (size_t i = 0; i < lambFirst; ++i) run(i);
            kernels::lambMoments(*moments, begin, len);
            for (size_t i = lambFirst; i < members.size(); ++i)
              if (members[i].kind == Kind::kSquareSum) run(i);
          } else {
            for (size_t i = 0; i < members.size(); ++i) run(i);
          }
        }
      }
      for (const Member& m : members) {
        if (m.kind != Kind::kSquareSum) continue;
        double total = 0;
        for (i64 c = 0; c < chunks; ++c) total += part[c * sums + m.sumIndex];
        *m.sum = static_cast<float>(total);
      }
    };
  }

  // The host fusions of elementwise ops (host_fusion.h) run kernels of their own, not the op's
  // `fused` facet: they belong to the engine's fusion plan, not to one op kind.
  std::function<void()> makeElementwiseFusion(const Op& op) {
    using Role = HostFusionPlan::Role;
    switch (fusion.role[op.id]) {
      case Role::kElementwiseChain:
        return makeElementwiseChain(op);
      case Role::kUpdateGroup:
        return makeUpdateGroup(op);
      case Role::kSquareSum: {  // square -> reduce sum as one pass
        const float* x = F(op.inputs[0]);
        float* sum = F(fusion.sumOut[op.id]);
        const i64 n = g.tensor(op.outputs[0]).elements();
        return [=] { *sum = fz::sumOfSquares(x, n); };
      }
      case Role::kMulReduceSum: {  // mul -> reduce sum as one pass
        const float *a = F(op.inputs[0]), *b = F(op.inputs[1]);
        float* sum = F(fusion.sumOut[op.id]);
        const kernels::ReduceShape s =
            reduceShapeOf(g, g.op(g.tensor(fusion.sumOut[op.id]).producer));
        return [=] { fz::mulReduceSum(s, a, b, sum); };
      }
      case Role::kAddRelu: {  // the add writes relu(a + b) as the ReLU's output
        float *a = F(op.inputs[0]), *b = F(op.inputs[1]), *y = F(fusion.reluOut[op.id]);
        const i64 n = g.tensor(op.outputs[0]).elements();
        return [=] { fz::addRelu(a, b, y, n); };
      }
      case Role::kAddBatchNormRelu: {  // batch_norm_train -> add -> relu in one pass
        const int bn = fusion.forwardOp[op.id];
        const auto [rows, c] = rowsChannelsOf(g, fusion.normX[op.id]);
        const auto* affine = reinterpret_cast<const float*>(fusionBuffer(bn));
        float *x = F(fusion.normX[op.id]), *other = F(fusion.addOther[op.id]),
              *y = F(fusion.reluOut[op.id]);
        auto* bits = fusion.writesReluBits[op.id]
                         ? static_cast<std::uint8_t*>(
                               allocateFusionBuffer(op.id, static_cast<size_t>((rows * c + 7) / 8)))
                         : nullptr;
        const int otherBn = fusion.otherBn[op.id];
        const auto* otherAffine =
            otherBn < 0 ? nullptr : reinterpret_cast<const float*>(fusionBuffer(otherBn));
        return [=] { fz::batchNormAddRelu(x, affine, other, otherAffine, y, rows, c, bits); };
      }
      case Role::kAddReluBackward: {  // add + relu_grad of the residual's backward
        float *a = F(op.inputs[0]), *b = F(op.inputs[1]), *dx = F(fusion.reluOut[op.id]);
        const i64 n = g.tensor(op.outputs[0]).elements();
        if (const int from = fusion.reluBitsFrom[op.id]; from >= 0) {
          const auto* bits = reinterpret_cast<const std::uint8_t*>(fusionBuffer(from));
          return [=] { fz::addReluBackwardBits(a, b, bits, dx, n); };
        }
        float* x = F(fusion.reluX[op.id]);
        return [=] { fz::addReluBackward(a, b, x, dx, n); };
      }
      default:
        return {};
    }
  }

  std::function<void()> makeFused(const Op& op) {
    if (auto fused = makeElementwiseFusion(op)) return fused;
    if (const ops::OpInfo* info = ops::find(op.kind)) {
      ops::FusedArgs a{g, op, {}, {}, {}};
      for (int t : op.inputs) {
        const bool index = g.tensor(t).dtype == DType::I32;
        a.in.push_back(index ? nullptr : F(t));
        a.ints.push_back(index ? I(t) : nullptr);
      }
      for (int t : op.outputs) a.out.push_back(F(t));
      if (!info->fused)  // lowered kinds (optimizer_update) never reach an engine
        throw std::logic_error(fmt::format("fused engine: no kernel for op '{}'", opName(op.kind)));
      return info->fused(a);
    }
    throw std::logic_error(
        fmt::format("fused engine: op '{}' is not a registered op kind", opName(op.kind)));
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
    DType dt = exe.buffers[w.buffer].dtype;
    if (isHalf(dt) && buildingOp) {
      auto buf = std::make_shared<std::vector<float>>(static_cast<size_t>(w.end - w.begin));
      vertexScratch.push_back(buf);
      const std::byte* src = windowAddr(tile, w);
      float* f = buf->data();
      i64 n = w.end - w.begin;
      preConvert.push_back([=] { widen(dt, src, f, n); });
      return FW{f, w.begin, n};
    }
    return FW{reinterpret_cast<const float*>(windowAddr(tile, w)), w.begin, w.end - w.begin};
  }
  IW iw(int tile, const Window& w) {
    return IW{reinterpret_cast<const std::int32_t*>(windowAddr(tile, w)), w.begin, w.end - w.begin};
  }
  float* outPtr(int tile, const OutRegion& o) {
    DType dt = exe.buffers[o.buffer].dtype;
    if (isHalf(dt) && buildingOp) {
      i64 n = o.end - o.begin;
      auto buf = std::make_shared<std::vector<float>>(static_cast<size_t>(n));
      vertexScratch.push_back(buf);
      std::byte* dst = sliceAddr(tile, o.buffer, o.begin);
      float* f = buf->data();
      if (buildingInPlaceOp) preConvert.push_back([=] { widen(dt, dst, f, n); });
      bool sr = stochasticWrites(*buildingOp);
      const int key = roundingKeyOf(exe.buffers[o.buffer].tensor);
      std::uint64_t* stepPtr = &step;
      const std::uint64_t* basePtr = &roundingSeedBase;
      i64 first = o.begin;
      postConvert.push_back([=] {
        narrow(dt, f, dst, n, sr, sr ? roundingSeed(*basePtr, *stepPtr, key) : 0, first);
      });
      return f;
    }
    return reinterpret_cast<float*>(sliceAddr(tile, o.buffer, o.begin));
  }

  std::function<void()> makeVertex(const ComputeSet& cs, const Vertex& v) {
    const Op& op = g.op(cs.op);
    const int t = v.tile;
    std::vector<FW> W;
    for (const Window& w : v.inputs) W.push_back(fw(t, w));
    if (const ops::OpInfo* info = ops::find(op.kind)) {
      ops::VertexArgs a{g, op, cs.phase, W, {}, {}, v.work, v.red, exe.target};
      for (const Window& w : v.inputs) a.ints.push_back(iw(t, w));
      for (const OutRegion& o : v.outputs) a.out.push_back(outPtr(t, o));
      if (!info->vertex)
        throw std::logic_error(
            fmt::format("tile engine: no vertex kernel for op '{}'", opName(op.kind)));
      return info->vertex(a);
    }
    throw std::logic_error(
        fmt::format("tile engine: op '{}' is not a registered op kind", opName(op.kind)));
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
  // Fused mode: a tensor between two ops that run as one kernel has no memory.
  void checkMaterialised(int t) const {
    if (mode == EngineMode::Fused && fusion.elided[static_cast<size_t>(t)])
      throw std::invalid_argument(fmt::format(
          "engine: tensor '{}' is not materialised in fused mode: its producer and its only "
          "reader run as one kernel (host_fusion.h); mark it as a graph output to keep it",
          g.tensor(t).name));
  }
  void write(int t, const void* data) {
    const Tensor& T = g.tensor(t);
    checkMaterialised(t);
    if (mode == EngineMode::Fused) {
      std::memcpy(tensorMem[t], data, static_cast<size_t>(T.bytes()));
      return;
    }
    i64 es = sizeOf(T.dtype);
    for (const TileSlice& s : exe.mapping[t])
      std::memcpy(arenas[s.tile]->p + s.offset, static_cast<const std::byte*>(data) + s.begin * es,
                  static_cast<size_t>((s.end - s.begin) * es));
  }
  void read(int t, void* data) const {
    const Tensor& T = g.tensor(t);
    checkMaterialised(t);
    if (mode == EngineMode::Fused) {
      std::memcpy(data, tensorMem[t], static_cast<size_t>(T.bytes()));
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

  int roundingKeyOf(int t) const {
    return exe.roundingKeys.empty() || t < 0 ? t : exe.roundingKeys[static_cast<size_t>(t)];
  }

  void runSegment(int firstOp, int endOp, std::uint64_t stepIndex) {
    step = stepIndex;
    for (const Program::Step& st : exe.program.body) {
      if (st.kind != Program::Step::Kind::Execute) continue;
      const ComputeSet& cs = exe.computeSets[st.index];
      if (cs.op < firstOp || cs.op >= endOp) continue;
      if (mode == EngineMode::Fused) {
        if (startsOp(st.index)) fusedSteps[cs.op]();
      } else {
        runComputeSet(st.index);
      }
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
              if (!startsOp(st.index)) break;
              if (profiling) {
                const double t0 = profileClock();
                fusedSteps[cs.op]();
                opSeconds[static_cast<size_t>(cs.op)] += profileClock() - t0;
              } else {
                fusedSteps[cs.op]();  // one host kernel per op
              }
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
      ++step;
    }
  }
};

Engine::Engine(std::shared_ptr<const Executable> exe, EngineMode mode, ReplicaContext replica,
               bool microBatchesInterleaved)
    : exe_(std::move(exe)),
      mode_(mode),
      replica_(replica),
      impl_(std::make_unique<Impl>(*exe_, mode, replica, microBatchesInterleaved)) {}

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
  const Tensor& t = exe_->graph.tensor(id);
  if (isHalf(t.dtype)) {  // f32 host values rounded (RNE) to the tensor's 16-bit storage
    if (static_cast<i64>(v.size()) != t.elements())
      throw std::invalid_argument(fmt::format("writeTensor '{}' {}{}: got {} values, expected {}",
                                              t.name, dtypeName(t.dtype), shapeStr(t.shape),
                                              v.size(), t.elements()));
    std::vector<std::uint16_t> h(v.size());
    narrow(t.dtype, v.data(), h.data(), t.elements(), false, 0, 0);
    writeTensor(id, h.data(), h.size() * 2);
    return;
  }
  writeTensor(id, v.data(), v.size() * sizeof(float));
}

std::vector<float> Engine::readFloats(int tensor) const {
  const Tensor& t = exe_->graph.tensor(tensor);
  std::vector<float> v(static_cast<size_t>(t.elements()));
  if (isHalf(t.dtype)) {  // widened exactly
    std::vector<std::uint16_t> h(v.size());
    readTensor(tensor, h.data(), h.size() * 2);
    widen(t.dtype, h.data(), v.data(), t.elements());
    return v;
  }
  if (t.dtype != DType::F32)
    throw std::invalid_argument(fmt::format("readFloats: '{}' is {}, not a floating-point tensor",
                                            t.name, dtypeName(t.dtype)));
  readTensor(tensor, v.data(), v.size() * sizeof(float));
  return v;
}

void Engine::setRoundingSeed(std::uint64_t seed) {
  impl_->roundingSeedBase = seed;
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

std::int64_t Engine::tensorMemoryBytes() const {
  std::int64_t bytes = 0;
  if (impl_->fusedArena) bytes += static_cast<std::int64_t>(impl_->fusedArena->n);
  for (const auto& a : impl_->fusedScratchPool) bytes += static_cast<std::int64_t>(a->n);
  for (const auto& a : impl_->arenas) bytes += static_cast<std::int64_t>(a->n);
  return bytes;
}

void Engine::setProfiling(bool on, bool cpuTime) {
  impl_->profiling = on;
  impl_->profileCpuTime = cpuTime;
  if (on && impl_->opSeconds.empty()) impl_->opSeconds.assign(exe_->graph.ops().size(), 0.0);
}

int Engine::hostFusedOps() const {
  return impl_->fusion.absorbedOps;
}

const std::vector<double>& Engine::opSeconds() const {
  return impl_->opSeconds;
}

void Engine::run() {
  impl_->run();
}

void Engine::runSegment(int firstOp, int endOp, std::uint64_t step) {
  impl_->runSegment(firstOp, endOp, step);
}

}  // namespace ipu
