// optimizer_update: one weight's update by a named optimizer (SGD, LARS, LAMB, RMSProp, Adam,
// weight EMA), which compile() lowers to ordinary ops and apply_updates
// (ipu_backend/optimizers): it is never planned, run or priced itself (OpInfo::lowered).
//   optimizer_update(weight, gradient, lr, state...[, inverse loss scale, overflow flag])
// The weight and the state variables are written in place; see ir/op_defs.h UpdateOperands.
// With loss_scaled the lowering unscales the gradient and skips the step on overflow, for any
// optimizer; with replicas > 1 (sharded state) the gradient and the state are this replica's
// chunk of the weight: neither is a kind of its own.
#include <fmt/format.h>

#include "ipu_backend/ops/op_info.h"

namespace ipu::ops {
namespace {

std::vector<TensorType> infer(const std::vector<const Tensor*>& in, const Attrs& a,
                              const std::string& label) {
  const bool scaled = a.getBool("loss_scaled", false);
  const size_t fixed = scaled ? 5 : 3;
  if (in.size() < fixed)
    fail(label, fmt::format("expects weight, gradient, learning rate, state...{} ({} inputs "
                            "at least), got {}",
                            scaled ? ", inverse loss scale, overflow" : "", fixed, in.size()));
  const Tensor& w = *in[0];
  const i64 r = a.getInt("replicas", 1);
  if (r < 1) fail(label, fmt::format("replicas must be >= 1, got {}", r));
  // Sharded (replicas > 1): the gradient and the state are this replica's chunk.
  const Shape part = r > 1 ? Shape{(w.elements() + r - 1) / r} : w.shape;
  for (size_t i = 1; i < in.size(); ++i) {
    if (i == 2 || (scaled && i + 2 >= in.size())) {
      if (in[i]->elements() != 1 || in[i]->dtype != DType::F32)
        fail(label, fmt::format("'{}' {}{} must be an f32 scalar (learning rate, inverse loss "
                                "scale, overflow flag)",
                                in[i]->name, dtypeName(in[i]->dtype), shapeStr(in[i]->shape)));
    } else if (in[i]->shape != part && !(i >= 3 && in[i]->shape.empty())) {  // or a scalar state
      fail(label, fmt::format("'{}' {} must have shape {} (weight '{}' {}{})", in[i]->name,
                              shapeStr(in[i]->shape), shapeStr(part), w.name, shapeStr(w.shape),
                              r > 1 ? fmt::format(", sharded over {} replicas", r) : ""));
    }
  }
  return {};
}

}  // namespace

IPU_REGISTER_OPS(optimizer_update) {
  OpInfo u;
  // The attributes are those of the optimizers in ipu_backend/optimizers, which check them.
  u.def = {OpKind::OptimizerUpdate,
           "optimizer_update",
           -1,
           0,
           {0},
           {{"optimizer", AttrType::String, true},
            {"momentum", AttrType::Float, false},
            {"weight_decay", AttrType::Float, false},
            {"nesterov", AttrType::Bool, false},
            {"stochastic_rounding", AttrType::Bool, false},
            {"lars_eta", AttrType::Float, false},
            {"lars_epsilon", AttrType::Float, false},
            {"beta1", AttrType::Float, false},
            {"beta2", AttrType::Float, false},
            {"epsilon", AttrType::Float, false},
            {"rho", AttrType::Float, false},
            {"bias_correction", AttrType::Bool, false},
            {"trust_ratio", AttrType::Bool, false},
            {"max_grad_norm", AttrType::Float, false},
            {"loss_scaled", AttrType::Bool, false},
            {"replicas", AttrType::Int, false},
            {"ema_decay", AttrType::Float, false},
            {"ema_warmup", AttrType::Bool, false}}};
  u.doc =
      "weight, gradient, lr, state...[, inverse loss scale, overflow]: one optimizer step, "
      "lowered by compile()";
  u.inputDTypes = {floatTypes()};
  u.infer = infer;
  u.grad = noGradient("it is an update op");
  u.lowered = true;
  registerOp(std::move(u));
}

}  // namespace ipu::ops
