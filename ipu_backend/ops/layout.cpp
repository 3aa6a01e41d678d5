// Layout ops: reshape and transpose (moved here from the per-layer switches; the transpose
// kernels stay in kernels/reference.* and kernels/fused.*). Both move any dtype, i32 included.
//   reshape(x, attribute shape) -> the same elements in `shape` (as many elements)
//   transpose(x, attribute perm) -> y with y.shape[d] = x.shape[perm[d]]
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "ipu_backend/ir/builder.h"
#include "ipu_backend/kernels/fused.h"
#include "ipu_backend/kernels/reference.h"
#include "ipu_backend/ops/op_info.h"

namespace ipu::ops {
namespace {

namespace ref = kernels::ref;
namespace fz = kernels::fused;

DTypes anyTypes() {
  return {DType::F32, DType::F16, DType::BF16, DType::I32};
}

// Float view of an operand that may be i32 (layout ops copy bits).
const float* anyIn(const FusedArgs& a, int i) {
  return a.in[i] ? a.in[i] : reinterpret_cast<const float*>(a.ints[i]);
}

std::vector<int> intPerm(const std::vector<i64>& p) {
  return {p.begin(), p.end()};
}

// The input windows that output range `out` of a transpose reads: its contiguous input runs,
// neighbours merged while the merged window stays at most twice what it holds of the runs. A
// permutation that moves the innermost dimension leaves runs of a few elements: then one
// bounding window (a vertex per element run would cost more vertex state than it saves).
Windows transposeWindows(int input, const Shape& in, const std::vector<i64>& perm, Range out) {
  const size_t r = in.size();
  if (out.size() > 8192 || in.empty()) return {{input, 0, numElements(in)}};
  std::vector<i64> inStride(r, 1), outDims(r);
  for (size_t d = r - 1; d-- > 0;) inStride[d] = inStride[d + 1] * in[d + 1];
  for (size_t d = 0; d < r; ++d) outDims[d] = in[static_cast<size_t>(perm[d])];
  // The innermost dimension kept innermost: a row of it is one run (one index per row).
  const i64 row = perm[r - 1] == static_cast<i64>(r - 1) ? outDims[r - 1] : 1;
  std::vector<Range> runs;
  for (i64 o = out.begin; o < out.end;) {
    const i64 e = std::min(out.end, (o / row + 1) * row);
    i64 rem = o, idx = 0;
    for (size_t d = r; d-- > 0;) {
      idx += (rem % outDims[d]) * inStride[static_cast<size_t>(perm[d])];
      rem /= outDims[d];
    }
    if (!runs.empty() && runs.back().end == idx)
      runs.back().end += e - o;
    else
      runs.push_back({idx, idx + e - o});
    o = e;
  }
  std::sort(runs.begin(), runs.end(), [](Range a, Range b) { return a.begin < b.begin; });
  const Range bound{runs.front().begin,
                    std::max_element(runs.begin(), runs.end(), [](Range a, Range b) {
                      return a.end < b.end;
                    })->end};
  if (bound.size() <= 2 * out.size() || out.size() < 8 * static_cast<i64>(runs.size()))
    return {{input, bound.begin, bound.end}};
  Windows w;
  i64 held = 0;  // elements of runs in w.back()
  for (const Range& run : runs) {
    if (!w.empty() && std::max(w.back().end, run.end) - w.back().begin <= 2 * (held + run.size())) {
      w.back().end = std::max(w.back().end, run.end);
      held += run.size();
      continue;
    }
    w.push_back({input, run.begin, run.end});
    held = run.size();
  }
  return w;
}

std::vector<TensorType> inferReshape(const std::vector<const Tensor*>& in, const Attrs& a,
                                     const std::string& label) {
  const Shape& s = a.getInts("shape");
  if (numElements(s) != in[0]->elements() ||
      std::any_of(s.begin(), s.end(), [](i64 d) { return d < 1; }))
    fail(label, fmt::format("cannot reshape '{}' {} ({} elements) to {}", in[0]->name,
                            shapeStr(in[0]->shape), in[0]->elements(), shapeStr(s)));
  return {{s, in[0]->dtype}};
}

std::vector<TensorType> inferTranspose(const std::vector<const Tensor*>& in, const Attrs& a,
                                       const std::string& label) {
  const auto& perm = a.getInts("perm");
  const Shape& s = in[0]->shape;
  std::vector<bool> seen(s.size(), false);
  if (perm.size() != s.size()) fail(label, "perm must have one entry per dimension");
  Shape out;
  for (i64 p : perm) {
    if (p < 0 || p >= static_cast<i64>(s.size()) || seen[p])
      fail(label, fmt::format("perm {} is not a permutation of rank {}", shapeStr(perm), s.size()));
    seen[p] = true;
    out.push_back(s[p]);
  }
  return {{out, in[0]->dtype}};
}

}  // namespace

IPU_REGISTER_OPS(layout) {
  OpInfo r;
  r.def = {OpKind::Reshape, "reshape", 1, 1, {}, {{"shape", AttrType::Ints, true}}};
  r.doc = "x -> the same elements in attribute shape";
  r.inputDTypes = {anyTypes()};
  r.infer = inferReshape;
  r.grad = [](const GradArgs& a) {
    a.accumulate(a.op.inputs[0], a.b.reshape(a.dy[0], a.g.tensor(a.op.inputs[0]).shape));
  };
  r.plan = [](PlanApi& p, const Op& op) {
    p.perSlice(op, 0, {op.outputs[0]}, [op](Range w) {
      return Windows{{op.inputs[0], w.begin, w.end}};
    });
  };
  r.vertex = [](const VertexArgs& a) -> std::function<void()> {
    return [W = a.in, y = a.out[0], work = a.work] {
      for (i64 i = work.begin; i < work.end; ++i) y[i - work.begin] = W[0][i];
    };
  };
  // The engine converts no 16-bit operands around a reshape: it copies the stored bytes.
  r.fused = [](const FusedArgs& a) -> std::function<void()> {
    return [x = anyIn(a, 0), y = a.out[0],
            n = static_cast<size_t>(a.g.tensor(a.op.outputs[0]).bytes())] { std::memcpy(y, x, n); };
  };
  r.cost = [](const Op&, int) { return 1.0; };
  r.costTraits.elementwise = true;  // element i of y is element i of x
  r.tolerances.f32 = {0, 0, 1e-2};
  registerOp(std::move(r));

  OpInfo t;
  t.def = {OpKind::Transpose, "transpose", 1, 1, {}, {{"perm", AttrType::Ints, true}}};
  t.doc = "x -> y with y.shape[d] = x.shape[perm[d]]";
  t.inputDTypes = {anyTypes()};
  t.infer = inferTranspose;
  t.grad = [](const GradArgs& a) {
    const auto& perm = a.op.attrs.getInts("perm");
    std::vector<i64> inv(perm.size());
    for (size_t i = 0; i < perm.size(); ++i) inv[perm[i]] = static_cast<i64>(i);
    a.accumulate(a.op.inputs[0], a.b.transpose(a.dy[0], inv));
  };
  t.plan = [](PlanApi& p, const Op& op) {
    const Shape s = p.graph().tensor(op.inputs[0]).shape;
    const auto perm = op.attrs.getInts("perm");
    p.perSlice(op, 0, {op.outputs[0]},
               [op, s, perm](Range r) { return transposeWindows(op.inputs[0], s, perm, r); });
  };
  t.vertex = [](const VertexArgs& a) -> std::function<void()> {
    if (a.in.size() == 1)
      return [dims = a.g.tensor(a.op.inputs[0]).shape, perm = intPerm(a.op.attrs.getInts("perm")),
              W = a.in, y = a.out[0], work = a.work] { ref::transpose(dims, perm, W[0], y, work); };
    // Several windows (transposeWindows, ascending and disjoint): each element from its own.
    return [dims = a.g.tensor(a.op.inputs[0]).shape, perm = a.op.attrs.getInts("perm"), W = a.in,
            y = a.out[0], work = a.work] {
      const size_t r = dims.size();
      std::vector<i64> inStride(r, 1), outDims(r);
      for (size_t d = r - 1; d-- > 0;) inStride[d] = inStride[d + 1] * dims[d + 1];
      for (size_t d = 0; d < r; ++d) outDims[d] = dims[static_cast<size_t>(perm[d])];
      for (i64 o = work.begin; o < work.end; ++o) {
        i64 rem = o, idx = 0;
        for (size_t d = r; d-- > 0;) {
          idx += (rem % outDims[d]) * inStride[static_cast<size_t>(perm[d])];
          rem /= outDims[d];
        }
        const auto it = std::upper_bound(W.begin(), W.end(), idx,
                                         [](i64 i, const FW& w) { return i < w.base; });
        y[o - work.begin] = (it - 1)->operator[](idx);
      }
    };
  };
  t.fused = [](const FusedArgs& a) -> std::function<void()> {
    return [dims = a.g.tensor(a.op.inputs[0]).shape, perm = intPerm(a.op.attrs.getInts("perm")),
            x = anyIn(a, 0), y = a.out[0]] { fz::transpose(dims, perm, x, y); };
  };
  t.cost = [](const Op&, int) { return 1.0; };
  t.tolerances.f32 = {0, 0, 1e-2};
  registerOp(std::move(t));
}

}  // namespace ipu::ops
