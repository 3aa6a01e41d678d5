#include "ipu_backend/optimizers/adam_moments.h"

#include <cmath>

#include <fmt/format.h>

namespace ipu::optimizers {

Moments adamMoments(Step& s) {
  const double b1 = s.attr("beta1", 0.9), b2 = s.attr("beta2", 0.999);
  if (!(b1 >= 0 && b1 < 1 && b2 >= 0 && b2 < 1))
    throw GraphError(fmt::format(
        "optimizer_update of '{}': beta1 {} and beta2 {} must be in [0, 1)", s.name, b1, b2));
  const int m =
      s.add(s.scale(s.state[0], b1, "m_decayed"), s.scale(s.grad, 1 - b1, "m_grad"), "m_new");
  const int g2 = s.unary("square", s.grad, "grad_squared");
  const int v = s.add(s.scale(s.state[1], b2, "v_decayed"), s.scale(g2, 1 - b2, "v_grad"), "v_new");
  const int t = s.add(s.state[2], s.constant(1.0, "one"), "step_new");
  s.newState[0] = m;
  s.newState[1] = v;
  s.newState[2] = t;
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
