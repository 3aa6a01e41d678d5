// An exponential moving average of the weights (TensorFlow's ExponentialMovingAverage;
// EfficientNet evaluates the EMA, decay 0.9999): after each step
//   ema = d ema + (1 - d) w_new,  ema starting as a copy of the weight,
// with a fixed d, or with num_updates (warm-up) d = min(decay, (1 + n) / (10 + n)) for the n-th
// update, n counted from 1 (TensorFlow reads the global step after the optimizer increments it).
// It wraps any optimizer (the ema_decay and ema_warmup attributes of optimizer_update,
// lowering.cpp).
#include "ipu_backend/optimizers/lowering.h"

namespace ipu::optimizers {

void emaStep(Step& s, size_t slot, double decay, bool warmup) {
  if (!warmup) return s.updateState(slot, {{s.newWeight, 1 - decay}}, decay);
  const size_t count = slot - 1;
  s.updateState(count, {{s.constant(1.0, "one")}}, 1.0);  // n = n + 1
  const int n = s.state[count];
  // d is a tensor, so the update takes the form ema += (1 - d) (w - ema).
  const int ratio = s.div(s.add(n, s.constant(1.0, "one"), "ema_n_plus_1"),
                          s.add(n, s.constant(10.0, "ten"), "ema_n_plus_10"), "ema_warmup_decay");
  const int d = s.b.binary("min", ratio, s.constant(decay, "ema_decay"), s.n("ema_decay_now"));
  const int rate = s.sub(s.constant(1.0, "one"), d, "ema_rate");
  const int w = s.g.tensor(s.newWeight).dtype == DType::F32
                    ? s.newWeight
                    : s.b.cast(s.newWeight, DType::F32, s.n("ema_weight_f32"));
  s.updateState(slot, {{s.sub(w, s.state[slot], "ema_gap")}}, 1.0, rate);
}

}  // namespace ipu::optimizers
