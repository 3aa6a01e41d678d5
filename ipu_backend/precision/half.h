// 16-bit floating-point storage types and their conversions to and from f32.
//
//   f16  IEEE 754 binary16: 1 sign, 5 exponent, 10 mantissa bits; max finite 65504, subnormals
//        down to 2^-24. The IPU's native 16-bit type (AMP units, "16.16" MLPerf runs).
//   bf16 bfloat16: the top half of an f32 (8 exponent, 7 mantissa bits). NOT native on the IPU;
//        an extension of this emulator for comparison with other accelerators.
//
// Rounding f32 -> 16 bits is round-to-nearest-even (RNE), with
//   * subnormal results rounded correctly (never flushed), for f16 and bf16 alike;
//   * overflow per RNE: |x| >= 65520 becomes f16 Inf (65520 is the tie between 65504 and the
//     would-be next value 65536, whose mantissa is even); bf16 overflows to Inf likewise;
//   * NaN -> quiet NaN, sign kept, payload truncated to the top bits (what F16C/AVX512-BF16 do).
// Widening 16 -> f32 is exact; an f16 signalling NaN comes back quiet (as VCVTPH2PS does),
// bf16 -> f32 is a plain shift and keeps every NaN bit.
//
// The scalar functions are constexpr and header-only, so kernels can inline them. The bulk
// functions use F16C / AVX512-BF16 when the build targets them (see vectorPath*()), and give
// bit-for-bit the same results as the scalar functions (the tests check every pattern class).
#pragma once

#include <bit>
#include <cstdint>

namespace ipu::precision {

using i64 = std::int64_t;

struct f16 {
  std::uint16_t bits = 0;
  static constexpr f16 fromBits(std::uint16_t b) { return f16{b}; }
  constexpr bool operator==(const f16&) const = default;  // bitwise (so NaN == same NaN)
};

struct bf16 {
  std::uint16_t bits = 0;
  static constexpr bf16 fromBits(std::uint16_t b) { return bf16{b}; }
  constexpr bool operator==(const bf16&) const = default;  // bitwise
};

static_assert(sizeof(f16) == 2 && sizeof(bf16) == 2, "storage types must be 16 bits");

inline constexpr float kF16MaxFinite = 65504.0f;
inline constexpr float kF16MinNormal = 6.103515625e-05f;            // 2^-14
inline constexpr float kF16MinSubnormal = 5.9604644775390625e-08f;  // 2^-24

// ---- classification ------------------------------------------------------------------------
constexpr bool isNaN(f16 h) {
  return (h.bits & 0x7fffu) > 0x7c00u;
}
constexpr bool isInf(f16 h) {
  return (h.bits & 0x7fffu) == 0x7c00u;
}
constexpr bool isFinite(f16 h) {
  return (h.bits & 0x7c00u) != 0x7c00u;
}
constexpr bool isNaN(bf16 h) {
  return (h.bits & 0x7fffu) > 0x7f80u;
}
constexpr bool isInf(bf16 h) {
  return (h.bits & 0x7fffu) == 0x7f80u;
}
constexpr bool isFinite(bf16 h) {
  return (h.bits & 0x7f80u) != 0x7f80u;
}

// ---- scalar conversions --------------------------------------------------------------------
// f32 -> f16, round to nearest even (integer arithmetic, independent of the FP environment).
constexpr f16 toF16(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint16_t sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u)  // NaN: quiet it, keep the top 9 payload bits
    return f16{static_cast<std::uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu))};
  if (a >= 0x477ff000u) return f16{static_cast<std::uint16_t>(sign | 0x7c00u)};  // >= 65520
  if (a >= 0x38800000u) {  // normal f16 result (|x| >= 2^-14): rebias, round away 13 bits
    std::uint32_t h = ((a >> 13) - (112u << 10));
    const std::uint32_t rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // carry into exponent is right
    return f16{static_cast<std::uint16_t>(sign | h)};
  }
  // Subnormal or zero result: |x| / 2^-24 = m * 2^-(126 - e), rounded to an integer.
  const std::uint32_t e = a >> 23;
  if (e < 102) return f16{sign};  // |x| < 2^-25: below half the smallest subnormal
  const std::uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const std::uint32_t shift = 126u - e;  // 14..24
  std::uint32_t h = m >> shift;
  const std::uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (h & 1u))) ++h;  // may become 0x400, the smallest normal
  return f16{static_cast<std::uint16_t>(sign | h)};
}

// f16 -> f32, exact.
constexpr float toFloat(f16 h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h.bits & 0x8000u) << 16;
  const std::uint32_t e = (h.bits >> 10) & 0x1fu, m = h.bits & 0x3ffu;
  std::uint32_t x;
  if (e == 0x1f) {
    x = sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u);  // Inf, or NaN made quiet
  } else if (e != 0) {
    x = sign | ((e + 112u) << 23) | (m << 13);
  } else if (m == 0) {
    x = sign;
  } else {                                   // subnormal: normalise m * 2^-24 into an f32 normal
    const int lead = std::bit_width(m) - 1;  // 0..9
    x = sign | (static_cast<std::uint32_t>(lead + 103) << 23) | ((m << (23 - lead)) & 0x7fffffu);
  }
  return std::bit_cast<float>(x);
}

// f32 -> bf16, round to nearest even. f32 subnormals round like any other value (the formats
// share the exponent range), so there is no flush to zero.
constexpr bf16 toBF16(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<std::uint16_t>((x >> 16) | 0x40u)};
  return bf16{static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16)};
}

// bf16 -> f32, exact.
constexpr float toFloat(bf16 h) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(h.bits) << 16);
}

// ---- bulk conversions (out may not alias in, except where noted) ---------------------------
void toF16(const float* in, f16* out, i64 n);
void toFloat(const f16* in, float* out, i64 n);
void toBF16(const float* in, bf16* out, i64 n);
void toFloat(const bf16* in, float* out, i64 n);

// x -> nearest 16-bit value, kept as f32 (how an f32 buffer emulates 16-bit storage).
// in == out is allowed.
void quantizeToF16(const float* in, float* out, i64 n);
void quantizeToBF16(const float* in, float* out, i64 n);

// The scalar loops the vector paths must match bit for bit (tests and fallback).
namespace scalar {
void toF16(const float* in, f16* out, i64 n);
void toFloat(const f16* in, float* out, i64 n);
void toBF16(const float* in, bf16* out, i64 n);
void toFloat(const bf16* in, float* out, i64 n);
}  // namespace scalar

// Which implementation the bulk functions of this build use: "f16c" / "avx512bf16" or
// "scalar" (compiled without the ISA; the compiler may still auto-vectorise the loop).
const char* vectorPathF16();
const char* vectorPathBF16();

}  // namespace ipu::precision
