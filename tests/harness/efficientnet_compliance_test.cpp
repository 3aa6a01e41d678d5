// The official checker with our EfficientNet-B4 ruleset on logs written by the harness's own
// MlLogger and event functions: what the pre-run check (validateEfficientNet) accepts the checker
// accepts, and what it refuses the checker refuses, naming the same keys.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "checker_util.h"
#include "harness/mlperf_events.h"
#include "harness/rules/efficientnet_rules.h"

namespace ipu::harness {

Json efficientNetClosedReference();  // efficientnet_rules_test.cpp

namespace {

namespace fs = std::filesystem;

std::vector<Violation> closed(const Json& hp) {
  return validateEfficientNet(builtinEfficientNetRules(), Division::kClosed, hp);
}

// The 418 torchvision names the closed ruleset requires, read from the ruleset itself.
std::vector<std::string> rulesetTensorNames() {
  std::ifstream in(fs::path(IPU_SOURCE_DIR) /
                   "harness/rules/training_efficientnet/closed_efficientnet_b4.yaml");
  std::vector<std::string> names;
  const std::regex name(R"re(^\s*"((features|classifier)\.[^"]+)",$)re");
  std::smatch m;
  for (std::string line; std::getline(in, line);) {
    if (std::regex_match(line, m, name)) names.push_back(m[1]);
  }
  return names;
}

// A complete run written with the harness's MlLogger and event functions: 8 evaluations every 4
// epochs (offset 1), the last at `finalAccuracy`.
void writeEfficientNetLog(const fs::path& path, const std::string& division, const Json& hp,
                          double finalAccuracy) {
  std::int64_t now = 1800000000000;
  MlLoggerOptions options;
  options.path = path;
  options.clock = [&now] { return now; };
  options.print_warnings = false;
  MlLogger log(options);
  logCacheClear(log);
  logInitStart(log);
  logSubmissionHeader(
      log, {"ipu_mlperf", "ipu-pod16-emulated", division, "research", "efficientnet_b4"});
  log.event(keys::kSeed, 1);
  Json all = hp;
  all["train_samples"] = 1281167;
  all["eval_samples"] = 50000;
  logHyperparameters(log, all);
  logWeightsInitialization(log, rulesetTensorNames());
  now += 10 * 60 * 1000;
  logInitStop(log);
  logRunStart(log);
  int first = 1;
  for (int i = 0; i < 8; ++i) {
    const int last = 3 + 4 * i;
    logBlockStart(log, first, last - first + 1);
    for (int e = first; e <= last; ++e) {
      logEpochStart(log, e);
      now += 170000;
      logEpochStop(log, e);
    }
    logBlockStop(log, first);
    logEvalStart(log, last);
    now += 4000;
    logEvalStop(log, last);
    logEvalAccuracy(log, 0.3 + (finalAccuracy - 0.3) * i / 7, last);
    first = last + 1;
  }
  logRunStop(log, finalAccuracy >= 0.82, first - 1);
}

// checker::haveChecker(), spelled without the std::string concatenation in which GCC 12 at -O3
// sees a false -Wrestrict once inlined here (its std::string false positives, cf. GCC bug 105329).
bool haveChecker() {
  if (!fs::exists(checker::venvPython())) return false;
  return checker::runPython("-c 'import mlperf_logging'", fs::temp_directory_path()).exit_code == 0;
}

class EfficientNetCompliance : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!haveChecker()) GTEST_SKIP() << checker::kNoChecker;
    dir_ = fs::temp_directory_path() /
           ("efficientnet_compliance_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty() && !HasFailure()) fs::remove_all(dir_);  // kept for a failed test
  }
  checker::CommandResult check(const fs::path& log) {
    return checker::runPython(
        "-m mlperf_logging.compliance_checker --usage training --ruleset 4.0.0 --log_output "
        "/dev/null --config '" IPU_SOURCE_DIR
        "/harness/rules/training_efficientnet/common.yaml' '" +
            log.string() + "'",
        dir_);
  }
  fs::path dir_;
};

TEST_F(EfficientNetCompliance, WhatThePreRunCheckAcceptsTheCheckerAccepts) {
  ASSERT_EQ(rulesetTensorNames().size(), 418u);
  const Json hp = efficientNetClosedReference();
  ASSERT_TRUE(closed(hp).empty());
  const fs::path log = dir_ / "result_0.txt";
  writeEfficientNetLog(log, "closed", hp, 0.8213);
  const auto r = check(log);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(checker::lastNonEmptyLine(r.output).find("SUCCESS"), std::string::npos) << r.output;
}

TEST_F(EfficientNetCompliance, WhatThePreRunCheckRefusesTheCheckerRefuses) {
  Json g16 = efficientNetClosedReference();
  g16["model_variant"] = "g16";
  g16["norm_type"] = "group_norm";
  g16["opt_rmsprop_decay"] = 0.953125;
  // Open: both accept.
  EXPECT_TRUE(validateEfficientNet(builtinEfficientNetRules(), Division::kOpen, g16).empty());
  const fs::path open = dir_ / "open.txt";
  writeEfficientNetLog(open, "open", g16, 0.8213);
  const auto o = check(open);
  EXPECT_EQ(o.exit_code, 0) << o.output;
  // Closed: both refuse, each naming the same keys.
  const auto v = closed(g16);
  ASSERT_EQ(v.size(), 3u) << formatViolations(v);
  const fs::path log = dir_ / "closed.txt";
  writeEfficientNetLog(log, "closed", g16, 0.8213);
  const auto r = check(log);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  for (const Violation& x : v) {
    EXPECT_NE(r.output.find("CHECK for '" + x.key + "' failed"), std::string::npos)
        << x.key << ":\n"
        << r.output;
  }
}

}  // namespace
}  // namespace ipu::harness
