// slice and concat along one axis (BERT's [CLS] row and head splits, EfficientNet's blocks).
//   slice(x, attributes axis, begin, end) -> x[..., begin:end, ...] along `axis`
//   concat(a, b, attribute axis) -> [..., La + Lb, ...], a then b along `axis`
// Gradients: slice's is the concat of zeros around dy; concat's are the two slices of dy.
// Both ops move elements: every output element has one source (input, index), which the tile
// vertex and the fused loop both use, and which increases with the output index within each
// input, so a vertex's windows are the sources of its first and last elements (per input).
#include <fmt/format.h>

#include "ipu_backend/ir/builder.h"
#include "ipu_backend/ops/op_info.h"

namespace ipu::ops {
namespace {

// Output element i = (outer o, position p along the axis, inner j); input k covers positions
// [starts[k], starts[k] + lens[k]) of the output and starts at offsets[k] within its own axis.
struct Layout {
  i64 inner = 1, outLen = 1;
  std::vector<i64> starts, lens, inLens, offsets;
  struct Src {
    int input;
    i64 index;
  };
  Src at(i64 i) const {
    const i64 o = i / (outLen * inner), p = i / inner % outLen, j = i % inner;
    int k = 0;
    while (p >= starts[k] + lens[k]) ++k;
    return {k, (o * inLens[k] + offsets[k] + p - starts[k]) * inner + j};
  }
};

i64 innerOf(const Shape& s, i64 axis) {
  i64 n = 1;
  for (size_t d = static_cast<size_t>(axis) + 1; d < s.size(); ++d) n *= s[d];
  return n;
}

Layout layoutOf(const Graph& g, const Op& op) {
  const Shape& x0 = g.tensor(op.inputs[0]).shape;
  const i64 axis = axisOf(op.attrs.getInt("axis"), x0.size(), "");
  Layout l;
  l.inner = innerOf(x0, axis);
  if (op.inputs.size() == 1) {  // slice
    const i64 b = op.attrs.getInt("begin"), e = op.attrs.getInt("end");
    l.outLen = e - b;
    l.starts = {0}, l.lens = {e - b}, l.inLens = {x0[axis]}, l.offsets = {b};
    return l;
  }
  const i64 la = x0[axis], lb = g.tensor(op.inputs[1]).shape[axis];
  l.outLen = la + lb;
  l.starts = {0, la}, l.lens = {la, lb}, l.inLens = {la, lb}, l.offsets = {0, 0};
  return l;
}

std::vector<TensorType> inferSlice(const std::vector<const Tensor*>& in, const Attrs& a,
                                   const std::string& label) {
  const Tensor& x = *in[0];
  if (x.shape.empty()) fail(label, "cannot slice a scalar");
  const i64 axis = axisOf(a.getInt("axis"), x.shape.size(), label);
  const i64 b = a.getInt("begin"), e = a.getInt("end");
  if (b < 0 || e > x.shape[axis] || b >= e)
    fail(label, fmt::format("[{}, {}) is not a non-empty range of axis {} of '{}' {}", b, e, axis,
                            x.name, shapeStr(x.shape)));
  Shape s = x.shape;
  s[axis] = e - b;
  return {{s, x.dtype}};
}

std::vector<TensorType> inferConcat(const std::vector<const Tensor*>& in, const Attrs& a,
                                    const std::string& label) {
  const Tensor &x = *in[0], &y = *in[1];
  if (x.shape.empty() || x.shape.size() != y.shape.size())
    fail(label, fmt::format("'{}' {} and '{}' {} must have the same rank >= 1", x.name,
                            shapeStr(x.shape), y.name, shapeStr(y.shape)));
  const i64 axis = axisOf(a.getInt("axis"), x.shape.size(), label);
  for (size_t d = 0; d < x.shape.size(); ++d)
    if (static_cast<i64>(d) != axis && x.shape[d] != y.shape[d])
      fail(label, fmt::format("'{}' {} and '{}' {} differ outside axis {}", x.name,
                              shapeStr(x.shape), y.name, shapeStr(y.shape), axis));
  if (x.dtype != y.dtype)
    fail(label, fmt::format("dtypes of '{}' ({}) and '{}' ({}) differ", x.name, dtypeName(x.dtype),
                            y.name, dtypeName(y.dtype)));
  Shape s = x.shape;
  s[axis] += y.shape[axis];
  return {{s, x.dtype}};
}

void plan(PlanApi& p, const Op& op) {
  const Layout l = layoutOf(p.graph(), op);
  p.perSlice(op, 0, {op.outputs[0]}, [op, l](Range r) {
    std::vector<i64> lo(op.inputs.size(), -1), hi(op.inputs.size(), -1);
    // The first and last output element taken from each input: scan the range's axis runs.
    for (i64 i = r.begin; i < r.end;) {
      const auto s = l.at(i);
      if (lo[s.input] < 0) lo[s.input] = s.index;
      const i64 runEnd = std::min(r.end, (i / l.inner + 1) * l.inner);
      hi[s.input] = std::max(hi[s.input], l.at(runEnd - 1).index);
      i = runEnd;
    }
    Windows w;
    for (size_t k = 0; k < op.inputs.size(); ++k)
      w.push_back(lo[k] < 0 ? NeedWindow{op.inputs[k], 0, 1}
                            : NeedWindow{op.inputs[k], lo[k], hi[k] + 1});
    return w;
  });
}

std::function<void()> vertex(const VertexArgs& a) {
  return [l = layoutOf(a.g, a.op), W = a.in, y = a.out[0], work = a.work] {
    for (i64 i = work.begin; i < work.end; ++i) {
      const auto s = l.at(i);
      y[i - work.begin] = W[s.input][s.index];
    }
  };
}

std::function<void()> fused(const FusedArgs& a) {
  const i64 n = a.g.tensor(a.op.outputs[0]).elements();
  return [l = layoutOf(a.g, a.op), in = a.in, y = a.out[0], n] {
#pragma omp parallel for schedule(static)
    for (i64 i = 0; i < n; ++i) {
      const auto s = l.at(i);
      y[i] = in[s.input][s.index];
    }
  };
}

// Zeros of x's shape with `len` positions along `axis`.
int zeros(Builder& b, Shape s, i64 axis, i64 len, DType dt) {
  s[axis] = len;
  return b.constant(s, 0.0, dt);
}

void gradSlice(const GradArgs& a) {
  if (!a.needs[0]) return;
  const Tensor x = a.g.tensor(a.op.inputs[0]);
  const i64 axis = axisOf(a.op.attrs.getInt("axis"), x.shape.size(), a.label);
  const i64 b = a.op.attrs.getInt("begin"), e = a.op.attrs.getInt("end");
  const DType dt = a.g.tensor(a.dy[0]).dtype;
  Attrs cat;
  cat.set("axis", axis);
  int d = a.dy[0];
  if (b > 0) d = add(a.g, "concat", {zeros(a.b, x.shape, axis, b, dt), d}, cat)[0];
  if (e < x.shape[axis])
    d = add(a.g, "concat", {d, zeros(a.b, x.shape, axis, x.shape[axis] - e, dt)}, cat)[0];
  a.accumulate(a.op.inputs[0], d);
}

void gradConcat(const GradArgs& a) {
  const Shape xa = a.g.tensor(a.op.inputs[0]).shape, xb = a.g.tensor(a.op.inputs[1]).shape;
  const i64 axis = axisOf(a.op.attrs.getInt("axis"), xa.size(), a.label);
  auto part = [&](i64 b, i64 e) {
    Attrs s;
    s.set("axis", axis);
    s.set("begin", b);
    s.set("end", e);
    return add(a.g, "slice", {a.dy[0]}, s)[0];
  };
  if (a.needs[0]) a.accumulate(a.op.inputs[0], part(0, xa[axis]));
  if (a.needs[1]) a.accumulate(a.op.inputs[1], part(xa[axis], xa[axis] + xb[axis]));
}

}  // namespace

IPU_REGISTER_OPS(slice_concat) {
  OpInfo s;
  s.def = {kUnassignedKind,
           "slice",
           1,
           1,
           {},
           {{"axis", AttrType::Int, true},
            {"begin", AttrType::Int, true},
            {"end", AttrType::Int, true}}};
  s.doc = "x -> x[begin:end] along axis";
  s.inputDTypes = {floatTypes()};
  s.infer = inferSlice;
  s.grad = gradSlice;
  s.plan = plan;
  s.vertex = vertex;
  s.fused = fused;
  s.cost = [](const Op&, int) { return 1.0; };  // copies
  s.tolerances.f32 = {0, 0, 1e-2};
  registerOp(std::move(s));

  OpInfo c;
  c.def = {kUnassignedKind, "concat", 2, 1, {}, {{"axis", AttrType::Int, true}}};
  c.doc = "a, b -> a then b along axis";
  c.inputDTypes = {floatTypes(), floatTypes()};
  c.infer = inferConcat;
  c.grad = gradConcat;
  c.plan = plan;
  c.vertex = vertex;
  c.fused = fused;
  c.cost = [](const Op&, int) { return 1.0; };
  c.tolerances.f32 = {0, 0, 1e-2};
  registerOp(std::move(c));
}

}  // namespace ipu::ops
