// Internal: scalar element functions shared by the reference and fused kernels, so both
// engines use one definition of every UnaryKind / BinaryKind (inline: the fused loops
// specialise them per kind).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "ipu_backend/kernels/kernel_types.h"

namespace ipu::kernels::detail {

inline constexpr float kInvSqrt2 = 0.70710678118654752440f;
inline constexpr float kInvSqrt2Pi = 0.39894228040143267794f;

// e^x within 1 ulp (Cephes' expf: x = n ln2 + r, |r| <= ln2 / 2, a degree-7 polynomial in r),
// branch-free so that the fused loops vectorise it: std::exp is a libm call per element, which
// made swish and its gradient 5x slower than memory (EfficientNet-B4 spent a third of its step
// there) and the softmaxes' and masked-LM loss's row exponentials 3x slower. 2^n is applied as two
// exact halves, so results under 2^-126 round once to the subnormals and x >= 89 gives inf; NaN
// stays NaN.
inline float vectorExp(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;  // ln 2 = hi + lo
  float c = x < -104.0f ? -104.0f : x;  // e^-104 rounds to 0, e^89 to inf
  c = c > 89.0f ? 89.0f : c;
  c = c != c ? 0.0f : c;  // keeps the int conversion below defined; NaN is returned at the end
  const float n = std::floor(c * kLog2e + 0.5f);
  const float r = (c - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = p * r * r + r + 1.0f;
  const std::int32_t k = static_cast<std::int32_t>(n), k1 = k >> 1, k2 = k - k1;
  const float y =
      e * std::bit_cast<float>((k1 + 127) << 23) * std::bit_cast<float>((k2 + 127) << 23);
  return x != x ? x : y;
}

inline float sigmoid(float x) {
  return 1.0f / (1.0f + vectorExp(-x));
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
