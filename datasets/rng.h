// Small, fully specified RNG so that augmentation is bit-identical across standard libraries and
// thread counts (std:: distributions are implementation-defined).
#pragma once

#include <cstdint>
#include <initializer_list>

namespace datasets {

constexpr uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Order-sensitive hash of a few integers, e.g. hashSeed({seed, epoch, sampleIndex}).
constexpr uint64_t hashSeed(std::initializer_list<uint64_t> values) {
  uint64_t h = 0x6A09E667F3BCC909ull;
  for (uint64_t v : values) h = splitmix64(h ^ splitmix64(v));
  return h;
}

// xoshiro256** seeded through splitmix64.
class Rng {
 public:
  explicit Rng(uint64_t seed = 0) {
    for (auto& s : s_) {
      seed = splitmix64(seed);
      s = seed;
    }
  }
  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  // Uniform in [0, 1).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  // Uniform integer in [lo, hi] (inclusive); hi >= lo.
  int64_t uniformInt(int64_t lo, int64_t hi) {
    const uint64_t range = static_cast<uint64_t>(hi - lo) + 1;
    if (range == 0) return static_cast<int64_t>(next());  // full 64-bit range
    // Rejection sampling: unbiased.
    const uint64_t limit = UINT64_MAX - UINT64_MAX % range;
    uint64_t v;
    do {
      v = next();
    } while (v >= limit);
    return lo + static_cast<int64_t>(v % range);
  }
  bool bernoulli(double p) { return uniform() < p; }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace datasets
