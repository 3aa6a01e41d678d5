// Internal: scalar element functions shared by the reference and fused kernels, so both
// engines use one definition of every UnaryKind / BinaryKind (inline: the fused loops
// specialise them per kind).
#pragma once

#include <algorithm>
#include <cmath>

#include "ipu_backend/kernels/kernel_types.h"

namespace ipu::kernels::detail {

inline constexpr float kInvSqrt2 = 0.70710678118654752440f;
inline constexpr float kInvSqrt2Pi = 0.39894228040143267794f;

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
