// Stochastic rounding on the f32 bit pattern. Within a binade consecutive f32 patterns are
// evenly spaced, so rounding up when k uniform random bits are below the k dropped bits (bf16:
// adding them and truncating, the same test) has probability (dropped bits) / 2^k, i.e.
// proportional to the distance; a carry out of the mantissa steps into the next binade, which
// is again the correct upper neighbour.
#include "ipu_backend/precision/stochastic_rounding.h"

#include <bit>

namespace ipu::precision {

namespace {

// The scalar core. The bulk f16 loop repeats its normal-range case branch-free (keep the two
// in step; BulkEqualsScalarCore checks them against each other).
inline f16 srF16(float f, std::uint64_t r) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint16_t sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t a = x & 0x7fffffffu;
  if (a >= 0x47800000u) return toF16(f);  // |x| >= 65536, Inf, NaN: Inf / quiet NaN as RNE
  if (a >= 0x38800000u) {
    // f16 normal range: the f16 ulp is 2^13 f32 ulps. 13 random bits decide.
    const std::uint32_t up = (a & 0x1fffu) > static_cast<std::uint32_t>(r >> 51) ? 1u : 0u;
    // Truncated f16 pattern (rebias the exponent), then step up; 0x7bff + 1 is Inf, per the
    // beyond-max rule.
    const std::uint32_t h = ((a >> 13) - (112u << 10)) + up;
    return f16{static_cast<std::uint16_t>(sign | h)};
  }
  // f16 subnormal range: |x| / 2^-24 = m * 2^-shift with shift = 126 - max(e, 1) >= 14.
  const std::uint32_t e = a >> 23;
  const std::uint64_t m = e ? ((a & 0x7fffffu) | 0x800000u) : a;
  const std::uint32_t shift = 126u - (e ? e : 1u);
  std::uint64_t q, threshold;  // P(up) = threshold / 2^64
  if (shift < 64) {
    q = m >> shift;
    threshold = (m & ((1ull << shift) - 1u)) << (64u - shift);
  } else {  // |x| < 2^-64-ish: q = 0; probability m / 2^shift truncated to 64 bits
    q = 0;
    threshold = shift - 64u < 64u ? m >> (shift - 64u) : 0u;
  }
  const std::uint64_t h = q + (r < threshold ? 1u : 0u);  // at most 0x400, the smallest normal
  return f16{static_cast<std::uint16_t>(sign | h)};
}

inline bf16 srBF16(float f, std::uint64_t r) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return toBF16(f);  // NaN, quietened
  // Inf (0x7f800000) has zero low bits so it passes; the largest finite value carries into Inf.
  const std::uint32_t y = x + static_cast<std::uint32_t>(r >> 48);
  // No carry into the sign: |x| <= 0x7f800000, plus at most 0xffff, stays below 0x7f810000.
  return bf16{static_cast<std::uint16_t>(y >> 16)};
}

}  // namespace

f16 stochasticRoundToF16(float x, std::uint64_t randomBits) {
  return srF16(x, randomBits);
}
bf16 stochasticRoundToBF16(float x, std::uint64_t randomBits) {
  return srBF16(x, randomBits);
}

void stochasticRoundToF16(const float* in, f16* out, i64 count, std::uint64_t seed,
                          i64 firstIndex) {
  // Per block: draw the random bits (vectorised hash), apply srF16's normal-range case to all
  // elements branch-free (vectorised), then redo the rare elements outside the f16 normal
  // range with the full scalar code.
  constexpr i64 kBlock = 256;
  std::uint64_t r[kBlock];
  for (i64 k = 0; k < count; k += kBlock) {
    const i64 m = count - k < kBlock ? count - k : kBlock;
    for (i64 j = 0; j < m; ++j) r[j] = srRandomBits(seed, firstIndex + k + j);
    std::uint32_t outside = 0;
    for (i64 j = 0; j < m; ++j) {
      const std::uint32_t x = std::bit_cast<std::uint32_t>(in[k + j]);
      const std::uint32_t a = x & 0x7fffffffu;
      outside |= a - 0x38800000u >= 0x47800000u - 0x38800000u ? 1u : 0u;
      const std::uint32_t up = (a & 0x1fffu) > static_cast<std::uint32_t>(r[j] >> 51) ? 1u : 0u;
      out[k + j].bits =
          static_cast<std::uint16_t>(((x >> 16) & 0x8000u) | (((a >> 13) - (112u << 10)) + up));
    }
    if (!outside) continue;
    for (i64 j = 0; j < m; ++j) {
      const std::uint32_t a = std::bit_cast<std::uint32_t>(in[k + j]) & 0x7fffffffu;
      if (a - 0x38800000u >= 0x47800000u - 0x38800000u) out[k + j] = srF16(in[k + j], r[j]);
    }
  }
}

void stochasticRoundToBF16(const float* in, bf16* out, i64 count, std::uint64_t seed,
                           i64 firstIndex) {
  for (i64 k = 0; k < count; ++k) out[k] = srBF16(in[k], srRandomBits(seed, firstIndex + k));
}

void stochasticQuantizeToF16(const float* in, float* out, i64 count, std::uint64_t seed,
                             i64 firstIndex) {
  constexpr i64 kBlock = 256;
  f16 tmp[kBlock];
  for (i64 i = 0; i < count; i += kBlock) {
    const i64 m = count - i < kBlock ? count - i : kBlock;
    stochasticRoundToF16(in + i, tmp, m, seed, firstIndex + i);
    toFloat(tmp, out + i, m);
  }
}

void stochasticQuantizeToBF16(const float* in, float* out, i64 count, std::uint64_t seed,
                              i64 firstIndex) {
  constexpr i64 kBlock = 256;
  bf16 tmp[kBlock];
  for (i64 i = 0; i < count; i += kBlock) {
    const i64 m = count - i < kBlock ? count - i : kBlock;
    stochasticRoundToBF16(in + i, tmp, m, seed, firstIndex + i);
    toFloat(tmp, out + i, m);
  }
}

}  // namespace ipu::precision
