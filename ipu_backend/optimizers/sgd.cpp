// SGD with momentum, PyTorch's torch.optim.SGD:
//   g' = g + wd w;  v = m v + g';  w -= lr (nesterov ? g' + m v : v)    (m = 0: w -= lr g')
#include "ipu_backend/optimizers/lowering.h"

namespace ipu::optimizers {

void sgdStep(Step& s, int lr) {
  const double m = s.attr("momentum", 0.0);
  const int grad = s.withWeightDecay(s.grad, s.attr("weight_decay", 0.0));
  int step = grad;
  if (m != 0.0) {
    const int v = s.add(s.scale(s.state[0], m, "momentum_decayed"), grad, "momentum_new");
    s.newState[0] = v;
    step = s.attrs.getBool("nesterov", false)
               ? s.add(grad, s.scale(v, m, "nesterov_momentum"), "nesterov_step")
               : v;
  }
  s.newWeight = s.sub(s.weight, s.mul(step, lr, "delta"), "new");
}

namespace {

void attrs(const OptimizerOptions& o, bool decays, Attrs& a) {
  a.set("momentum", o.momentum);
  a.set("weight_decay", decays ? o.weightDecay : 0.0);
  if (o.nesterov) a.set("nesterov", true);
}

void lower(Step& s) {
  sgdStep(s, s.lr);
}

}  // namespace

const OptimizerDef kSgd = {"sgd", {{"momentum", StateInit::Zero}}, attrs, lower};

}  // namespace ipu::optimizers
