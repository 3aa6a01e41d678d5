// Deterministic random initialisation of model variables, shared by the model builders:
// one mt19937_64 stream per tensor (seeded from the run seed and the tensor's name), and the
// distributions computed here rather than by <random>'s, whose algorithms the standard leaves
// to the platform, so a seed gives the same weights everywhere.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace ipu::models {

// splitmix64: decorrelates the per-tensor seeds.
std::uint64_t mix64(std::uint64_t z);
std::uint64_t fnv1a64(const std::string& s);
// The stream of tensor `name` under run seed `seed`.
std::mt19937_64 tensorRng(std::uint64_t seed, const std::string& name);

// Uniform in (0, 1]: 53 random bits, never 0 (Box-Muller takes its log).
double uniform01(std::mt19937_64& rng);
// Normal(0, stddev) by Box-Muller, two values per pair of draws.
std::vector<float> normal(std::mt19937_64& rng, std::int64_t count, double stddev);
// Normal(0, stddev) redrawn until within cut * stddev (TensorFlow's truncated_normal: cut 2).
std::vector<float> truncatedNormal(std::mt19937_64& rng, std::int64_t count, double stddev,
                                   double cut = 2.0);
// Uniform in (-bound, bound].
std::vector<float> uniform(std::mt19937_64& rng, std::int64_t count, double bound);

}  // namespace ipu::models
