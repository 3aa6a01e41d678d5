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

// Bounding range of input flat indices that output range `out` of a transpose reads.
Range transposeBounds(const Shape& in, const std::vector<i64>& perm, Range out) {
  i64 inElems = numElements(in);
  if (out.size() > 8192 || in.empty()) return {0, inElems};
  size_t r = in.size();
  std::vector<i64> inStride(r, 1), outDims(r);
  for (size_t d = r - 1; d-- > 0;) inStride[d] = inStride[d + 1] * in[d + 1];
  for (size_t d = 0; d < r; ++d) outDims[d] = in[perm[d]];
  i64 lo = inElems, hi = 0;
  for (i64 o = out.begin; o < out.end; ++o) {
    i64 rem = o, idx = 0;
    for (size_t d = r; d-- > 0;) {
      idx += (rem % outDims[d]) * inStride[perm[d]];
      rem /= outDims[d];
    }
    lo = std::min(lo, idx);
    hi = std::max(hi, idx + 1);
  }
  return {lo, hi};
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
    p.perSlice(op, 0, {op.outputs[0]}, [op, s, perm](Range r) {
      const Range b = transposeBounds(s, perm, r);
      return Windows{{op.inputs[0], b.begin, b.end}};
    });
  };
  t.vertex = [](const VertexArgs& a) -> std::function<void()> {
    return [dims = a.g.tensor(a.op.inputs[0]).shape, perm = intPerm(a.op.attrs.getInts("perm")),
            W = a.in, y = a.out[0], work = a.work] { ref::transpose(dims, perm, W[0], y, work); };
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
