// The errors that replace the crashes the fuzz targets found (regressions/ in README.md): each
// reader now names the file, key or path and says what was expected.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "datasets/error.h"
#include "datasets/image_decode.h"
#include "datasets/image_folder.h"
#include "harness/config.h"
#include "harness/pod_presets.h"

namespace fs = std::filesystem;

namespace {

const fs::path kRegressions = fs::path(IPU_SOURCE_DIR) / "tests/fuzz/regressions";

std::string messageOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no exception)";
}

ipu::harness::Json json(const std::string& text) {
  return ipu::harness::Json::parse(text);
}

TEST(FuzzFindings, ConfigNumberBeyondDoubleIsAConfigError) {
  const fs::path file = kRegressions / "config/number_overflow_2e308.json";
  try {
    ipu::harness::loadJsonFile(file);
    FAIL() << "accepted " << file;
  } catch (const ipu::harness::ConfigError& e) {
    EXPECT_EQ(e.source(), file.string());
    EXPECT_NE(std::string(e.what()).find("not valid JSON"), std::string::npos) << e.what();
  }
}

TEST(FuzzFindings, ConfigBatchSizesOutOfIntRangeAreRefusedByKey) {
  const auto& preset = ipu::harness::allPresets().front();
  const std::string wraps = messageOf([&] {
    ipu::harness::applyConfig(preset, json(R"({"micro_batch_size": 4294967304})"), "c.json");
  });
  EXPECT_NE(wraps.find("c.json: key 'micro_batch_size' must be <= 2147483647, got 4294967304"),
            std::string::npos)
      << wraps;
  const std::string huge = messageOf(
      [&] { ipu::harness::applyConfig(preset, json(R"({"micro_batch_size": 1e300})"), "c.json"); });
  EXPECT_NE(huge.find("key 'micro_batch_size' must be integer"), std::string::npos) << huge;
  const std::string zero = messageOf([&] {
    ipu::harness::applyConfig(preset, json(R"({"gradient_accumulation_steps": 0})"), "c.json");
  });
  EXPECT_NE(zero.find("key 'gradient_accumulation_steps' must be >= 1, got 0"), std::string::npos)
      << zero;
  // 3.0 still counts as the integer 3.
  EXPECT_EQ(
      ipu::harness::applyConfig(preset, json(R"({"micro_batch_size": 3.0})"), "c.json").micro_batch,
      3);
}

TEST(FuzzFindings, ConfigGlobalBatchOverflowIsRefused) {
  bool refusedSomewhere = false;
  for (const auto& preset : ipu::harness::allPresets()) {
    if (preset.replicas < 4) continue;
    const std::string m = messageOf([&] {
      ipu::harness::applyConfig(
          preset,
          json(R"({"micro_batch_size": 2147483647, "gradient_accumulation_steps": 2147483647})"),
          "c.json");
    });
    EXPECT_NE(m.find("does not fit in 64 bits"), std::string::npos) << preset.name() << ": " << m;
    refusedSomewhere = true;
  }
  EXPECT_TRUE(refusedSomewhere) << "no preset with 4 or more replicas";
}

TEST(FuzzFindings, PngWiderThanIntMaxIsACorruptSample) {
  const fs::path file = kRegressions / "image_decode/png_width_over_int_max.png";
  std::ifstream in(file, std::ios::binary);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                   std::istreambuf_iterator<char>());
  ASSERT_FALSE(bytes.empty()) << file;
  try {
    datasets::inspectImage(bytes, "x.png");
    FAIL() << "accepted " << file;
  } catch (const datasets::CorruptSampleError& e) {
    EXPECT_NE(std::string(e.what()).find("x.png"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("the header claims 2659753572x"), std::string::npos)
        << e.what();
  }
}

TEST(FuzzFindings, SymlinkLoopInAnImageFolderIsADatasetError) {
  const fs::path root = fs::temp_directory_path() / ("fuzz_findings_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "train/n01");
  std::ofstream(root / "train/n01/a.JPEG").put('x');
  fs::create_directory_symlink(root / "train/n02", root / "train/n03");
  fs::create_directory_symlink(root / "train/n03", root / "train/n02");
  const std::string m =
      messageOf([&] { datasets::scanImageFolder(root / "train", datasets::CorruptPolicy::kFail); });
  fs::remove_all(root);
  EXPECT_NE(m.find("cannot scan the image folder"), std::string::npos) << m;
  EXPECT_NE(m.find("symbolic links"), std::string::npos) << m;
}

}  // namespace
