// Slow, obviously-correct reference for rounding f32 to a 16-bit format: decode every finite
// non-negative pattern with ldexpl, sort the values into a ladder, locate x between two rungs
// and pick the nearer (ties to the even pattern). Shares no code or bit tricks with the library.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

namespace ipu::precision::testing {

struct Format {
  int expBits, manBits;  // f16: 5, 10; bf16: 8, 7
  int bias() const { return (1 << (expBits - 1)) - 1; }
  std::uint16_t infBits() const {
    return static_cast<std::uint16_t>(((1 << expBits) - 1) << manBits);
  }
  std::uint16_t signBit() const { return 0x8000; }
  bool isNaN(std::uint16_t b) const { return (b & 0x7fff) > infBits(); }
  // Value of a finite or infinite pattern, from the IEEE definition.
  long double decode(std::uint16_t b) const {
    const int e = (b >> manBits) & ((1 << expBits) - 1);
    const int m = b & ((1 << manBits) - 1);
    const long double s = (b & 0x8000) ? -1.0L : 1.0L;
    if (e == (1 << expBits) - 1) return s * INFINITY;
    if (e == 0) return s * std::ldexp(static_cast<long double>(m), 1 - bias() - manBits);
    return s * std::ldexp(static_cast<long double>((1 << manBits) + m), e - bias() - manBits);
  }
};

inline const Format kF16{5, 10};
inline const Format kBF16{8, 7};

class Ladder {
 public:
  explicit Ladder(const Format& f) : f_(f) {
    std::vector<std::pair<long double, std::uint16_t>> rungs;
    for (std::uint32_t b = 0; b < 0x8000; ++b) {
      const long double v = f.decode(static_cast<std::uint16_t>(b));
      if (std::isfinite(v)) rungs.push_back({v, static_cast<std::uint16_t>(b)});
    }
    std::sort(rungs.begin(), rungs.end());
    for (size_t i = 1; i < rungs.size(); ++i)
      if (!(rungs[i - 1].first < rungs[i].first)) throw std::logic_error("ladder not strict");
    // IEEE overflow: round as if the exponent were unbounded; the next rung would be
    // 2^(emax + 1), and the result there is Inf.
    rungs.push_back({std::ldexp(1.0L, (1 << (f.expBits - 1))), f.infBits()});
    for (auto& [v, b] : rungs) {
      values_.push_back(v);
      bits_.push_back(b);
    }
  }

  // The two neighbours lo <= |x| < hi (hi == lo when |x| is a rung); |x| finite, < overflow.
  void neighbours(long double a, size_t& lo, size_t& hi) const {
    const size_t idx = std::upper_bound(values_.begin(), values_.end(), a) - values_.begin();
    lo = idx - 1;
    hi = values_[lo] == a ? lo : idx;
  }

  // Round-to-nearest-even of a non-NaN float. NaN handling is checked separately.
  std::uint16_t rne(float x) const {
    const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
    const long double a = std::fabs(static_cast<long double>(x));
    if (std::isinf(a) || a >= values_.back()) return sign | f_.infBits();
    size_t lo, hi;
    neighbours(a, lo, hi);
    if (lo == hi) return sign | bits_[lo];
    const long double mid = (values_[lo] + values_[hi]) / 2;  // exact in long double
    if (a < mid) return sign | bits_[lo];
    if (a > mid) return sign | bits_[hi];
    return sign | ((bits_[lo] & 1) == 0 ? bits_[lo] : bits_[hi]);
  }

  size_t size() const { return values_.size(); }
  long double value(size_t i) const { return values_[i]; }
  std::uint16_t bits(size_t i) const { return bits_[i]; }

 private:
  Format f_;
  std::vector<long double> values_;
  std::vector<std::uint16_t> bits_;
};

}  // namespace ipu::precision::testing
