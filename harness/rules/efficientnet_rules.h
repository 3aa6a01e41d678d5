// EfficientNet-B4's rules of this project (not MLCommons': EfficientNet was never an MLPerf
// benchmark), read from harness/rules/efficientnet_b4.json, for the harness to enforce before a
// run. The definition is docs/rules/efficientnet_b4.md; the compliance checker's form of the
// same rules is harness/rules/training_efficientnet/*.yaml.
#pragma once

#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "harness/benchmark.h"       // Division
#include "harness/division_rules.h"  // Violation
#include "harness/mllog.h"           // Json

namespace ipu::harness {

// A rules file that cannot be used; what() names the file (and line:column for a parse error).
class RulesError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct EfficientNetRules {
  std::string source;  // the file, for messages
  double target = 0;   // top-1 at full scale
  int eval_period_epochs = 0;
  std::vector<int> eval_offsets;
  Json closed_fixed;  // key -> the only value closed allows (full scale)
  // Mini scale (Fashion-MNIST, the "mini" section): its own target and the closed keys whose
  // fixed value differs from the full recipe's (benchmark_scale "mini" among them).
  double mini_target = 0;
  Json mini_closed_fixed;
  std::vector<std::string> closed_tunable;  // keys closed must log, values its own
  double lr_per_256_multiple_of = 0;        // opt_base_learning_rate = k x batch / 256
  std::vector<std::string> open_model_variants;
  std::vector<std::string> open_norm_types;
  std::vector<std::string> open_required;
};

// Parses the JSON text of the rules; `source` names it in errors. Throws RulesError.
EfficientNetRules parseEfficientNetRules(std::string_view text, const std::string& source);
// Reads and parses a rules file. Throws RulesError naming the file.
EfficientNetRules loadEfficientNetRules(const std::filesystem::path& path);
// The rules built into the binary: harness/rules/efficientnet_b4.json as it was at build time.
const EfficientNetRules& builtinEfficientNetRules();

// The closed division's fixed keys for the scale a log names (benchmark_scale "mini": the full
// recipe with the mini section's values over it).
Json closedFixedFor(const EfficientNetRules& rules, const Json& hyperparameters);

// Every violation of `division`'s rules by `hyperparameters` (the MLPerf-named keys the log
// carries). Closed: every fixed key at its value (the mini values under benchmark_scale "mini"),
// every tunable key present and legal (batch, accumulation and BN span integers > 0, warm-up epochs
// an integer >= 0, the base learning rate k x global_batch_size / 256 with k a multiple of the
// rule's step). Open: the required keys present, model_variant and norm_type among the allowed
// ones. Empty = valid.
std::vector<Violation> validateEfficientNet(const EfficientNetRules& rules, Division division,
                                            const Json& hyperparameters);

// The evaluation schedule the run will use (the harness's eval_period / eval_offset): closed
// must evaluate every rules.eval_period_epochs epochs with an offset in rules.eval_offsets; open
// is free. Empty = valid.
std::vector<Violation> validateEfficientNetEvaluation(const EfficientNetRules& rules,
                                                      Division division, int periodEpochs,
                                                      int offset);

}  // namespace ipu::harness
