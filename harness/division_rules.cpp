#include "harness/division_rules.h"

#include "harness/rules/efficientnet_rules.h"

#include <fmt/format.h>

#include <cmath>

namespace ipu::harness {
namespace {

constexpr char kResnetRule[] = "MLPerf Training rules v4.0, ResNet-50 closed";
constexpr char kBertRule[] = "MLPerf Training rules v5.0, BERT closed";
constexpr char kResnetChecker[] =
    "MLPerf compliance checker training_4.0.0/closed_resnet_{}.yaml (ResNet-50 closed)";
constexpr char kBertChecker[] =
    "MLPerf compliance checker training_5.0.0/closed_bert.yaml (BERT closed)";

// Same tolerance as the checker's is_integer().
bool isInteger(double x) {
  return std::abs(std::round(x) - x) < 1e-5;
}

class Checker {
 public:
  Checker(const Json& hp, std::vector<Violation>& out) : hp_(hp), out_(out) {}

  bool has(const char* key) const { return hp_.contains(key); }
  const Json& at(const char* key) const { return hp_.at(key); }

  void add(std::string key, std::string value, std::string allowed, std::string rule) {
    out_.push_back({std::move(key), std::move(value), std::move(allowed), std::move(rule)});
  }
  bool require(const char* key, const std::string& rule) {
    if (has(key)) return true;
    add(key, "<missing>", "present (logged exactly once)", rule);
    return false;
  }
  // A present numeric key whose value fails `ok` is reported with `allowed`.
  template <typename Pred>
  void number(const char* key, Pred ok, const char* allowed, const std::string& rule) {
    if (!has(key)) return;
    const Json& v = at(key);
    if (!v.is_number() || !ok(v.get<double>())) add(key, v.dump(), allowed, rule);
  }

 private:
  const Json& hp_;
  std::vector<Violation>& out_;
};

bool isEndLr(double x) {
  return x == 0.0001;
}
bool isPowerOfTwoTimes1e4(double x) {
  return x > 0 && isInteger(std::log2(x / 0.0001));
}
bool isNonNegativeInteger(double x) {
  return x >= 0 && isInteger(x);
}
bool isPositive(double x) {
  return x > 0;
}

void validateModel(Checker& c, Benchmark benchmark, std::string_view modelVariant,
                   const char* rule) {
  const std::string reference = referenceModelVariant(benchmark);
  if (modelVariant != reference) {
    c.add("model", Json(std::string(modelVariant)).dump(),
          fmt::format("the reference model \"{}\" (closed division: the model must be the "
                      "reference implementation's; variants are open-division entries)",
                      reference),
          rule);
  }
}

void validateCommon(Checker& c, const std::string& checker) {
  for (const char* key : {keys::kGlobalBatchSize, keys::kGradientAccumulationSteps}) {
    if (c.require(key, checker)) c.number(key, isPositive, "an integer > 0", checker);
  }
}

void validateResnet(Checker& c, std::string_view modelVariant) {
  const std::string rule = kResnetRule;
  validateModel(c, Benchmark::kResNet50, modelVariant, kResnetRule);
  validateCommon(c, fmt::format(kResnetChecker, "lars|sgd"));
  if (c.has(keys::kLabelSmoothing)) {
    c.number(
        keys::kLabelSmoothing, [](double x) { return x == 0.0 || x == 0.1; }, "0 or 0.1", rule);
  }
  if (!c.require(keys::kOptName, rule)) return;
  const Json& opt = c.at(keys::kOptName);
  if (opt == "lars") {
    const std::string checker = fmt::format(kResnetChecker, "lars");
    for (const char* key :
         {keys::kLarsOptBaseLearningRate, keys::kLarsOptEndLearningRate,
          keys::kLarsOptLrDecayPolyPower, keys::kLarsOptLrDecaySteps, keys::kLarsEpsilon,
          keys::kLarsOptLrWarmupEpochs, keys::kLarsOptMomentum, keys::kLarsOptWeightDecay}) {
      c.require(key, checker);
    }
    c.number(keys::kLarsOptEndLearningRate, isEndLr, "0.0001 (fixed to the reference)", rule);
    c.number(
        keys::kLarsOptLrDecayPolyPower, [](double x) { return x == 2; },
        "2 (fixed to the reference)", rule);
    c.number(
        keys::kLarsEpsilon, [](double x) { return x == 0; }, "0.0 (fixed to the reference)", rule);
    c.number(keys::kLarsOptWeightDecay, isPowerOfTwoTimes1e4,
             "0.0001 x 2^N for an integer N (e.g. 5e-05, 0.0001, 0.0002)", rule);
    const bool smallBatch = !c.has(keys::kGlobalBatchSize) ||
                            !c.at(keys::kGlobalBatchSize).is_number() ||
                            c.at(keys::kGlobalBatchSize).get<double>() < 32768;
    if (smallBatch) {
      c.number(
          keys::kLarsOptMomentum, [](double x) { return x == 0.9; },
          "0.9 (for a global batch below 32k)", rule);
    }
    c.number(keys::kLarsOptLrDecaySteps, isNonNegativeInteger, "an integer >= 0", rule);
  } else if (opt == "sgd") {
    const std::string checker = fmt::format(kResnetChecker, "sgd");
    for (const char* key :
         {keys::kSgdOptBaseLearningRate, keys::kSgdOptEndLearningRate,
          keys::kSgdOptLrDecayPolyPower, keys::kSgdOptLrDecaySteps, keys::kSgdOptWeightDecay,
          keys::kSgdOptMomentum, keys::kModelBnSpan, keys::kOptLrWarmupEpochs}) {
      c.require(key, checker);
    }
    c.number(
        keys::kSgdOptBaseLearningRate, [](double x) { return isInteger(x / 0.001); },
        "a multiple of 0.001 (0.001 x k for an integer k)", rule);
    c.number(keys::kSgdOptEndLearningRate, isEndLr, "0.0001", rule);
    c.number(
        keys::kSgdOptLrDecayPolyPower, [](double x) { return x == 2; }, "2", rule);
    c.number(keys::kSgdOptWeightDecay, isPowerOfTwoTimes1e4,
             "0.0001 x 2^N for an integer N (e.g. 5e-05, 0.0001, 0.0002)", rule);
    c.number(
        keys::kSgdOptMomentum, [](double x) { return x == 0.9; }, "0.9", rule);
    c.number(keys::kSgdOptLrDecaySteps, isNonNegativeInteger, "an integer >= 0", rule);
    c.number(keys::kOptLrWarmupEpochs, isNonNegativeInteger, "an integer >= 0", rule);
  } else {
    c.add(keys::kOptName, opt.dump(), "\"lars\" or \"sgd\"", rule);
  }
}

// The mini scale's sequence length (harness/pod_presets.cpp's BERT mini rows).
constexpr int kBertMiniSequenceLength = 128;

void validateBert(Checker& c, std::string_view modelVariant, Scale scale) {
  const std::string rule = kBertRule;
  const std::string checker = kBertChecker;
  validateModel(c, Benchmark::kBertLarge, modelVariant, kBertRule);
  validateCommon(c, checker);
  if (c.has(keys::kOptName) && c.at(keys::kOptName) != "lamb") {
    c.add(keys::kOptName, c.at(keys::kOptName).dump(), "\"lamb\" (the reference optimizer)", rule);
  }
  for (const char* key :
       {keys::kOptBaseLearningRate, keys::kOptLrTrainingSteps, keys::kOptLrWarmupSteps,
        keys::kNumWarmupSteps, keys::kStartWarmupStep, keys::kOptLambBeta1, keys::kOptLambBeta2,
        keys::kOptLambWeightDecayRate}) {
    c.require(key, checker);
  }
  // The epsilon key was renamed after 1.1.0; either name satisfies one ruleset, log both.
  if (!c.has(keys::kOptLambEpsilon) && !c.has(keys::kOptEpsilon)) {
    c.add(keys::kOptLambEpsilon, "<missing>",
          "present (\"opt_lamb_epsilon\"; \"opt_epsilon\" for ruleset 1.1.0)", checker);
  } else if (c.has(keys::kOptLambEpsilon) && c.has(keys::kOptEpsilon) &&
             c.at(keys::kOptLambEpsilon) != c.at(keys::kOptEpsilon)) {
    c.add(keys::kOptEpsilon, c.at(keys::kOptEpsilon).dump(),
          fmt::format("equal to opt_lamb_epsilon ({}): both name the same LAMB epsilon",
                      c.at(keys::kOptLambEpsilon).dump()),
          rule);
  }
  c.number(
      keys::kOptLambLrDecayPolyPower, [](double x) { return x == 1; },
      "1.0 (the reference's linear decay; not a tunable hyperparameter)", rule);
  if (scale == Scale::kMini) {
    c.number(
        keys::kMaxSequenceLength, [](double x) { return x == kBertMiniSequenceLength; },
        "128 (the mini scale's sequence length; full scale: 512)", rule);
  } else {
    c.number(
        keys::kMaxSequenceLength, [](double x) { return x == 512; },
        "512 (the reference model's sequence length)", rule);
  }
}

}  // namespace

std::string Violation::message() const {
  return fmt::format("{}: {} must be {} (got {})", rule, key, allowed, value);
}

std::vector<Violation> validate(Division division, Benchmark benchmark, const Json& hyperparameters,
                                std::string_view modelVariant, Scale scale) {
  std::vector<Violation> out;
  // EfficientNet-B4: our own rules (both divisions: open must name its model variant).
  if (benchmark == Benchmark::kEfficientNetB4)
    return validateEfficientNet(builtinEfficientNetRules(), division, hyperparameters);
  if (division == Division::kOpen) return out;
  if (!hyperparameters.is_object()) {
    out.push_back({"hyperparameters", hyperparameters.dump(), "a JSON object",
                   benchmark == Benchmark::kResNet50 ? kResnetRule : kBertRule});
    return out;
  }
  Checker c(hyperparameters, out);
  if (benchmark == Benchmark::kResNet50) {
    validateResnet(c, modelVariant);
  } else {
    validateBert(c, modelVariant, scale);
  }
  return out;
}

std::string formatViolations(const std::vector<Violation>& violations) {
  std::string out;
  for (const Violation& v : violations) {
    if (!out.empty()) out += '\n';
    out += v.message();
  }
  return out;
}

}  // namespace ipu::harness
