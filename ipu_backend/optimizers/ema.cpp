// An exponential moving average of the weights (TensorFlow's ExponentialMovingAverage with a
// fixed decay; EfficientNet evaluates the EMA, decay 0.9999): after each step
//   ema = d ema + (1 - d) w_new,  ema starting as a copy of the weight.
// It wraps any optimizer (the ema_decay attribute of optimizer_update, lowering.cpp).
#include "ipu_backend/optimizers/lowering.h"

namespace ipu::optimizers {

void emaStep(Step& s, size_t slot, double decay) {
  s.updateState(slot, {{s.newWeight, 1 - decay}}, decay);
}

}  // namespace ipu::optimizers
