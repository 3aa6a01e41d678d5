// MlLogger: exact line format, call-site metadata, flush per line, once-keys, ranks, threads.
#include "harness/mllog.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "harness/mlperf_events.h"

namespace ipu::harness {
namespace {

namespace fs = std::filesystem;

class MlLoggerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("mllog_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
            "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    path_ = dir_ / "log.txt";
  }
  void TearDown() override { fs::remove_all(dir_); }

  MlLoggerOptions options() {
    MlLoggerOptions o;
    o.path = path_;
    o.print_warnings = false;
    o.clock = [this] { return now_++; };
    return o;
  }
  std::vector<std::string> lines() const {
    std::ifstream in(path_);
    std::vector<std::string> out;
    for (std::string l; std::getline(in, l);) out.push_back(l);
    return out;
  }
  static Json parse(const std::string& line) {
    const std::string prefix = ":::MLLOG ";
    EXPECT_EQ(line.rfind(prefix, 0), 0u) << line;
    return Json::parse(line.substr(prefix.size()));
  }

  fs::path dir_;
  fs::path path_;
  std::int64_t now_ = 1636168322050;
};

TEST_F(MlLoggerTest, LineIsExactlyTheMlperfFormat) {
  {
    MlLogger log(options());
    log.event(keys::kSeed, 7);
    const int line = __LINE__ - 1;
    ASSERT_EQ(lines().size(), 1u);
    EXPECT_EQ(lines()[0],
              ":::MLLOG {\"namespace\": \"\", \"time_ms\": 1636168322050, \"event_type\": "
              "\"POINT_IN_TIME\", \"key\": \"seed\", \"value\": 7, \"metadata\": {\"file\": "
              "\"tests/harness/mllog_test.cpp\", \"lineno\": " +
                  std::to_string(line) + "}}");
  }
}

TEST_F(MlLoggerTest, KeyOrderTypesAndCallSiteMetadata) {
  MlLogger log(options());
  log.start(keys::kBlockStart, nullptr, {{meta::kFirstEpochNum, 1}, {meta::kEpochCount, 4}});
  const int startLine = __LINE__ - 1;
  log.end(keys::kEpochStop, nullptr, {{meta::kEpochNum, 3}});
  const int endLine = __LINE__ - 1;
  log.event(keys::kLarsOptWeightDecay, 5e-05);
  log.event(keys::kLarsOptLrDecayPolyPower, 2.0);
  const auto l = lines();
  ASSERT_EQ(l.size(), 4u);
  const std::vector<std::string> order = {"namespace", "time_ms", "event_type",
                                          "key",       "value",   "metadata"};
  for (const auto& line : l) {
    const Json j = parse(line);
    std::vector<std::string> got;
    for (const auto& [k, v] : j.items()) got.push_back(k);
    EXPECT_EQ(got, order) << line;
    EXPECT_TRUE(j["time_ms"].is_number_integer());
    EXPECT_EQ(j["metadata"]["file"], "tests/harness/mllog_test.cpp");
  }
  const Json start = parse(l[0]);
  EXPECT_EQ(start["event_type"], "INTERVAL_START");
  EXPECT_TRUE(start["value"].is_null());
  EXPECT_EQ(start["metadata"]["lineno"], startLine);
  std::vector<std::string> mdKeys;
  for (const auto& [k, v] : start["metadata"].items()) mdKeys.push_back(k);
  EXPECT_EQ(mdKeys, (std::vector<std::string>{"file", "lineno", "first_epoch_num", "epoch_count"}));
  const Json end = parse(l[1]);
  EXPECT_EQ(end["event_type"], "INTERVAL_END");
  EXPECT_EQ(end["metadata"]["lineno"], endLine);
  EXPECT_EQ(end["metadata"]["epoch_num"], 3);
  // Python's repr of these floats, as mlperf_logging prints them.
  EXPECT_NE(l[2].find("\"value\": 5e-05,"), std::string::npos) << l[2];
  EXPECT_NE(l[3].find("\"value\": 2.0,"), std::string::npos) << l[3];
  EXPECT_LT(parse(l[0])["time_ms"].get<std::int64_t>(), parse(l[3])["time_ms"].get<std::int64_t>());
}

TEST_F(MlLoggerTest, HelpersReportTheirCallerAsCallSite) {
  MlLogger log(options());
  logRunStop(log, true, 38);
  const int line = __LINE__ - 1;
  const Json j = parse(lines().at(0));
  EXPECT_EQ(j["metadata"]["lineno"], line);
  EXPECT_EQ(j["metadata"]["file"], "tests/harness/mllog_test.cpp");
  EXPECT_EQ(j["metadata"]["status"], "success");
  EXPECT_EQ(j["metadata"]["epoch_num"], 38);
}

TEST_F(MlLoggerTest, EachLineIsInTheFileBeforeTheCallReturns) {
  MlLogger log(options());
  for (int i = 1; i <= 3; ++i) {
    log.event(keys::kEvalAccuracy, 0.1 * i, {{meta::kEpochNum, i}});
    // Read through an independent stream while the logger still holds the file open.
    EXPECT_EQ(lines().size(), static_cast<size_t>(i));
  }
}

TEST_F(MlLoggerTest, FsyncOptionAndEchoStream) {
  std::ostringstream echo;
  auto o = options();
  o.fsync_each_line = true;
  o.echo = &echo;
  MlLogger log(o);
  log.event(keys::kCacheClear, true);
  EXPECT_EQ(lines().size(), 1u);
  EXPECT_EQ(echo.str(), lines()[0] + "\n");
}

TEST_F(MlLoggerTest, IdenticalDuplicateHyperparameterIsDroppedWithAWarning) {
  MlLogger log(options());
  log.event(keys::kGlobalBatchSize, 3200);
  log.event(keys::kGlobalBatchSize, 3200);
  EXPECT_EQ(lines().size(), 1u);
  ASSERT_EQ(log.warnings().size(), 1u);
  EXPECT_NE(log.warnings()[0].find("global_batch_size"), std::string::npos);
}

TEST_F(MlLoggerTest, DuplicateHyperparameterWithDifferentValueThrows) {
  MlLogger log(options());
  log.event(keys::kLarsOptBaseLearningRate, 10.72);
  try {
    log.event(keys::kLarsOptBaseLearningRate, 12.51);
    FAIL() << "expected std::logic_error";
  } catch (const std::logic_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("lars_opt_base_learning_rate"), std::string::npos) << what;
    EXPECT_NE(what.find("10.72"), std::string::npos) << what;
    EXPECT_NE(what.find("12.51"), std::string::npos) << what;
  }
  EXPECT_EQ(lines().size(), 1u);
}

TEST_F(MlLoggerTest, RepeatableKeysAreNotOnceKeys) {
  MlLogger log(options());
  log.event(keys::kEvalAccuracy, 0.5, {{meta::kEpochNum, 1}});
  log.event(keys::kEvalAccuracy, 0.6, {{meta::kEpochNum, 2}});
  logWeightsInitialization(log, {"a", "b"});
  EXPECT_EQ(lines().size(), 4u);
  EXPECT_TRUE(log.warnings().empty());
  EXPECT_TRUE(isOnceKey("opt_lamb_beta_1"));
  EXPECT_TRUE(isOnceKey("submission_org"));
  EXPECT_FALSE(isOnceKey("eval_accuracy"));
  EXPECT_FALSE(isOnceKey("weights_initialization"));
}

TEST_F(MlLoggerTest, RunStartTwiceThrows) {
  MlLogger log(options());
  logRunStart(log);
  EXPECT_THROW(logRunStart(log), std::logic_error);
}

TEST_F(MlLoggerTest, NonZeroRanksWriteNothing) {
  auto o = options();
  o.rank = 3;
  std::ostringstream echo;
  o.echo = &echo;
  MlLogger log(o);
  EXPECT_FALSE(log.enabled());
  log.event(keys::kSeed, 1);
  log.event(keys::kSeed, 2);  // no-op loggers do not even check
  logRunStart(log);
  EXPECT_FALSE(fs::exists(path_));
  EXPECT_TRUE(echo.str().empty());
  EXPECT_EQ(log.linesWritten(), 0);
}

TEST_F(MlLoggerTest, ConcurrentEventsGiveWholeLinesInTimeOrder) {
  auto o = options();
  o.clock = nullptr;  // the real clock
  MlLogger log(o);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&log, t] {
      for (int i = 0; i < 200; ++i) {
        log.event("throughput", t * 1000 + i, {{meta::kEpochNum, i}});
      }
    });
  }
  for (auto& th : threads) th.join();
  const auto l = lines();
  ASSERT_EQ(l.size(), 800u);
  std::int64_t last = 0;
  for (const auto& line : l) {
    const Json j = parse(line);
    EXPECT_GE(j["time_ms"].get<std::int64_t>(), last);
    last = j["time_ms"].get<std::int64_t>();
  }
}

TEST_F(MlLoggerTest, UnwritableFileThrowsNamingThePath) {
  auto o = options();
  o.path = dir_ / "no_such_dir" / "log.txt";
  try {
    MlLogger log(o);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_dir"), std::string::npos);
  }
}

TEST(DumpPythonStyle, MatchesJsonDumps) {
  const Json j = Json{{"a", 1}, {"b", Json::array({1.5, "x", nullptr, true})}, {"c", "é"}};
  EXPECT_EQ(dumpPythonStyle(j), "{\"a\": 1, \"b\": [1.5, \"x\", null, true], \"c\": \"\\u00e9\"}");
}

TEST(ResnetEvalBlocks, EveryFourEpochsWithOffset) {
  const auto blocks = resnetEvalBlocks(38, 2);
  ASSERT_EQ(blocks.size(), 10u);
  EXPECT_EQ(blocks[0].first_epoch, 1);
  EXPECT_EQ(blocks[0].epoch_count, 2);
  EXPECT_EQ(blocks[1].first_epoch, 3);
  EXPECT_EQ(blocks[1].epoch_count, 4);
  EXPECT_EQ(blocks.back().last_epoch(), 38);
  const auto b0 = resnetEvalBlocks(10, 0);  // 4, 8, then the last epoch 10
  ASSERT_EQ(b0.size(), 3u);
  EXPECT_EQ(b0[2].first_epoch, 9);
  EXPECT_EQ(b0[2].epoch_count, 2);
  EXPECT_THROW(resnetEvalBlocks(10, 4), std::invalid_argument);
}

TEST(CanonicalNames, CountsAndUniqueness) {
  const auto& rn = resnet50CanonicalTensorNames();
  EXPECT_EQ(rn.size(), 161u);
  EXPECT_EQ(std::set<std::string>(rn.begin(), rn.end()).size(), 161u);
  EXPECT_EQ(rn.front(), "conv0_weight");
  EXPECT_EQ(rn.back(), "fc1_bias");
  const auto& bert = bertLargeCanonicalTensorNames();
  EXPECT_EQ(bert.size(), 398u);
  EXPECT_EQ(std::set<std::string>(bert.begin(), bert.end()).size(), 398u);
}

}  // namespace
}  // namespace ipu::harness
