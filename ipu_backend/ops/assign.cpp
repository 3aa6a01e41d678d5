// The in-place variable writes of the replication and accumulation passes, and constants
// (moved here from the per-layer switches).
//   assign(variable, value) : variable = value        (same shape)
//   accumulate(variable, x) : variable += x           (same shape)
//   constant() -> [shape] filled with `value`, of `dtype` (default f32)
#include <algorithm>

#include <fmt/format.h>

#include "ipu_backend/ops/op_info.h"

namespace ipu::ops {
namespace {

std::vector<TensorType> inferInPlace(const std::vector<const Tensor*>& in, const Attrs&,
                                     const std::string& label) {
  expectSameShape(*in[0], *in[1], label);
  return {};
}

// A vertex per slice of the variable, reading the same range of the value.
void planInPlace(PlanApi& p, const Op& op) {
  p.perSlice(op, 0, {op.inputs[0]}, [op](Range r) {
    return Windows{{op.inputs[1], r.begin, r.end}};
  });
}

}  // namespace

IPU_REGISTER_OPS(assign) {
  OpInfo s;
  s.def = {OpKind::Assign, "assign", 2, 0, {0}, {}};
  s.doc = "variable, value (same shape): variable = value";
  s.inputDTypes = {floatTypes(), floatTypes()};
  s.infer = inferInPlace;
  s.grad = noGradient("it is an update op");
  s.plan = planInPlace;
  s.vertex = [](const VertexArgs& a) -> std::function<void()> {
    return [W = a.in, y = a.out[0], n = a.work.size()] { std::copy(W[0].data, W[0].data + n, y); };
  };
  s.fused = [](const FusedArgs& a) -> std::function<void()> {
    const i64 n = a.g.tensor(a.op.inputs[0]).elements();
    return [dst = a.in[0], src = a.in[1], n] { std::copy(src, src + n, dst); };
  };
  s.cost = [](const Op&, int) { return 1.0; };
  s.tolerances.f32 = {0, 0, 0};
  registerOp(std::move(s));

  OpInfo c;
  c.def = {OpKind::Accumulate, "accumulate", 2, 0, {0}, {}};
  c.doc = "variable, x (same shape): variable += x";
  c.inputDTypes = {floatTypes(), floatTypes()};
  c.infer = inferInPlace;
  c.grad = noGradient("it is an update op");
  c.plan = planInPlace;
  c.vertex = [](const VertexArgs& a) -> std::function<void()> {
    return [W = a.in, y = a.out[0], n = a.work.size()] {
      for (i64 i = 0; i < n; ++i) y[i] += W[0].data[i];
    };
  };
  c.fused = [](const FusedArgs& a) -> std::function<void()> {
    const i64 n = a.g.tensor(a.op.inputs[0]).elements();
    return [acc = a.in[0], x = a.in[1], n] {
#pragma omp parallel for schedule(static)
      for (i64 i = 0; i < n; ++i) acc[i] += x[i];
    };
  };
  c.cost = [](const Op&, int) { return 1.0; };
  c.tolerances.f32 = {0, 0, 0};
  registerOp(std::move(c));

  OpInfo k;
  k.def = {OpKind::Constant,
           "constant",
           0,
           1,
           {},
           {{"shape", AttrType::Ints, true},
            {"value", AttrType::Float, true},
            {"dtype", AttrType::String, false}}};
  k.doc = "-> [shape] filled with value, of dtype (default f32)";
  k.infer = [](const std::vector<const Tensor*>&, const Attrs& a, const std::string& label) {
    DType dt = DType::F32;
    if (a.has("dtype")) {
      auto p = parseDType(a.getString("dtype"));
      if (!p) fail(label, fmt::format("unknown dtype '{}'", a.getString("dtype")));
      dt = *p;
    }
    return std::vector<TensorType>{{a.getInts("shape"), dt}};
  };
  k.grad = [](const GradArgs&) {};  // nothing upstream
  k.plan = [](PlanApi& p, const Op& op) {
    p.perSlice(op, 0, {op.outputs[0]}, [](Range) { return Windows{}; });
  };
  k.vertex = [](const VertexArgs& a) -> std::function<void()> {
    return [y = a.out[0], n = a.work.size(), v = static_cast<float>(a.op.attrs.getFloat("value"))] {
      std::fill(y, y + n, v);
    };
  };
  k.fused = [](const FusedArgs& a) -> std::function<void()> {
    return [y = a.out[0], n = a.g.tensor(a.op.outputs[0]).elements(),
            v = static_cast<float>(a.op.attrs.getFloat("value"))] { std::fill(y, y + n, v); };
  };
  k.cost = [](const Op&, int) { return 1.0; };
  k.tolerances.f32 = {0, 0, 0};
  registerOp(std::move(k));
}

}  // namespace ipu::ops
