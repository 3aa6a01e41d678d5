// An exponential moving average of the weights (TensorFlow's ExponentialMovingAverage;
// EfficientNet evaluates the EMA, decay 0.9999): after each step
//   ema = d ema + (1 - d) w_new,  ema starting as a copy of the weight,
// with a fixed d, or with num_updates (warm-up) d = min(decay, (1 + n) / (10 + n)) for the n-th
// update, n counted from 1 (TensorFlow reads the global step after the optimizer increments it).
// It wraps any optimizer (the ema_decay and ema_warmup attributes of optimizer_update,
// lowering.cpp, which also increments the shared step counter once a step).
#include <fmt/format.h>

#include "ipu_backend/optimizers/lowering.h"

namespace ipu::optimizers {

std::map<double, int> emaWarmupRates(Graph& g, int count, const std::vector<double>& decays) {
  Builder b(g);
  auto scalar = [&](double v, const std::string& what) {
    return b.constant({}, v, DType::F32, freshName(g, "optimizer/ema_" + what));
  };
  const int n = b.add(count, scalar(1.0, "one"), freshName(g, "optimizer/ema_n"));
  const int ratio = b.binary("div", b.add(n, scalar(1.0, "one"), freshName(g, "optimizer/ema_n1")),
                             b.add(n, scalar(10.0, "ten"), freshName(g, "optimizer/ema_n10")),
                             freshName(g, "optimizer/ema_warmup_decay"));
  std::map<double, int> rates;
  for (double d : decays) {
    if (rates.contains(d)) continue;
    const int now = b.binary("min", ratio, scalar(d, fmt::format("decay_{}", d)),
                             freshName(g, "optimizer/ema_decay_now"));
    rates[d] = b.sub(scalar(1.0, "one"), now, freshName(g, "optimizer/ema_rate"));
  }
  return rates;
}

void emaStep(Step& s, size_t slot, double decay, int rate) {
  if (rate < 0) return s.updateState(slot, {{s.newWeight, 1 - decay}}, decay);
  // d is a tensor, so the update takes the form ema += (1 - d) (w - ema).
  const int w = s.g.tensor(s.newWeight).dtype == DType::F32
                    ? s.newWeight
                    : s.b.cast(s.newWeight, DType::F32, s.n("ema_weight_f32"));
  s.updateState(slot, {{s.sub(w, s.state[slot], "ema_gap")}}, 1.0, rate);
}

}  // namespace ipu::optimizers
