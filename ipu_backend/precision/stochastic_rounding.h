// Stochastic rounding (SR) f32 -> f16 / bf16, as the IPU applies it when 16-bit results are
// written: x rounds to one of its two 16-bit neighbours lo <= x <= hi, up with probability
// (x - lo) / (hi - lo), so E[round(x)] = x. Small updates that RNE would always discard (a
// weight update below half an ulp) survive on average, which is what lets "16.16" train with
// f16 master weights.
//
// Random bits come from a counter-based generator: element i of a tensor uses
// srRandomBits(seed, i), a SplitMix64 output keyed by the seed. A tile rounding the slice
// [firstIndex, firstIndex + count) therefore produces exactly the bits the whole tensor would,
// whatever the tile split or thread count; reproducible runs only need the seed. Callers that
// round several tensors or steps derive one seed per (tensor, step) with deriveSeed().
//
// Special values and range:
//   * NaN, +-Inf and values exactly representable in the target pass through unchanged (NaN
//     quietened as by RNE).
//   * Beyond the largest finite value the rounding treats Inf as the next representable value,
//     at 2^16 for f16 (2^128 for bf16): |x| in (65504, 65536) rounds to +-65504 or +-Inf with
//     the usual probabilities, |x| >= 65536 gives +-Inf. Overflow thus stays visible (loss
//     scaling's finiteness check sees it) instead of being silently saturated.
//   * f16 subnormal results: the probability is exact for |x| >= 2^-64 (64 random bits); below
//     that it is quantised to multiples of 2^-64 (absolute error < 2^-64).
// SR is unbiased per element; the sign is handled symmetrically (rounding is on |x|).
#pragma once

#include <cstdint>

#include "ipu_backend/precision/half.h"

namespace ipu::precision {

// SplitMix64 finaliser: a bijective 64-bit mix.
constexpr std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A seed for one stream (e.g. tensor id, or step * kTensors + tensor) under a base seed.
constexpr std::uint64_t deriveSeed(std::uint64_t seed, std::uint64_t stream) {
  return mix64(seed ^ mix64(stream + 0x6a09e667f3bcc909ull));
}

// The 64 random bits element `index` uses under `seed`: the index-th SplitMix64 output of the
// stream keyed by mix64(seed) (mixing the seed keeps seeds s and s + gamma from sharing a
// shifted stream).
constexpr std::uint64_t srRandomBits(std::uint64_t seed, i64 index) {
  return mix64(mix64(seed) + static_cast<std::uint64_t>(index) * 0x9e3779b97f4a7c15ull);
}

// ---- scalar core: deterministic given the random bits (uniform over 2^64) -------------------
f16 stochasticRoundToF16(float x, std::uint64_t randomBits);
bf16 stochasticRoundToBF16(float x, std::uint64_t randomBits);

// ---- bulk: in[k] is global element firstIndex + k of the tensor ------------------------------
void stochasticRoundToF16(const float* in, f16* out, i64 count, std::uint64_t seed, i64 firstIndex);
void stochasticRoundToBF16(const float* in, bf16* out, i64 count, std::uint64_t seed,
                           i64 firstIndex);
// The same rounding with the result kept as f32 (f32 buffers emulating 16-bit storage);
// in == out is allowed.
void stochasticQuantizeToF16(const float* in, float* out, i64 count, std::uint64_t seed,
                             i64 firstIndex);
void stochasticQuantizeToBF16(const float* in, float* out, i64 count, std::uint64_t seed,
                              i64 firstIndex);

}  // namespace ipu::precision
