// Throughput of the bulk conversions (vector path vs the scalar loop the tests compare it
// with), stochastic rounding, and the finiteness check, on 1 Mi elements (4 MiB of f32: L2/L3).
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "ipu_backend/precision/half.h"
#include "ipu_backend/precision/loss_scaling.h"
#include "ipu_backend/precision/stochastic_rounding.h"

namespace {

using namespace ipu::precision;

constexpr i64 kN = 1 << 20;

const std::vector<float>& input() {
  static const std::vector<float> x = [] {
    std::mt19937 rng(1);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> v(kN);
    for (auto& e : v) e = d(rng);
    return v;
  }();
  return x;
}

template <typename H, void (*Fn)(const float*, H*, i64)>
void BM_Narrow(benchmark::State& st) {
  std::vector<H> out(kN);
  for (auto _ : st) {
    Fn(input().data(), out.data(), kN);
    benchmark::DoNotOptimize(out.data());
  }
  st.SetItemsProcessed(st.iterations() * kN);
}

void narrow(std::vector<f16>& h) {
  toF16(input().data(), h.data(), kN);
}
void narrow(std::vector<bf16>& h) {
  toBF16(input().data(), h.data(), kN);
}

template <typename H, void (*Fn)(const H*, float*, i64)>
void BM_Widen(benchmark::State& st) {
  std::vector<H> in(kN);
  narrow(in);
  std::vector<float> out(kN);
  for (auto _ : st) {
    Fn(in.data(), out.data(), kN);
    benchmark::DoNotOptimize(out.data());
  }
  st.SetItemsProcessed(st.iterations() * kN);
}

template <typename H, void (*Fn)(const float*, H*, i64, std::uint64_t, i64)>
void BM_Stochastic(benchmark::State& st) {
  std::vector<H> out(kN);
  std::uint64_t seed = 0;
  for (auto _ : st) {
    Fn(input().data(), out.data(), kN, seed++, 0);
    benchmark::DoNotOptimize(out.data());
  }
  st.SetItemsProcessed(st.iterations() * kN);
}

void BM_AllFinite(benchmark::State& st) {
  for (auto _ : st) benchmark::DoNotOptimize(allFinite(input().data(), kN));
  st.SetItemsProcessed(st.iterations() * kN);
}

}  // namespace

BENCHMARK(BM_Narrow<f16, toF16>)->Name("ToF16/vector");
BENCHMARK(BM_Narrow<f16, scalar::toF16>)->Name("ToF16/scalar");
BENCHMARK(BM_Widen<f16, toFloat>)->Name("F16ToFloat/vector");
BENCHMARK(BM_Widen<f16, scalar::toFloat>)->Name("F16ToFloat/scalar");
BENCHMARK(BM_Narrow<bf16, toBF16>)->Name("ToBF16/vector");
BENCHMARK(BM_Narrow<bf16, scalar::toBF16>)->Name("ToBF16/scalar");
BENCHMARK(BM_Widen<bf16, toFloat>)->Name("BF16ToFloat");
BENCHMARK(BM_Stochastic<f16, stochasticRoundToF16>)->Name("StochasticToF16");
BENCHMARK(BM_Stochastic<bf16, stochasticRoundToBF16>)->Name("StochasticToBF16");
BENCHMARK(BM_AllFinite);
BENCHMARK_MAIN();
