// lars_learning_rate: the per-layer learning rate of LARS (and of LAMB's trust ratio), from
// scalars the lowering (optimizers/lars.cpp, lamb.cpp) computes with ordinary ops.
//   lars_learning_rate(sum of w^2, sum of g^2, lr, 1 / gradient scale) -> lr x trust ratio,
//   trust = eta |w| / (|g| + weight_decay |w| + epsilon) where |w| > 0 and |g| > 0, else 1
//   (the MLPerf reference's LARS, TensorFlow's LARSOptimizer); every operand an f32 scalar.
#include <fmt/format.h>

#include "ipu_backend/kernels/reference.h"
#include "ipu_backend/ops/op_info.h"

namespace ipu::ops {
namespace {

std::vector<TensorType> infer(const std::vector<const Tensor*>& in, const Attrs& a,
                              const std::string& label) {
  for (int i = 0; i < 4; ++i)
    if (in[i]->elements() != 1)
      fail(label, fmt::format("'{}' {}{} must be an f32 scalar (sum of squares of the weight, "
                              "of the gradient, learning rate, inverse gradient scale)",
                              in[i]->name, dtypeName(in[i]->dtype), shapeStr(in[i]->shape)));
  if (a.getFloat("eta") <= 0.0 || a.getFloat("epsilon") < 0.0 || a.getFloat("weight_decay") < 0.0)
    fail(label, fmt::format("needs eta > 0, epsilon >= 0 and weight_decay >= 0, got {}, {}, {}",
                            a.getFloat("eta"), a.getFloat("epsilon"), a.getFloat("weight_decay")));
  return {{in[2]->shape, DType::F32}};
}

struct Params {
  float eta, weightDecay, epsilon;
};

Params paramsOf(const Op& op) {
  return {static_cast<float>(op.attrs.getFloat("eta")),
          static_cast<float>(op.attrs.getFloat("weight_decay")),
          static_cast<float>(op.attrs.getFloat("epsilon"))};
}

}  // namespace

IPU_REGISTER_OPS(lars_learning_rate) {
  OpInfo l;
  l.def = {OpKind::LarsLearningRate,
           "lars_learning_rate",
           4,
           1,
           {},
           {{"eta", AttrType::Float, true},
            {"weight_decay", AttrType::Float, true},
            {"epsilon", AttrType::Float, true}}};
  l.doc = "sum w^2, sum g^2, lr, 1/scale (f32 scalars) -> lr x LARS trust ratio";
  l.inputDTypes = {{DType::F32}, {DType::F32}, {DType::F32}, {DType::F32}};
  l.infer = infer;
  l.grad = noGradient("it is part of an optimizer update");
  l.plan = [](PlanApi& p, const Op& op) {  // four scalars in, one out: one vertex
    p.perSlice(op, 0, {op.outputs[0]}, [&p, in = op.inputs](Range) {
      return Windows{p.whole(in[0]), p.whole(in[1]), p.whole(in[2]), p.whole(in[3])};
    });
  };
  l.vertex = [](const VertexArgs& a) -> std::function<void()> {
    return [W = a.in, y = a.out[0], k = paramsOf(a.op)] {
      *y = kernels::ref::larsLearningRate(W[2][0], W[0][0], W[1][0], W[3][0], k.eta, k.weightDecay,
                                          k.epsilon);
    };
  };
  l.fused = [](const FusedArgs& a) -> std::function<void()> {
    return [x = a.in, y = a.out[0], k = paramsOf(a.op)] {
      *y = kernels::ref::larsLearningRate(*x[2], *x[0], *x[1], *x[3], k.eta, k.weightDecay,
                                          k.epsilon);
    };
  };
  l.cost = [](const Op&, int) { return 1.0; };
  registerOp(std::move(l));
}

}  // namespace ipu::ops
