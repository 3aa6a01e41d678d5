#include "harness/benchmark.h"

#include <fmt/format.h>

#include <stdexcept>

namespace ipu::harness {

std::string toString(Benchmark benchmark) {
  switch (benchmark) {
    case Benchmark::kResNet50:
      return "resnet50";
    case Benchmark::kBertLarge:
      return "bert_large";
    case Benchmark::kEfficientNetB4:
      return "efficientnet_b4";
  }
  return "?";
}

std::string toString(Scale scale) {
  return scale == Scale::kMini ? "mini" : "full";
}

std::string toString(Division division) {
  return division == Division::kClosed ? "closed" : "open";
}

const std::vector<Benchmark>& allBenchmarks() {
  static const std::vector<Benchmark> kAll = {Benchmark::kResNet50, Benchmark::kBertLarge,
                                              Benchmark::kEfficientNetB4};
  return kAll;
}

Benchmark parseBenchmark(std::string_view text) {
  for (Benchmark b : allBenchmarks()) {
    if (text == toString(b)) return b;
  }
  throw std::invalid_argument(fmt::format(
      "unknown benchmark '{}': valid benchmarks are resnet50, bert_large, efficientnet_b4", text));
}

Scale parseScale(std::string_view text) {
  if (text == "mini") return Scale::kMini;
  if (text == "full") return Scale::kFull;
  throw std::invalid_argument(fmt::format("unknown scale '{}': valid scales are mini, full", text));
}

Division parseDivision(std::string_view text) {
  if (text == "closed") return Division::kClosed;
  if (text == "open") return Division::kOpen;
  throw std::invalid_argument(
      fmt::format("unknown division '{}': valid divisions are closed, open", text));
}

std::string mlperfBenchmarkName(Benchmark benchmark) {
  switch (benchmark) {
    case Benchmark::kBertLarge:
      return "bert";
    case Benchmark::kEfficientNetB4:
      return "efficientnet_b4";  // our rules' name (harness/rules/efficientnet_b4.json)
    case Benchmark::kResNet50:
      break;
  }
  return "resnet";
}

std::string referenceModelVariant(Benchmark benchmark) {
  return toString(benchmark);
}

}  // namespace ipu::harness
