// Kernels of the mixed-precision ops (cast, loss-scaled SGD). Both engines call these: the
// tile engine per vertex on its slice, the fused engine on the whole tensor. 16-bit operands
// reach them widened to f32 (the engines convert at the op boundary, see engine.cpp), so they
// are plain f32 loops.
#pragma once

#include <cstdint>

namespace ipu::kernels {

using i64 = std::int64_t;

// SGD momentum update on a gradient computed with loss scale S: g' = g * inverseScale, then
// exactly reference.h's sgdMomentumUpdate. `overflow` is 0 when every gradient of the step was
// finite; anything else (NaN) skips the update, leaving w and v untouched.
void scaledSgdMomentumUpdate(float lr, float momentum, float weightDecay, bool nesterov,
                             float inverseScale, float overflow, float* w, float* v, const float* g,
                             i64 count);

}  // namespace ipu::kernels
