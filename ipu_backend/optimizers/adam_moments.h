// The moments Adam and LAMB share: m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2 and the step
// count t, and their bias-corrected forms m / (1 - b1^t), v / (1 - b2^t) (b^t = exp(t ln b)).
#pragma once

#include "ipu_backend/optimizers/lowering.h"

namespace ipu::optimizers {

// State slots 0, 1, 2 of both optimizers.
inline const std::vector<Slot> kMomentSlots = {
    {"m", StateInit::Zero}, {"v", StateInit::Zero, false, true}, {"step", StateInit::Zero, true}};

struct Moments {
  int mHat = -1, vHat = -1;
};
// The attributes both set: betas, epsilon, bias correction and the weight decay (0 for tensors
// that do not decay).
void setMomentAttrs(const OptimizerOptions& o, bool decays, Attrs& a);
// Updates state slots 0..2; the returned moments are bias-corrected when bias_correction is set.
Moments adamMoments(Step& s);

}  // namespace ipu::optimizers
