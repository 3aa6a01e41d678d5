// softmax_cross_entropy: per-sample loss of [N, classes] logits against i32 labels, with label
// smoothing, and its gradient (moved here from the per-layer switches; the kernels stay in
// kernels/reference.* and kernels/fused.*).
//   softmax_cross_entropy(logits [N, K], labels i32 [N]) -> loss [N]
//     target = (1 - smoothing) * onehot(label) + smoothing / K; loss = -sum target * log_softmax
//   softmax_cross_entropy_grad(logits, labels, dloss [N]) -> dlogits = dloss * (softmax - target)
#include <fmt/format.h>

#include "ipu_backend/kernels/fused.h"
#include "ipu_backend/kernels/reference.h"
#include "ipu_backend/ops/op_info.h"

namespace ipu::ops {
namespace {

namespace ref = kernels::ref;
namespace fz = kernels::fused;

std::vector<TensorType> infer(const std::vector<const Tensor*>& in, const Attrs& a,
                              const std::string& label) {
  const Tensor &lg = *in[0], &lb = *in[1];
  expectRank(lg, 2, label, "logits [N,classes]");
  if (lb.shape != Shape{lg.shape[0]})
    fail(label, fmt::format("labels '{}' must be i32[{}] for logits '{}' {}, got {}{}", lb.name,
                            lg.shape[0], lg.name, shapeStr(lg.shape), dtypeName(lb.dtype),
                            shapeStr(lb.shape)));
  const double eps = a.getFloat("smoothing", 0.0);
  if (eps < 0.0 || eps >= 1.0) fail(label, "smoothing must be in [0, 1)");
  if (in.size() == 2) return {{{lg.shape[0]}, lg.dtype}};
  if (in[2]->shape != Shape{lg.shape[0]})
    fail(label, fmt::format("loss gradient '{}' {} must be [{}]", in[2]->name,
                            shapeStr(in[2]->shape), lg.shape[0]));
  return {{lg.shape, lg.dtype}};
}

float smoothingOf(const Op& op) {
  return static_cast<float>(op.attrs.getFloat("smoothing", 0.0));
}

std::vector<AttrSpec> attrSpecs() {
  return {{"smoothing", AttrType::Float, false}};
}

}  // namespace

IPU_REGISTER_OPS(softmax_cross_entropy) {
  OpInfo f;
  f.def = {OpKind::SoftmaxCrossEntropy, "softmax_cross_entropy", 2, 1, {}, attrSpecs(),
           PrecisionRule::KeepF32};  // log-sum-exp of 16-bit logits loses the loss
  f.doc = "logits [N,K], labels i32 [N] -> loss [N] (label smoothing)";
  f.inputDTypes = {floatTypes(), indexTypes()};
  f.infer = infer;
  f.grad = [](const GradArgs& a) {
    if (a.needs[0])
      a.accumulate(a.op.inputs[0],
                   a.g.addOp1(OpKind::SoftmaxCrossEntropyGrad,
                              {a.op.inputs[0], a.op.inputs[1], a.dy[0]}, a.op.attrs));
  };
  // A vertex per slice of the loss: its samples' logits rows and labels.
  f.plan = [](PlanApi& p, const Op& op) {
    const i64 k = p.graph().tensor(op.inputs[0]).shape[1];
    p.perSlice(op, 0, {op.outputs[0]}, [op, k](Range r) {
      return Windows{{op.inputs[0], r.begin * k, r.end * k}, {op.inputs[1], r.begin, r.end}};
    });
  };
  f.vertex = [](const VertexArgs& a) -> std::function<void()> {
    return
        [k = a.g.tensor(a.op.inputs[0]).shape[1], eps = smoothingOf(a.op), W = a.in, lb = a.ints[1],
         y = a.out[0], work = a.work] { ref::softmaxCrossEntropy(k, eps, W[0], lb, y, work); };
  };
  f.fused = [](const FusedArgs& a) -> std::function<void()> {
    const Shape s = a.g.tensor(a.op.inputs[0]).shape;
    return [n = s[0], k = s[1], eps = smoothingOf(a.op), lg = a.in[0], lb = a.ints[1],
            y = a.out[0]] { fz::softmaxCrossEntropy(n, k, eps, lg, lb, y); };
  };
  f.cost = [](const Op&, int) { return 11.0; };  // max, subtract, exp (8), sum, scale
  f.costTraits.readsWindows = true;              // a row of logits per sample
  registerOp(std::move(f));

  OpInfo b;
  b.def = {OpKind::SoftmaxCrossEntropyGrad, "softmax_cross_entropy_grad", 3, 1, {}, attrSpecs()};
  b.doc = "logits [N,K], labels i32 [N], dloss [N] -> dlogits [N,K]";
  b.inputDTypes = {floatTypes(), indexTypes(), floatTypes()};
  b.infer = infer;
  b.grad = noGradient("it is a backward op");
  // A vertex per slice of dlogits: the rows its elements belong to, their labels and dloss.
  b.plan = [](PlanApi& p, const Op& op) {
    const i64 k = p.graph().tensor(op.inputs[0]).shape[1];
    p.perSlice(op, 0, {op.outputs[0]}, [op, k](Range r) {
      const i64 r0 = r.begin / k, r1 = (r.end - 1) / k + 1;
      return Windows{
          {op.inputs[0], r0 * k, r1 * k}, {op.inputs[1], r0, r1}, {op.inputs[2], r0, r1}};
    });
  };
  b.vertex = [](const VertexArgs& a) -> std::function<void()> {
    return [k = a.g.tensor(a.op.inputs[0]).shape[1], eps = smoothingOf(a.op), W = a.in,
            lb = a.ints[1], y = a.out[0],
            work = a.work] { ref::softmaxCrossEntropyGrad(k, eps, W[0], lb, W[2], y, work); };
  };
  b.fused = [](const FusedArgs& a) -> std::function<void()> {
    const Shape s = a.g.tensor(a.op.inputs[0]).shape;
    return [n = s[0], k = s[1], eps = smoothingOf(a.op), lg = a.in[0], lb = a.ints[1], dl = a.in[2],
            y = a.out[0]] { fz::softmaxCrossEntropyGrad(n, k, eps, lg, lb, dl, y); };
  };
  b.cost = [](const Op&, int) { return 11.0; };
  registerOp(std::move(b));
}

}  // namespace ipu::ops
