// select: elementwise choice between two tensors of one shape.
//   select(cond, a, b) -> cond != 0 ? a : b   (cond: a 0/1 mask of a's shape, any float type)
// Gradients: select(cond, dy, 0) for a and select(cond, 0, dy) for b; cond is not trained.
#include <fmt/format.h>

#include "ipu_backend/ir/builder.h"
#include "ipu_backend/ops/op_info.h"

namespace ipu::ops {
namespace {

std::vector<TensorType> infer(const std::vector<const Tensor*>& in, const Attrs&,
                              const std::string& label) {
  expectSameShape(*in[0], *in[1], label);
  expectSameShape(*in[1], *in[2], label);
  if (in[1]->dtype != in[2]->dtype)
    fail(label, fmt::format("dtypes of '{}' ({}) and '{}' ({}) differ", in[1]->name,
                            dtypeName(in[1]->dtype), in[2]->name, dtypeName(in[2]->dtype)));
  return {{in[1]->shape, in[1]->dtype}};
}

ElementFn element(const Op&) {
  return [](const float* v, i64) { return v[0] != 0.0f ? v[1] : v[2]; };
}

void grad(const GradArgs& a) {
  if (a.needs[0]) fail(a.label, "autodiff: the condition of a select is not differentiable");
  const Tensor dy = a.g.tensor(a.dy[0]);
  const int zero = a.b.constant(dy.shape, 0.0, dy.dtype);
  if (a.needs[1])
    a.accumulate(a.op.inputs[1], add(a.g, "select", {a.op.inputs[0], a.dy[0], zero})[0]);
  if (a.needs[2])
    a.accumulate(a.op.inputs[2], add(a.g, "select", {a.op.inputs[0], zero, a.dy[0]})[0]);
}

}  // namespace

IPU_REGISTER_OPS(select) {
  OpInfo s;
  s.def = {kUnassignedKind, "select", 3, 1, {}, {}};
  s.doc = "cond, a, b (one shape) -> cond != 0 ? a : b";
  s.inputDTypes = {floatTypes(), floatTypes(), floatTypes()};
  s.infer = infer;
  s.grad = grad;
  s.plan = planElementwise;
  s.vertex = elementwiseVertex(element);
  s.fused = elementwiseFused(element);
  s.cost = [](const Op&, int) { return 2.0; };  // compare, select
  s.tolerances.f32 = {0, 0, 1e-2};
  registerOp(std::move(s));
}

}  // namespace ipu::ops
