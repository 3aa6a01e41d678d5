// Adam, PyTorch's torch.optim.Adam (weight decay as L2: g' = g + wd w):
//   m = b1 m + (1 - b1) g';  v = b2 v + (1 - b2) g'^2;  t = t + 1
//   w -= lr m^ / (sqrt(v^) + eps),  m^ = m / (1 - b1^t), v^ = v / (1 - b2^t)  (without
//   bias_correction m^ = m, v^ = v)
#include "ipu_backend/optimizers/adam_moments.h"

namespace ipu::optimizers {
namespace {

void attrs(const OptimizerOptions& o, bool decays, Attrs& a) {
  setMomentAttrs(o, decays, a);
}

void lower(Step& s) {
  s.grad = s.withWeightDecay(s.grad, s.attr("weight_decay", 0.0));
  const Moments mo = adamMoments(s);
  const int denom = s.add(s.unary("sqrt", mo.vHat, "v_sqrt"),
                          s.constant(s.attr("epsilon", 1e-8), "epsilon"), "denominator");
  s.updateWeight({{s.div(mo.mHat, denom, "adam_step")}}, 1.0, s.scale(s.lr, -1.0, "negative_lr"));
}

}  // namespace

const OptimizerDef kAdam = {"adam", kMomentSlots, attrs, lower};

}  // namespace ipu::optimizers
