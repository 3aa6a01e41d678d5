// Internal: scalar element functions shared by the reference and fused kernels, so both
// engines use one definition of every UnaryKind / BinaryKind (inline: the fused loops
// specialise them per kind).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>

#include "ipu_backend/kernels/kernel_types.h"

namespace ipu::kernels::detail {

inline constexpr float kInvSqrt2 = 0.70710678118654752440f;
inline constexpr float kInvSqrt2Pi = 0.39894228040143267794f;

// exp(x) in f32 from operations a compiler vectorises (no libm call, so `omp simd` loops over
// it run 16 lanes at a time): x = n ln2 + r with |r| <= ln2 / 2, exp(r) by Cephes' expf
// polynomial, 2^n through the exponent bits. Within 2 ulp of std::exp over the normal range;
// 0 below ln(FLT_MIN) (std::exp returns a subnormal there), +inf above ln(FLT_MAX), NaN for
// NaN. The fused softmaxes' and masked-LM loss's row exponentials (their sums in double).
inline float vectorExp(float x) {
  constexpr float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float xc = std::min(std::max(x, -87.33654f), 88.72283f);
  const float n = (xc * kLog2e + kRound) - kRound;
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = p * (r * r) + r + 1.0f;
  // 2^n as two factors, so n = 128 (x near ln(FLT_MAX)) does not overflow the exponent field.
  const int ni = static_cast<int>(n);
  const float half = std::bit_cast<float>((ni / 2 + 127) << 23);
  const float rest = std::bit_cast<float>((ni - ni / 2 + 127) << 23);
  const float y = e * half * rest;
  return x < -87.33654f ? 0.0f : x > 88.72283f ? INFINITY : x != x ? x : y;
}

inline float sigmoid(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}

inline float unaryValue(UnaryKind kind, float alpha, float x) {
  switch (kind) {
    case UnaryKind::Identity:
      return x;
    case UnaryKind::Relu:
      return x > 0.0f ? x : 0.0f;
    case UnaryKind::Neg:
      return -x;
    case UnaryKind::Exp:
      return std::exp(x);
    case UnaryKind::Log:
      return std::log(x);
    case UnaryKind::Sqrt:
      return std::sqrt(x);
    case UnaryKind::Rsqrt:
      return 1.0f / std::sqrt(x);
    case UnaryKind::Square:
      return x * x;
    case UnaryKind::Sigmoid:
      return sigmoid(x);
    case UnaryKind::Tanh:
      return std::tanh(x);
    case UnaryKind::Gelu:
      return 0.5f * x * (1.0f + std::erf(x * kInvSqrt2));
    case UnaryKind::Swish:
      return x * sigmoid(x);
    case UnaryKind::Scale:
      return alpha * x;
  }
  return x;
}

// d/dx of unaryValue at the forward input x.
inline float unaryDerivative(UnaryKind kind, float alpha, float x) {
  switch (kind) {
    case UnaryKind::Identity:
      return 1.0f;
    case UnaryKind::Relu:
      return x > 0.0f ? 1.0f : 0.0f;
    case UnaryKind::Neg:
      return -1.0f;
    case UnaryKind::Exp:
      return std::exp(x);
    case UnaryKind::Log:
      return 1.0f / x;
    case UnaryKind::Sqrt:
      return 0.5f / std::sqrt(x);
    case UnaryKind::Rsqrt:
      return -0.5f / (x * std::sqrt(x));
    case UnaryKind::Square:
      return 2.0f * x;
    case UnaryKind::Sigmoid: {
      const float s = sigmoid(x);
      return s * (1.0f - s);
    }
    case UnaryKind::Tanh: {
      const float t = std::tanh(x);
      return 1.0f - t * t;
    }
    case UnaryKind::Gelu:  // Phi(x) + x * phi(x)
      return 0.5f * (1.0f + std::erf(x * kInvSqrt2)) + x * kInvSqrt2Pi * std::exp(-0.5f * x * x);
    case UnaryKind::Swish: {
      const float s = sigmoid(x);
      return s + x * s * (1.0f - s);
    }
    case UnaryKind::Scale:
      return alpha;
  }
  return 1.0f;
}

inline float binaryValue(BinaryKind kind, float a, float b) {
  switch (kind) {
    case BinaryKind::Add:
      return a + b;
    case BinaryKind::Sub:
      return a - b;
    case BinaryKind::Mul:
      return a * b;
    case BinaryKind::Div:
      return a / b;
    case BinaryKind::Max:
      return std::max(a, b);
    case BinaryKind::Min:
      return std::min(a, b);
  }
  return a;
}

}  // namespace ipu::kernels::detail
