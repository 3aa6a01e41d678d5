// SGD with momentum, PyTorch's torch.optim.SGD:
//   g' = g + wd w;  v = m v + g';  w -= lr (nesterov ? g' + m v : v)    (m = 0: w -= lr g')
#include "ipu_backend/optimizers/lowering.h"

namespace ipu::optimizers {

void sgdStep(Step& s, int lr) {
  const double m = s.attr("momentum", 0.0), wd = s.attr("weight_decay", 0.0);
  const int negLr = s.scale(lr, -1.0, "negative_lr");
  std::vector<Term> grad = {{s.grad}};  // g' = g + wd w, summed inside each update
  if (wd != 0.0) grad.push_back({s.weight, wd});
  if (m == 0.0) return s.updateWeight(grad, 1.0, negLr);
  s.updateState(0, grad, m);  // v = m v + g'
  std::vector<Term> step = {{s.state[0]}};
  if (s.attrs.getBool("nesterov", false)) {  // g' + m v
    step = grad;
    step.push_back({s.state[0], m});
  }
  s.updateWeight(step, 1.0, negLr);  // w = w - lr step
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
