#include "models/common/init_random.h"

#include <cmath>
#include <numbers>

namespace ipu::models {

std::uint64_t mix64(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::uint64_t fnv1a64(const std::string& s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : s) h = (h ^ ch) * 0x100000001b3ull;
  return h;
}

std::mt19937_64 tensorRng(std::uint64_t seed, const std::string& name) {
  return std::mt19937_64(mix64(seed ^ fnv1a64(name)));
}

double uniform01(std::mt19937_64& rng) {
  return (static_cast<double>(rng() >> 11) + 1.0) * 0x1.0p-53;
}

std::vector<float> normal(std::mt19937_64& rng, std::int64_t count, double stddev) {
  std::vector<float> v(static_cast<size_t>(count));
  for (std::int64_t i = 0; i < count; i += 2) {
    const double r = std::sqrt(-2.0 * std::log(uniform01(rng)));
    const double theta = 2.0 * std::numbers::pi * uniform01(rng);
    v[i] = static_cast<float>(stddev * r * std::cos(theta));
    if (i + 1 < count) v[i + 1] = static_cast<float>(stddev * r * std::sin(theta));
  }
  return v;
}

std::vector<float> truncatedNormal(std::mt19937_64& rng, std::int64_t count, double stddev,
                                   double cut) {
  std::vector<float> v(static_cast<size_t>(count));
  for (std::int64_t i = 0; i < count;) {
    const double r = std::sqrt(-2.0 * std::log(uniform01(rng)));
    const double theta = 2.0 * std::numbers::pi * uniform01(rng);
    for (double z : {r * std::cos(theta), r * std::sin(theta)})
      if (std::abs(z) <= cut && i < count) v[i++] = static_cast<float>(stddev * z);
  }
  return v;
}

std::vector<float> uniform(std::mt19937_64& rng, std::int64_t count, double bound) {
  std::vector<float> v(static_cast<size_t>(count));
  for (auto& x : v) x = static_cast<float>(bound * (2.0 * uniform01(rng) - 1.0));
  return v;
}

}  // namespace ipu::models
