// The proof that the logger and the event sequence are right: a complete synthetic ResNet-50
// closed log written with MlLogger and the library's sequence helpers, judged by the official
// checker (`python -m mlperf_logging.compliance_checker`) under rulesets 4.0.0 and 1.1.0, and a
// five-run package judged by the package checker.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "checker_util.h"
#include "harness/division_rules.h"
#include "harness/mllog.h"
#include "harness/mlperf_events.h"
#include "harness/pod_presets.h"
#include "harness/result_package.h"
#include "harness/system_description.h"

namespace ipu::harness {
namespace {

namespace fs = std::filesystem;

constexpr char kOrg[] = "ipu_mlperf";

// A plausible POD16 run: 5 minutes of init, 38 epochs of ~45 s, evaluation every 4 epochs
// with offset 2 (as Graphcore's POD16 logs), reaching 75.9% at epoch 38.
void writeSyntheticResnetLog(const fs::path& path, int seed) {
  const PodPreset& preset = findPreset(Benchmark::kResNet50, 16, Scale::kFull);
  std::int64_t now = 1700000000000 + seed * 3600000;
  MlLoggerOptions options;
  options.path = path;
  options.clock = [&now] { return now; };
  MlLogger log(options);

  logCacheClear(log);
  logInitStart(log);
  logSubmissionHeader(log, {kOrg, defaultSystemId(16), "closed", "research",
                            mlperfBenchmarkName(preset.benchmark)});
  log.event(keys::kSeed, seed);
  logHyperparameters(log, mlperfHyperparameters(preset));
  now += 1000;
  logWeightsInitialization(log, resnet50CanonicalTensorNames());
  now += 5 * 60 * 1000;  // compilation
  logInitStop(log);
  logRunStart(log);

  const int epochs = preset.epochs;
  for (const EpochBlock& block : resnetEvalBlocks(epochs, 2)) {
    logBlockStart(log, block.first_epoch, block.epoch_count);
    for (int e = block.first_epoch; e <= block.last_epoch(); ++e) {
      logEpochStart(log, e);
      now += 45000;
      logEpochStop(log, e);
    }
    logBlockStop(log, block.first_epoch);
    const int epoch = block.last_epoch();
    logEvalStart(log, epoch);
    now += 600;
    logEvalStop(log, epoch);
    logEvalAccuracy(log, 0.26 + (0.7593 - 0.26) * epoch / epochs, epoch);
  }
  logRunStop(log, true, epochs);
}

class Compliance : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!checker::haveChecker()) GTEST_SKIP() << checker::kNoChecker;
    dir_ = fs::temp_directory_path() /
           (std::string("harness_compliance_") +
            ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" +
            std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty() && !HasFailure()) fs::remove_all(dir_);  // kept for a failed test
  }
  fs::path dir_;
};

TEST_F(Compliance, SyntheticLogUsesOnlyClosedLegalHyperparameters) {
  const PodPreset& preset = findPreset(Benchmark::kResNet50, 16, Scale::kFull);
  EXPECT_TRUE(validate(Division::kClosed, preset.benchmark, mlperfHyperparameters(preset),
                       preset.model_variant)
                  .empty());
}

TEST_F(Compliance, ResnetClosedLogPassesRuleset400And110) {
  const fs::path log = dir_ / "result_0.txt";
  writeSyntheticResnetLog(log, 1);
  for (const char* ruleset : {"4.0.0", "1.1.0"}) {
    const auto r = checker::runPython(
        std::string("-m mlperf_logging.compliance_checker --usage training --ruleset ") + ruleset +
            " '" + log.string() + "'",
        dir_);
    EXPECT_EQ(r.exit_code, 0) << ruleset << ":\n" << r.output;
    EXPECT_NE(checker::lastNonEmptyLine(r.output).find("SUCCESS"), std::string::npos)
        << "ruleset " << ruleset << ", log kept at " << log << ":\n"
        << r.output;
  }
}

TEST_F(Compliance, CheckerRejectsALogMissingATensor) {
  // Guards the test above against a checker that accepts anything.
  const fs::path log = dir_ / "result_0.txt";
  writeSyntheticResnetLog(log, 1);
  std::ifstream in(log);
  std::string text, line;
  while (std::getline(in, line)) {
    if (line.find("\"tensor\": \"fc1_bias\"") == std::string::npos) text += line + "\n";
  }
  in.close();
  std::ofstream(log) << text;
  const auto r =
      checker::runPython("-m mlperf_logging.compliance_checker --usage training --ruleset 1.1.0 '" +
                             log.string() + "'",
                         dir_);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_EQ(checker::lastNonEmptyLine(r.output).find("SUCCESS"), std::string::npos) << r.output;
}

TEST_F(Compliance, FiveRunPackagePassesThePackageChecker) {
  const PackageLayout layout{dir_, kOrg, defaultSystemId(16)};
  for (int run = 0; run < requiredRunCount(Benchmark::kResNet50); ++run) {
    writeSyntheticResnetLog(resultFilePath(layout, Benchmark::kResNet50, run), run + 1);
  }
  SystemDescriptionOptions o;
  o.submitter = kOrg;
  o.division = "closed";
  o.status = systemDescriptionStatus("research");
  o.system_name = "IPU-POD16 (emulated)";
  o.pod = podTopology(16);
  o.results_dir = dir_;
  o.framework = "ipu_mlperf 0.1.0";
  writeSystemDescription(layout, buildSystemDescription(o));
  const auto r = checker::runPython(
      "-m mlperf_logging.package_checker '" + orgDir(layout).string() + "' training 4.0.0", dir_);
  EXPECT_NE(r.output.find("PACKAGE CHECKER FOUND NO ERRORS, SUCCESS"), std::string::npos)
      << "package kept at " << dir_ << ":\n"
      << r.output;
}

}  // namespace
}  // namespace ipu::harness
