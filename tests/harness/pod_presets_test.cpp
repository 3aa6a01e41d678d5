// Pod presets: batch identity on every row, the published Graphcore v1.1 configurations exactly
// (against Graphcore's logged hyperparameters, a committed fixture), lookups, topology, config
// overrides.
#include "harness/pod_presets.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>

#include "harness/config.h"

namespace ipu::harness {
namespace {

namespace fs = std::filesystem;

TEST(PodPresets, EveryRowSatisfiesTheBatchAndIpuIdentities) {
  ASSERT_FALSE(allPresets().empty());
  for (const PodPreset& p : allPresets()) {
    SCOPED_TRACE(p.name());
    EXPECT_EQ(p.global_batch, std::int64_t{p.replicas} * p.gradient_accumulation * p.micro_batch *
                                  p.samples_per_row);
    EXPECT_EQ(p.ipus, p.replicas * p.ipus_per_replica);
    EXPECT_EQ(p.ipus, p.pod_size);
    EXPECT_EQ(p.m2000s, (p.ipus + 3) / 4);
    EXPECT_GE(p.hosts, 1);
    EXPECT_EQ(p.hyperparameters.value("opt_name", ""), p.optimizer);
    EXPECT_FALSE(p.precision.empty());
    EXPECT_FALSE(p.source.empty());
    const Json hp = mlperfHyperparameters(p);
    EXPECT_EQ(hp["global_batch_size"], p.global_batch);
    EXPECT_EQ(hp["gradient_accumulation_steps"], p.gradient_accumulation);
  }
}

TEST(PodPresets, TableCoversEveryBenchmarkSizeAndScale) {
  for (Benchmark b : allBenchmarks()) {
    EXPECT_EQ(presetPodSizes(b, Scale::kMini), validPodSizes()) << toString(b);
  }
  EXPECT_EQ(presetPodSizes(Benchmark::kResNet50, Scale::kFull), validPodSizes());
  // 4-IPU pipelines: no single-IPU full-scale BERT-Large or EfficientNet-B4.
  const std::vector<int> pipelined = {4, 16, 64, 128, 256};
  EXPECT_EQ(presetPodSizes(Benchmark::kBertLarge, Scale::kFull), pipelined);
  EXPECT_EQ(presetPodSizes(Benchmark::kEfficientNetB4, Scale::kFull), pipelined);
}

struct ResnetPublished {
  int pod, ga;
  std::int64_t gb;
  double lr;
  int decay;
  double wd;
};

TEST(PodPresets, PublishedResnetConfigurationsExactly) {
  const ResnetPublished rows[] = {{16, 10, 3200, 10.72, 38, 5e-05},
                                  {64, 3, 3840, 12.51, 38, 5e-05},
                                  {128, 2, 5120, 11.2, 41, 0.0001},
                                  {256, 2, 10240, 17.2, 45, 0.0001}};
  for (const auto& r : rows) {
    const PodPreset& p = findPreset(Benchmark::kResNet50, r.pod, Scale::kFull);
    SCOPED_TRACE(p.name());
    EXPECT_TRUE(p.published);
    EXPECT_EQ(p.replicas, r.pod);
    EXPECT_EQ(p.ipus_per_replica, 1);
    EXPECT_EQ(p.micro_batch, 20);
    EXPECT_EQ(p.gradient_accumulation, r.ga);
    EXPECT_EQ(p.global_batch, r.gb);
    EXPECT_EQ(p.optimizer, "lars");
    EXPECT_EQ(p.precision, "FP16.16");
    EXPECT_EQ(p.loss_scaling.mode, "static");
    EXPECT_EQ(p.loss_scaling.scale, 128.0);
    const Json& hp = p.hyperparameters;
    EXPECT_EQ(hp["lars_opt_base_learning_rate"], r.lr);
    EXPECT_EQ(hp["lars_opt_end_learning_rate"], 0.0001);
    EXPECT_EQ(hp["lars_opt_learning_rate_decay_poly_power"], 2.0);
    EXPECT_EQ(hp["lars_opt_learning_rate_decay_steps"], r.decay);
    EXPECT_EQ(hp["lars_epsilon"], 0.0);
    EXPECT_EQ(hp["lars_opt_momentum"], 0.9);
    EXPECT_EQ(hp["lars_opt_learning_rate_warmup_epochs"], 2);
    EXPECT_EQ(hp["lars_opt_weight_decay"], r.wd);
    EXPECT_EQ(p.epochs, r.decay);
    EXPECT_EQ(p.train_samples, 1281167);
    EXPECT_EQ(p.eval_samples, 50000);
  }
  for (int pod : {1, 4}) {
    const PodPreset& p = findPreset(Benchmark::kResNet50, pod, Scale::kFull);
    EXPECT_FALSE(p.published);
    EXPECT_NE(p.source.find("not published"), std::string::npos);
    EXPECT_EQ(p.global_batch, 3200);
  }
}

TEST(PodPresets, PublishedBertAndEfficientNetConfigurations) {
  struct B {
    int pod, replicas, ipr, ga;
    std::int64_t gb;
  };
  for (const B& b : {B{16, 4, 4, 192, 3072}, B{64, 8, 8, 96, 3072}, B{128, 16, 8, 96, 6144}}) {
    const PodPreset& p = findPreset(Benchmark::kBertLarge, b.pod, Scale::kFull);
    SCOPED_TRACE(p.name());
    EXPECT_TRUE(p.published);
    EXPECT_EQ(p.replicas, b.replicas);
    EXPECT_EQ(p.ipus_per_replica, b.ipr);
    EXPECT_EQ(p.gradient_accumulation, b.ga);
    EXPECT_EQ(p.global_batch, b.gb);
    EXPECT_EQ(p.optimizer, "lamb");
    EXPECT_EQ(p.hyperparameters["max_sequence_length"], 512);
    // Graphcore's configs/mk2: micro-batch 2 packs counted as 2 sequences each, FP16.16, static
    // loss scale 1 (POD128: 8), clipping to norm 1 (POD128: 100), the attention/FFN placement.
    EXPECT_EQ(p.micro_batch, 2);
    EXPECT_EQ(p.samples_per_row, 2);
    EXPECT_EQ(p.precision, "FP16.16");
    EXPECT_EQ(p.loss_scaling.mode, "static");
    EXPECT_EQ(p.loss_scaling.scale, b.pod == 128 ? 8.0 : 1.0);
    EXPECT_EQ(p.max_grad_norm, b.pod == 128 ? 100.0 : 1.0);
    EXPECT_NE(p.pipeline.find(b.ipr == 4 ? "IPU1 7 attention / 6 FFN" : "IPU1 2 attention / 2 FFN"),
              std::string::npos)
        << p.pipeline;
  }
  const PodPreset& b256 = findPreset(Benchmark::kBertLarge, 256, Scale::kFull);
  EXPECT_FALSE(b256.published);
  EXPECT_EQ(b256.global_batch, 12288);                         // 32 x 96 x 2 packs x 2
  EXPECT_EQ(b256.hyperparameters["start_warmup_step"], -100);  // the RCP for 12,288
  const PodPreset& e = findPreset(Benchmark::kEfficientNetB4, 16, Scale::kFull);
  EXPECT_EQ(e.replicas, 4);
  EXPECT_EQ(e.ipus_per_replica, 4);
  EXPECT_EQ(e.micro_batch, 3);
  EXPECT_EQ(e.gradient_accumulation, 64);
  EXPECT_EQ(e.global_batch, 768);
  EXPECT_EQ(e.optimizer, "rmsprop");
  EXPECT_FALSE(e.published);  // Graphcore's configuration, but never an MLPerf result
  EXPECT_EQ(e.pipeline_splits, (std::vector<std::string>{"block2b", "block4b", "block6c"}));
  const PodPreset g16 = efficientNetG16Preset(16);
  EXPECT_EQ(g16.micro_batch, 5);
  EXPECT_EQ(g16.gradient_accumulation, 40);
  EXPECT_EQ(g16.global_batch, 800);
  EXPECT_EQ(g16.pipeline_splits, (std::vector<std::string>{"block2c", "block4c", "block6a"}));
  EXPECT_EQ(g16.hyperparameters["model_variant"], "g16");
  const Json hp = mlperfHyperparameters(findPreset(Benchmark::kBertLarge, 16, Scale::kFull));
  EXPECT_EQ(hp["opt_epsilon"], hp["opt_lamb_epsilon"]);  // both ruleset spellings
}

// Graphcore's v1.1 hyperparameters, extracted from the raw result logs by
// tests/fixtures/mlperf_v1.1/make_graphcore_hparams.py (the logs themselves stay outside the
// repository).
const fs::path kHparamsFixture =
    fs::path(IPU_SOURCE_DIR) / "tests/fixtures/mlperf_v1.1/graphcore_hparams.json";

Json readJson(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  return Json::parse(in);
}

// Every hyperparameter of a published preset equals the value Graphcore logged.
void expectPresetMatches(const PodPreset& p, const Json& logged) {
  int compared = 0;
  const Json hp = mlperfHyperparameters(p);  // a named object: items() does not own it
  for (const auto& [k, v] : hp.items()) {
    if (k == "opt_lamb_epsilon" || (k == "opt_name" && !logged.contains(k))) continue;
    ASSERT_TRUE(logged.contains(k)) << p.name() << ": " << k << " not logged by Graphcore";
    EXPECT_EQ(logged[k], v) << p.name() << ": " << k;
    ++compared;
  }
  EXPECT_GE(compared, 10);
}

TEST(PodPresets, PublishedPresetsMatchGraphcoresLoggedHyperparameters) {
  const Json runs = readJson(kHparamsFixture).at("runs");
  for (int pod : {16, 64, 128, 256})
    expectPresetMatches(findPreset(Benchmark::kResNet50, pod, Scale::kFull),
                        runs.at("resnet/" + std::to_string(pod)));
  for (int pod : {16, 64, 128})
    expectPresetMatches(findPreset(Benchmark::kBertLarge, pod, Scale::kFull),
                        runs.at("bert/" + std::to_string(pod)));
}

// The committed fixture is what the generator makes of the raw logs, where they are present.
TEST(PodPresets, HyperparameterFixtureMatchesTheRawGraphcoreLogs) {
  const fs::path results = fs::path(IPU_SHARED_DIR) / "data/mlperf_training_v1.1/Graphcore/results";
  if (!fs::exists(results))
    GTEST_SKIP() << "raw logs not present (" << results << "); the fixture is checked without them";
  const fs::path out = fs::temp_directory_path() / "ipu_graphcore_hparams_regenerated.json";
  const std::string cmd = "/usr/bin/python3 " + std::string(IPU_SOURCE_DIR) +
                          "/tests/fixtures/mlperf_v1.1/make_graphcore_hparams.py '" +
                          results.string() + "' > '" + out.string() + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  EXPECT_EQ(readJson(out), readJson(kHparamsFixture))
      << "regenerate tests/fixtures/mlperf_v1.1/graphcore_hparams.json with its script";
  fs::remove(out);
}

TEST(PodPresets, MiniScaleIsSmallSgd) {
  const PodPreset& p = findPreset("resnet50", 1, "mini");
  EXPECT_EQ(p.replicas, 1);
  EXPECT_EQ(p.optimizer, "sgd");
  EXPECT_EQ(p.dataset, "fashion_mnist");
  EXPECT_EQ(p.precision, "FP32");
  EXPECT_LE(p.global_batch, 64);
  EXPECT_EQ(p.hyperparameters["sgd_opt_end_learning_rate"], 0.0001);
}

TEST(PodPresets, UnknownPodSizeErrorListsValidSizes) {
  try {
    findPreset(Benchmark::kResNet50, 8, Scale::kFull);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("valid pod sizes are 1, 4, 16, 64, 128, 256"),
              std::string::npos)
        << e.what();
  }
  try {
    findPreset(Benchmark::kBertLarge, 1, Scale::kFull);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("valid pod sizes are 4, 16, 64, 128, 256"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(findPreset("resnet18", 16, "full"), std::invalid_argument);
  EXPECT_THROW(podTopology(32), std::invalid_argument);
}

TEST(PodTopology, LinksAndHostsPerSize) {
  EXPECT_EQ(podTopology(1).ipu_links, IpuLinkTopology::kNone);
  EXPECT_EQ(podTopology(16).m2000s, 4);
  EXPECT_FALSE(podTopology(16).gw_links);
  const PodTopology p64 = podTopology(64);
  EXPECT_EQ(p64.m2000s, 16);
  EXPECT_EQ(p64.ipu_links, IpuLinkTopology::kTorus2D);
  EXPECT_EQ(p64.hosts_max, 4);
  const PodTopology p128 = podTopology(128);
  EXPECT_TRUE(p128.gw_links);
  EXPECT_EQ(p128.pod64s, 2);
  EXPECT_EQ(podTopology(256).hosts_min, 16);
  EXPECT_NE(podTopology(256).description().find("GW-Links"), std::string::npos);
  EXPECT_EQ(podTopology(256).name, "IPU-POD256");
}

TEST(PodPresets, ApplyConfigOverridesAndRecomputesTheGlobalBatch) {
  const PodPreset& base = findPreset(Benchmark::kResNet50, 16, Scale::kFull);
  const PodPreset p = applyConfig(
      base, Json{{"gradient_accumulation_steps", 12}, {"lars_opt_base_learning_rate", 11.0}},
      "my.json");
  EXPECT_EQ(p.global_batch, 16 * 12 * 20);
  EXPECT_EQ(p.hyperparameters["lars_opt_base_learning_rate"], 11.0);
  EXPECT_FALSE(p.published);
  EXPECT_NE(p.source.find("my.json"), std::string::npos);
  try {
    applyConfig(base, Json{{"lars_opt_base_learnig_rate", 11.0}}, "my.json");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.source(), "my.json");
    EXPECT_EQ(e.key(), "lars_opt_base_learnig_rate");
  }
  EXPECT_THROW(applyConfig(base, Json{{"micro_batch_size", 0}}, "my.json"), ConfigError);
}

}  // namespace
}  // namespace ipu::harness
