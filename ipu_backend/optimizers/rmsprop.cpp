// RMSProp in TensorFlow's form (tf.compat.v1.train.RMSPropOptimizer; timm's RMSpropTF), as
// EfficientNet trains with it (rho 0.9, momentum 0.9, eps 1e-3):
//   g' = g + wd w (the L2 term of the loss);  ms = rho ms + (1 - rho) g'^2  (ms starts at 1)
//   mom = m mom + lr g' / sqrt(ms + eps)   (eps inside the root, lr inside the momentum);  w -= mom
#include "ipu_backend/optimizers/lowering.h"

namespace ipu::optimizers {
namespace {

void attrs(const OptimizerOptions& o, bool decays, Attrs& a) {
  a.set("rho", o.rho);
  a.set("momentum", o.momentum);
  a.set("epsilon", o.epsilon);
  a.set("weight_decay", decays ? o.weightDecay : 0.0);
}

void lower(Step& s) {
  const double rho = s.attr("rho", 0.9), m = s.attr("momentum", 0.0);
  const int g = s.withWeightDecay(s.grad, s.attr("weight_decay", 0.0));
  s.updateState(0, {{s.unary("square", g, "grad_squared"), 1 - rho}}, rho);  // ms
  const int root =
      s.unary("sqrt", s.add(s.state[0], s.constant(s.attr("epsilon", 1e-10), "epsilon"), "ms_eps"),
              "ms_root");
  const int normalised = s.div(g, root, "normalised");
  if (m == 0.0) return s.updateWeight({{normalised}}, 1.0, s.scale(s.lr, -1.0, "negative_lr"));
  s.updateState(1, {{normalised}}, m, s.lr);  // mom = m mom + lr g / sqrt(ms + eps)
  s.updateWeight({{s.state[1], -1.0}}, 1.0);  // w = w - mom
}

}  // namespace

const OptimizerDef kRmsProp = {
    "rmsprop", {{"rms", StateInit::One, false, true}, {"momentum", StateInit::Zero}}, attrs, lower};

}  // namespace ipu::optimizers
