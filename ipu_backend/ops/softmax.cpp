// softmax over the innermost axis, and its backward from the output (moved here from the
// per-layer switches; the kernels stay in kernels/reference.* and kernels/fused.*).
//   softmax(x [..., C]) -> y [..., C]
//   softmax_grad(y, dy) -> dx = y * (dy - sum_j dy_j * y_j), per row
#include "ipu_backend/kernels/fused.h"
#include "ipu_backend/kernels/reference.h"
#include "ipu_backend/ops/op_info.h"

namespace ipu::ops {
namespace {

namespace ref = kernels::ref;
namespace fz = kernels::fused;

std::vector<TensorType> infer(const std::vector<const Tensor*>& in, const Attrs&,
                              const std::string& label) {
  if (in[0]->shape.empty()) fail(label, "input must have rank >= 1");
  if (in.size() == 2) expectSameShape(*in[0], *in[1], label);
  return {{in[0]->shape, in[0]->dtype}};
}

// A vertex per slice of the output: it reads the rows its elements belong to.
void plan(PlanApi& p, const Op& op) {
  const i64 cols = p.graph().tensor(op.inputs[0]).shape.back();
  p.perSlice(op, 0, {op.outputs[0]}, [op, cols](Range r) {
    const i64 r0 = r.begin / cols, r1 = (r.end - 1) / cols + 1;
    Windows w;
    for (int t : op.inputs) w.push_back({t, r0 * cols, r1 * cols});
    return w;
  });
}

i64 colsOf(const Graph& g, const Op& op) {
  return g.tensor(op.inputs[0]).shape.back();
}

}  // namespace

IPU_REGISTER_OPS(softmax) {
  OpInfo f;
  f.def = {OpKind::Softmax, "softmax", 1, 1, {}, {}};
  f.doc = "x [..., C] -> softmax over C";
  f.inputDTypes = {floatTypes()};
  f.infer = infer;
  f.grad = [](const GradArgs& a) {
    a.accumulate(a.op.inputs[0], a.g.addOp1(OpKind::SoftmaxGrad, {a.op.outputs[0], a.dy[0]}, {}));
  };
  f.plan = plan;
  f.vertex = [](const VertexArgs& a) -> std::function<void()> {
    return [cols = colsOf(a.g, a.op), W = a.in, y = a.out[0], work = a.work] {
      ref::softmax(cols, W[0], y, work);
    };
  };
  f.fused = [](const FusedArgs& a) -> std::function<void()> {
    const i64 cols = colsOf(a.g, a.op), rows = a.g.tensor(a.op.outputs[0]).elements() / cols;
    return [=, x = a.in[0], y = a.out[0]] { fz::softmax(rows, cols, x, y); };
  };
  f.cost = [](const Op&, int) { return 11.0; };  // max, subtract, exp (8), sum, scale
  registerOp(std::move(f));

  OpInfo b;
  b.def = {OpKind::SoftmaxGrad, "softmax_grad", 2, 1, {}, {}};
  b.doc = "y (softmax output), dy [..., C] -> dx";
  b.inputDTypes = {floatTypes(), floatTypes()};
  b.infer = infer;
  b.grad = noGradient("it is a backward op");
  b.plan = plan;
  b.vertex = [](const VertexArgs& a) -> std::function<void()> {
    return [cols = colsOf(a.g, a.op), W = a.in, y = a.out[0], work = a.work] {
      ref::softmaxGrad(cols, W[0], W[1], y, work);
    };
  };
  b.fused = [](const FusedArgs& a) -> std::function<void()> {
    const i64 cols = colsOf(a.g, a.op), rows = a.g.tensor(a.op.outputs[0]).elements() / cols;
    return
        [=, y = a.in[0], dy = a.in[1], dx = a.out[0]] { fz::softmaxGrad(rows, cols, y, dy, dx); };
  };
  b.cost = [](const Op&, int) { return 11.0; };
  b.tolerances.f32 = {1e-5, 1e-5, 2e-2};
  registerOp(std::move(b));
}

}  // namespace ipu::ops
