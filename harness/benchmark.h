// The benchmarks this suite runs, their CLI spellings and their names in MLPerf terms.
// One place for these strings, so the presets, the rules and the results package agree.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ipu::harness {

enum class Benchmark { kResNet50, kBertLarge, kEfficientNetB4 };
enum class Scale { kMini, kFull };
enum class Division { kClosed, kOpen };

// CLI spellings: "resnet50", "bert_large", "efficientnet_b4"; "mini", "full"; "closed", "open".
// The parsers throw std::invalid_argument naming the bad value and listing the valid ones.
std::string toString(Benchmark benchmark);
std::string toString(Scale scale);
std::string toString(Division division);
Benchmark parseBenchmark(std::string_view text);
Scale parseScale(std::string_view text);
Division parseDivision(std::string_view text);
const std::vector<Benchmark>& allBenchmarks();

// Value of `submission_benchmark` and the benchmark folder of the results package: "resnet",
// "bert", and "efficientnet_b4" (not an MLPerf benchmark: the name of our own rules,
// docs/rules/efficientnet_b4.md).
std::string mlperfBenchmarkName(Benchmark benchmark);

// The model variant that the closed division requires ("resnet50", "bert_large"); for
// EfficientNet-B4 (open only) its own name.
std::string referenceModelVariant(Benchmark benchmark);

}  // namespace ipu::harness
