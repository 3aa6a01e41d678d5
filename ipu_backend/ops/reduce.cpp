// reduce: sum, mean or max over a set of axes.
//   reduce(x) -> y: fn (sum, mean, max) over `axes` (distinct, in range), the reduced dims
//   dropped or (keep_dims) kept as 1
// Gradient (sum, mean): dy reshaped to keep_dims form, scaled by 1 / count for mean, broadcast
// back to x's shape; max has none. Planned as a split reduction: parts of the reduced extent
// write partial rows, a second phase combines them (sum, or max for max).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ipu_backend/compiler/op_shapes.h"
#include "ipu_backend/engine/host_fusion.h"
#include "ipu_backend/ir/builder.h"
#include "ipu_backend/kernels/fused.h"
#include "ipu_backend/kernels/reference.h"
#include "ipu_backend/ops/op_info.h"
#include "ipu_backend/precision/half.h"

namespace ipu::ops {
namespace {

std::vector<TensorType> infer(const std::vector<const Tensor*>& in, const Attrs& a,
                              const std::string& label) {
  expectFunction(a, reduceFunctionNames(), label);
  const Tensor& x = *in[0];
  std::vector<bool> red(x.shape.size(), false);
  for (i64 ax : a.getInts("axes")) {
    if (ax < 0 || ax >= static_cast<i64>(x.shape.size()) || red[ax])
      fail(label,
           fmt::format("invalid or repeated axis {} for '{}' {}", ax, x.name, shapeStr(x.shape)));
    red[ax] = true;
  }
  const bool keep = a.getBool("keep_dims", false);
  Shape out;
  for (size_t d = 0; d < x.shape.size(); ++d)
    if (!red[d])
      out.push_back(x.shape[d]);
    else if (keep)
      out.push_back(1);
  return {{out, x.dtype}};
}

void grad(const GradArgs& a) {
  if (!a.needs[0]) return;
  const std::string& fn = a.op.attrs.getString("fn");
  if (fn == "max")
    throw GraphError(fmt::format("autodiff: {} has no gradient rule (reduce max)", a.label));
  const Tensor x = a.g.tensor(a.op.inputs[0]);  // a copy: adding ops may reallocate tensors
  Shape kept = x.shape;
  i64 count = 1;
  for (i64 ax : a.op.attrs.getInts("axes")) {
    count *= kept[ax];
    kept[ax] = 1;
  }
  int d = a.b.reshape(a.dy[0], kept);
  if (fn == "mean") d = a.b.scale(d, 1.0 / static_cast<double>(count));
  a.accumulate(a.op.inputs[0], a.b.broadcast(d, x.shape));
}

// Kept dims on both sides of a reduced one (a spatial mean of [N, H, W, C] into [N, C]): the
// outputs of one outer index (a sample's C channels) read x within that index only, those of
// two read everything between them. The split reduction then cuts its vertices at the outputs
// per outer index (the kept dims after the first reduced one); 0 (no cut) otherwise.
i64 outputsPerOuterIndex(const kernels::ReduceShape& s) {
  const size_t r = s.inDims.size();
  size_t first = r;
  for (size_t d = 0; d < r && first == r; ++d)
    if (s.reduced[d]) first = d;
  bool keptBefore = false;
  for (size_t d = 0; d < first; ++d) keptBefore = keptBefore || s.inDims[d] > 1;
  i64 inner = 1;
  for (size_t d = first; d < r; ++d)
    if (!s.reduced[d]) inner *= s.inDims[d];
  return keptBefore && inner > 1 ? inner : 0;
}

// Whether every reduced axis comes after every kept one (size-1 axes aside): then output o
// reduces the contiguous block [o * reducedCount, (o + 1) * reducedCount) of x.
bool reducesTrailingAxes(const kernels::ReduceShape& s) {
  bool seenReduced = false;
  for (size_t d = 0; d < s.inDims.size(); ++d) {
    if (s.inDims[d] == 1) continue;
    if (s.reduced[d])
      seenReduced = true;
    else if (seenReduced)
      return false;
  }
  return true;
}

}  // namespace

IPU_REGISTER_OPS(reduce) {
  OpInfo r;
  r.def = {OpKind::Reduce,
           "reduce",
           1,
           1,
           {},
           {{"fn", AttrType::String, true},
            {"axes", AttrType::Ints, true},
            {"keep_dims", AttrType::Bool, false}}};
  r.doc = "x -> sum / mean / max of x over axes (keep_dims: reduced dims kept as 1)";
  r.inputDTypes = {floatTypes()};
  r.infer = infer;
  r.grad = grad;
  r.plan = [](PlanApi& p, const Op& op) {
    const auto s = reduceShapeOf(p.graph(), op);
    const bool isMax = reduceKindOf(op) == kernels::ReduceKind::Max;
    // Reduced axes trailing (a row per output: the max logit over the vocabulary): where the
    // sum is split, a vertex of many outputs reads its part of each row; one bounding window of
    // those rows gathered 4.7 MB of BERT-Large's [156, 30522] logits on one tile.
    const bool trailing = reducesTrailingAxes(s);
    const i64 rowLength = s.reducedCount();
    p.splitReduction(
        op, 0, op.outputs[0], s.reducedCount(), 4 * s.outElems(),
        [s, x = op.inputs[0], trailing, rowLength](Range out, Range red) {
          const Range b = reduceBounds(s, out, red);
          if (!trailing || red.size() < 8 || b.size() <= 2 * out.size() * red.size())
            return Windows{{x, b.begin, b.end}};
          Windows w;
          for (i64 o = out.begin; o < out.end; ++o)
            w.push_back({x, o * rowLength + red.begin, o * rowLength + red.end});
          return w;
        },
        isMax, outputsPerOuterIndex(s));
  };
  r.vertex = [](const VertexArgs& a) -> std::function<void()> {
    const auto k = reduceKindOf(a.op);
    if (a.phase == 1) return k == kernels::ReduceKind::Max ? maxPartials(a) : sumPartials(a);
    if (a.in.size() == 1)
      return [k, s = reduceShapeOf(a.g, a.op), x = a.in[0], y = a.out[0], work = a.work,
              red = a.red] { kernels::ref::reduce(k, s, x, y, work, red); };
    // A window per output row (the plan's trailing case): gathered into their span first
    // (vertex-local scratch; the plan counted only the windows).
    return [k, s = reduceShapeOf(a.g, a.op), W = a.in, y = a.out[0], work = a.work, red = a.red] {
      const FW& first = W.front();
      std::vector<float> span(static_cast<size_t>(W.back().base + W.back().size - first.base));
      for (const FW& w : W)
        std::copy(w.data, w.data + w.size, span.begin() + (w.base - first.base));
      kernels::ref::reduce(k, s, FW{span.data(), first.base, static_cast<i64>(span.size())}, y,
                           work, red);
    };
  };
  r.fused = [](const FusedArgs& a) -> std::function<void()> {
    return [k = reduceKindOf(a.op), s = reduceShapeOf(a.g, a.op), x = a.in[0], y = a.out[0]] {
      kernels::fused::reduce(k, s, x, y);
    };
  };
  // bf16 x (EfficientNet's squeeze-excitation pooling and its gradient's sums): widened as it
  // is read instead of into a whole f32 copy first; the same sums, rounded as the engine would.
  r.nativeFused = [](const NativeFusedArgs& a) -> std::function<void()> {
    const Op& op = a.op;
    const kernels::ReduceShape s = reduceShapeOf(a.g, op);
    const DType out = a.g.tensor(op.outputs[0]).dtype;
    if (a.fusion.role[static_cast<size_t>(op.id)] != HostFusionPlan::Role::kNone ||
        a.g.tensor(op.inputs[0]).dtype != DType::BF16 ||
        (out != DType::BF16 && out != DType::F32) ||
        op.attrs.getBool("stochastic_rounding", false) || !kernels::fused::reduceBf16Runs(s))
      return {};
    auto sums = std::make_shared<std::vector<float>>(static_cast<size_t>(s.outElems()));
    return [k = reduceKindOf(op), s, x = static_cast<const std::uint16_t*>(a.in[0]), y = a.out[0],
            out, sums] {
      float* f = out == DType::F32 ? static_cast<float*>(y) : sums->data();
      kernels::fused::reduceBf16(k, s, x, f);
      if (out == DType::BF16) precision::toBF16(f, static_cast<precision::bf16*>(y), s.outElems());
    };
  };
  r.cost = [](const Op&, int) { return 1.0; };
  r.costTraits.reduction = true;
  registerOp(std::move(r));
}

}  // namespace ipu::ops
