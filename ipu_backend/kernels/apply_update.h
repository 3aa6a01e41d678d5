// The kernel of apply_update, the optimizers' one in-place op (ipu_backend/optimizers), for both
// engines (the tile engine per vertex slice, the fused engine per chunk).
#pragma once

#include <cstdint>

namespace ipu::kernels {

using i64 = std::int64_t;

// target = keep * target + factor * (c[0] x[0] + ... + c[k-1] x[k-1]), 1 <= k <= 3, summed in
// that order with every product and sum rounded: this file is compiled without fused
// multiply-add, so the result equals the same sum built from unary / binary ops (a sharded
// update's chunk takes that form). keep == 0 does not read target.
void applyUpdate(float keep, float factor, int k, const float* const* x, const float* c,
                 float* target, i64 count);

}  // namespace ipu::kernels
