#include "ipu_backend/optimizers/adam_moments.h"

#include <cmath>

#include <fmt/format.h>

namespace ipu::optimizers {

void setMomentAttrs(const OptimizerOptions& o, bool decays, Attrs& a) {
  a.set("beta1", o.beta1);
  a.set("beta2", o.beta2);
  a.set("epsilon", o.epsilon);
  a.set("bias_correction", o.biasCorrection);
  a.set("weight_decay", decays ? o.weightDecay : 0.0);
}

Moments adamMoments(Step& s) {
  const double b1 = s.attr("beta1", 0.9), b2 = s.attr("beta2", 0.999);
  if (!(b1 >= 0 && b1 < 1 && b2 >= 0 && b2 < 1))
    throw GraphError(fmt::format(
        "optimizer_update of '{}': beta1 {} and beta2 {} must be in [0, 1)", s.name, b1, b2));
  s.updateState(0, {{s.grad, 1 - b1}}, b1);  // m = b1 m + (1 - b1) g
  s.updateState(1, {{s.unary("square", s.grad, "grad_squared"), 1 - b2}}, b2);
  s.updateState(2, {{s.constant(1.0, "one")}}, 1.0);  // t = t + 1
  const int m = s.state[0], v = s.state[1], t = s.state[2];
  if (!s.attrs.getBool("bias_correction", true)) return {m, v};
  // 1 - b^t; b = 0 needs no correction (and has no logarithm).
  auto correction = [&](double beta, const char* what) {
    if (beta == 0.0) return s.constant(1.0, what);
    const int power = s.unary("exp", s.scale(t, std::log(beta), std::string(what) + "_log"),
                              std::string(what) + "_power");
    return s.sub(s.constant(1.0, "one"), power, what);
  };
  return {s.div(m, correction(b1, "m_correction"), "m_hat"),
          s.div(v, correction(b2, "v_correction"), "v_hat")};
}

}  // namespace ipu::optimizers
