// Deterministic "golden" tensors that the C++ tests and scripts/goldens/golden_weights.py
// generate bit-identically, so goldens computed in PyTorch need no weight files.
//
// Element i of tensor `name` (flat index in OUR layout: OHWI convs, [in,out] dense):
//   x = fmix32((fnv1a32(name) + i * 2654435761) mod 2^32)  (integers only; murmur3 finaliser)
//   u = x / 2^32 - 0.5                                     (exact in double, in [-0.5, 0.5))
//   value = float32(offset + scale * u)                    (double arithmetic, one cast)
// Every step is exactly rounded IEEE double arithmetic, identical in C++ and numpy. fmix32
// matters: a bare Weyl sequence made the images of a batch shifted copies of each other and the
// filters nearly collinear, leaving batch-norm channels with almost no variance (ill-conditioned
// float32 goldens).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ipu_backend/ir/graph.h"

namespace ipu::models {

std::uint32_t fnv1a32(const std::string& s);

struct GoldenSpec {
  double offset = 0.0;
  double scale = 1.0;
};

std::vector<float> goldenTensor(const std::string& name, i64 count, const GoldenSpec& spec);

// The spec of a ResNet variable by its name and shape:
//   *_weight (conv [K,R,S,C], fc [in,out]): uniform with variance 1/fan_in, scale 2*sqrt(3/fan_in)
//   *_bn3_gamma: 0.2 +- 0.05   other *_gamma: 1 +- 0.25   *_running_var: 1 +- 0.25
//   *_beta, *_bias, *_running_mean: +-0.1
GoldenSpec goldenSpecFor(const std::string& name, const Shape& shape);

// Images: goldenTensor("images", N*H*W*C, {0, 2}) (uniform [-1, 1)).
// Labels: label n = fmix32((fnv1a32("labels") + n * 2654435761) mod 2^32) mod classes.
std::vector<float> goldenImages(i64 count);
std::vector<std::int32_t> goldenLabels(i64 n, int classes);

}  // namespace ipu::models
