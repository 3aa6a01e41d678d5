// System description (every required field, true host values) and the results package layout.
#include "harness/system_description.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "checker_util.h"
#include "harness/result_package.h"

namespace ipu::harness {
namespace {

namespace fs = std::filesystem;

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           (std::string("harness_sysdesc_") +
            ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" +
            std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  SystemDescriptionOptions options() const {
    SystemDescriptionOptions o;
    o.submitter = "ipu_mlperf";
    o.division = "closed";
    o.status = systemDescriptionStatus("research");
    o.system_name = "IPU-POD16 (emulated)";
    o.pod = podTopology(16);
    o.results_dir = dir_;
    o.framework = "ipu_mlperf 0.1.0";
    return o;
  }
  fs::path dir_;
};

using SystemDescription = TempDir;
using ResultPackage = TempDir;

TEST_F(SystemDescription, EveryRequiredFieldIsPresentAndNonEmpty) {
  const Json d = buildSystemDescription(options());
  ASSERT_EQ(systemDescriptionFields().size(), 33u);
  for (const std::string& field : systemDescriptionFields()) {
    ASSERT_TRUE(d.contains(field)) << field;
    ASSERT_TRUE(d[field].is_string()) << field;
    EXPECT_FALSE(d[field].get<std::string>().empty()) << field;
  }
  EXPECT_EQ(d.size(), 33u);  // nothing extra
}

TEST_F(SystemDescription, HostValuesArePlausibleAndTrue) {
  const HostInfo host = probeHost();
  EXPECT_EQ(host.logical_cpus, static_cast<int>(std::thread::hardware_concurrency()));
  EXPECT_GE(host.sockets, 1);
  EXPECT_GT(host.memory_bytes, std::int64_t{256} << 20);
  EXPECT_FALSE(host.cpu_model.empty());
  EXPECT_FALSE(host.kernel.empty());
  const StorageInfo storage = probeStorage(dir_ / "not" / "yet" / "created");
  EXPECT_GT(storage.capacity_bytes, 0);
  EXPECT_FALSE(storage.mount_point.empty());

  const Json d = buildSystemDescription(options(), host, storage);
  EXPECT_EQ(d["host_processor_core_count"], std::to_string(std::thread::hardware_concurrency()));
  EXPECT_EQ(d["host_processor_model_name"], host.cpu_model);
  EXPECT_EQ(d["accelerators_per_node"], "16");
  EXPECT_EQ(d["accelerator_model_name"], "Graphcore IPU Mk2 GC200 (emulated)");
  EXPECT_NE(d["accelerator_frequency"].get<std::string>().find("1.33 GHz"), std::string::npos);
  EXPECT_NE(d["accelerator_on-chip_memories"].get<std::string>().find("900 MB"), std::string::npos);
  const std::string notes = d["hw_notes"];
  EXPECT_NE(notes.find("EMULATED on a CPU host"), std::string::npos) << notes;
  EXPECT_NE(notes.find("host wall-clock times of the emulation"), std::string::npos) << notes;
  EXPECT_NE(d["accelerator_interconnect_topology"].get<std::string>().find("IPU-POD16"),
            std::string::npos);
  EXPECT_EQ(d["status"], "Research, Development, or Internal (RDI)");
  EXPECT_THROW(systemDescriptionStatus("released"), std::invalid_argument);
  EXPECT_EQ(projectNameAndVersion().rfind("ipu_mlperf ", 0), 0u) << projectNameAndVersion();
}

TEST_F(SystemDescription, OfficialSystemDescriptionCheckerAcceptsIt) {
  if (!checker::haveChecker()) GTEST_SKIP() << checker::kNoChecker;
  const PackageLayout layout{dir_, "ipu_mlperf", defaultSystemId(16)};
  const fs::path path = writeSystemDescription(layout, buildSystemDescription(options()));
  for (const char* ruleset : {"4.0.0", "1.1.0"}) {
    const auto r = checker::runPython(
        "-m mlperf_logging.system_desc_checker '" + path.string() + "' training " + ruleset, dir_);
    EXPECT_NE(r.output.find("System description checker passed"), std::string::npos)
        << ruleset << ":\n"
        << r.output;
  }
}

TEST_F(ResultPackage, LayoutIsWhatThePackageCheckerReads) {
  const PackageLayout layout{dir_, "ipu_mlperf", "ipu-pod16-emulated"};
  const fs::path r3 = resultFilePath(layout, Benchmark::kResNet50, 3);
  EXPECT_EQ(r3, dir_ / "ipu_mlperf/results/ipu-pod16-emulated/resnet/result_3.txt");
  EXPECT_TRUE(fs::is_directory(r3.parent_path()));
  EXPECT_EQ(resultFilePath(layout, Benchmark::kBertLarge, 0).parent_path().filename(), "bert");
  EXPECT_EQ(resultFilePath(layout, Benchmark::kEfficientNetB4, 0).parent_path().filename(),
            "efficientnet_b4");
  const fs::path sys = writeSystemDescription(layout, Json{{"system_name", "x"}});
  EXPECT_EQ(sys, dir_ / "ipu_mlperf/systems/ipu-pod16-emulated.json");
  std::ifstream in(sys);
  EXPECT_EQ(Json::parse(in)["system_name"], "x");
  EXPECT_FALSE(fs::exists(sys.string() + ".tmp"));
  EXPECT_EQ(requiredRunCount(Benchmark::kResNet50), 5);
  EXPECT_EQ(requiredRunCount(Benchmark::kBertLarge), 10);
  EXPECT_THROW(resultFilePath(layout, Benchmark::kResNet50, -1), std::invalid_argument);
  EXPECT_THROW(resultFilePath({dir_, "a/b", "s"}, Benchmark::kResNet50, 0), std::invalid_argument);
}

}  // namespace
}  // namespace ipu::harness
