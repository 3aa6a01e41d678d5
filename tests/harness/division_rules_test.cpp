// Division rules (each violation cites its rule; published presets pass) and config merging.
#include "harness/division_rules.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "harness/config.h"
#include "harness/pod_presets.h"

namespace ipu::harness {
namespace {

Json resnetFull16() {
  return mlperfHyperparameters(findPreset(Benchmark::kResNet50, 16, Scale::kFull));
}

// The single violation of `key`, failing the test when there is not exactly one.
Violation only(const std::vector<Violation>& v, const std::string& key) {
  EXPECT_EQ(v.size(), 1u) << formatViolations(v);
  for (const auto& x : v) {
    if (x.key == key) return x;
  }
  ADD_FAILURE() << "no violation of " << key << ":\n" << formatViolations(v);
  return {};
}

TEST(DivisionRules, PublishedPresetsPassClosed) {
  for (const PodPreset& p : allPresets()) {
    if (p.scale != Scale::kFull || p.benchmark == Benchmark::kEfficientNetB4) continue;
    const auto v =
        validate(Division::kClosed, p.benchmark, mlperfHyperparameters(p), p.model_variant);
    EXPECT_TRUE(v.empty()) << p.name() << ":\n" << formatViolations(v);
  }
}

TEST(DivisionRules, MiniResnetHyperparametersAreClosedLegalButTheModelIsNot) {
  for (int pod : validPodSizes()) {
    const PodPreset& p = findPreset(Benchmark::kResNet50, pod, Scale::kMini);
    const auto v = validate(Division::kClosed, p.benchmark, mlperfHyperparameters(p), "resnet50");
    EXPECT_TRUE(v.empty()) << p.name() << ":\n" << formatViolations(v);
    const auto m =
        validate(Division::kClosed, p.benchmark, mlperfHyperparameters(p), p.model_variant);
    EXPECT_EQ(only(m, "model").value, "\"resnet_mini\"");
  }
}

TEST(DivisionRules, IllegalLarsEndLearningRateCitesTheRule) {
  Json hp = resnetFull16();
  hp["lars_opt_end_learning_rate"] = 0.001;
  const Violation v = only(validate(Division::kClosed, Benchmark::kResNet50, hp, "resnet50"),
                           "lars_opt_end_learning_rate");
  EXPECT_EQ(v.message().rfind("MLPerf Training rules v4.0, ResNet-50 closed: "
                              "lars_opt_end_learning_rate must be 0.0001",
                              0),
            0u)
      << v.message();
  EXPECT_NE(v.message().find("got 0.001"), std::string::npos) << v.message();
}

TEST(DivisionRules, WeightDecayMustBeAPowerOfTwoTimes1e4) {
  Json hp = resnetFull16();
  hp["lars_opt_weight_decay"] = 0.0003;
  const Violation v = only(validate(Division::kClosed, Benchmark::kResNet50, hp, "resnet50"),
                           "lars_opt_weight_decay");
  EXPECT_NE(v.allowed.find("0.0001 x 2^N"), std::string::npos);
  EXPECT_EQ(v.value, "0.0003");
  EXPECT_NE(v.rule.find("ResNet-50 closed"), std::string::npos);
  hp["lars_opt_weight_decay"] = 0.0002;
  EXPECT_TRUE(validate(Division::kClosed, Benchmark::kResNet50, hp, "resnet50").empty());
}

TEST(DivisionRules, AdamIsNotAClosedResnetOptimizer) {
  Json hp = resnetFull16();
  hp["opt_name"] = "adam";
  const Violation v =
      only(validate(Division::kClosed, Benchmark::kResNet50, hp, "resnet50"), "opt_name");
  EXPECT_NE(v.message().find("opt_name must be \"lars\" or \"sgd\" (got \"adam\")"),
            std::string::npos)
      << v.message();
  EXPECT_TRUE(validate(Division::kOpen, Benchmark::kResNet50, hp, "resnet50").empty());
}

TEST(DivisionRules, SgdRules) {
  Json hp = mlperfHyperparameters(findPreset(Benchmark::kResNet50, 1, Scale::kMini));
  hp["sgd_opt_base_learning_rate"] = 0.0125;
  EXPECT_EQ(only(validate(Division::kClosed, Benchmark::kResNet50, hp, "resnet50"),
                 "sgd_opt_base_learning_rate")
                .allowed.find("multiple of 0.001"),
            2u);
  hp["sgd_opt_base_learning_rate"] = 0.013;
  hp.erase("model_bn_span");
  const Violation v =
      only(validate(Division::kClosed, Benchmark::kResNet50, hp, "resnet50"), "model_bn_span");
  EXPECT_EQ(v.value, "<missing>");
  EXPECT_NE(v.rule.find("closed_resnet_sgd.yaml"), std::string::npos);
}

TEST(DivisionRules, EfficientNetFollowsOurRules) {
  // Every EfficientNet preset logs what our closed rules require; G16 is open-only.
  for (const PodPreset& p : allPresets()) {
    if (p.benchmark != Benchmark::kEfficientNetB4) continue;
    SCOPED_TRACE(p.name());
    const Json hp = mlperfHyperparameters(p);
    EXPECT_TRUE(validate(Division::kClosed, p.benchmark, hp, p.model_variant).empty())
        << formatViolations(validate(Division::kClosed, p.benchmark, hp, p.model_variant));
    EXPECT_TRUE(validate(Division::kOpen, p.benchmark, hp, p.model_variant).empty());
  }
  Json hp = mlperfHyperparameters(findPreset(Benchmark::kEfficientNetB4, 16, Scale::kFull));
  hp["model_variant"] = "g16";
  const Violation v =
      only(validate(Division::kClosed, Benchmark::kEfficientNetB4, hp, ""), "model_variant");
  EXPECT_NE(v.message().find("EfficientNet-B4 closed rules"), std::string::npos) << v.message();
  EXPECT_TRUE(validate(Division::kOpen, Benchmark::kEfficientNetB4, hp, "").empty());
  hp.erase("norm_type");  // open must still say which model ran
  EXPECT_EQ(only(validate(Division::kOpen, Benchmark::kEfficientNetB4, hp, ""), "norm_type").value,
            "<missing>");
}

TEST(DivisionRules, BertClosedNeedsLambAndTheRequiredKeys) {
  Json hp = mlperfHyperparameters(findPreset(Benchmark::kBertLarge, 16, Scale::kFull));
  hp["opt_name"] = "adam";
  EXPECT_NE(only(validate(Division::kClosed, Benchmark::kBertLarge, hp, "bert_large"), "opt_name")
                .message()
                .find("MLPerf Training rules v5.0, BERT closed: opt_name must be \"lamb\""),
            std::string::npos);
  hp["opt_name"] = "lamb";
  hp.erase("opt_lamb_beta_2");
  EXPECT_NE(
      only(validate(Division::kClosed, Benchmark::kBertLarge, hp, "bert_large"), "opt_lamb_beta_2")
          .rule.find("closed_bert.yaml"),
      std::string::npos);
  Json mini = mlperfHyperparameters(findPreset(Benchmark::kBertLarge, 1, Scale::kMini));
  const auto v = validate(Division::kClosed, Benchmark::kBertLarge, mini, "bert_mini");
  EXPECT_EQ(v.size(), 2u) << formatViolations(v);  // the model and sequence length 128
  // At mini scale the reference code at its mini sequence length is closed; the fixed keys are.
  EXPECT_TRUE(
      validate(Division::kClosed, Benchmark::kBertLarge, mini, "bert_large", Scale::kMini).empty());
  mini["opt_lamb_learning_rate_decay_poly_power"] = 2.0;
  mini["max_sequence_length"] = 256;
  const auto fixed =
      validate(Division::kClosed, Benchmark::kBertLarge, mini, "bert_large", Scale::kMini);
  ASSERT_EQ(fixed.size(), 2u) << formatViolations(fixed);
  EXPECT_NE(fixed[0].message().find("opt_lamb_learning_rate_decay_poly_power must be 1.0"),
            std::string::npos)
      << fixed[0].message();
  EXPECT_NE(fixed[1].message().find("max_sequence_length must be 128"), std::string::npos)
      << fixed[1].message();
  EXPECT_TRUE(
      validate(Division::kOpen, Benchmark::kBertLarge, mini, "bert_large", Scale::kMini).empty());
}

TEST(ConfigMerge, UnknownKeyNamesTheFileAndTheKeyAndListsValidKeys) {
  const Json preset = {{"micro_batch_size", 20}, {"precision", "FP16.16"}};
  try {
    mergeConfig(preset, Json{{"micro_bacth_size", 8}}, "runs/my_config.json");
    FAIL();
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.source(), "runs/my_config.json");
    EXPECT_EQ(e.key(), "micro_bacth_size");
    EXPECT_NE(what.find("runs/my_config.json: unknown key 'micro_bacth_size'"), std::string::npos)
        << what;
    EXPECT_NE(what.find("valid keys: micro_batch_size, precision"), std::string::npos) << what;
  }
}

TEST(ConfigMerge, TypesAreChecked) {
  const Json preset = {{"n", 20}, {"lr", 0.1}, {"name", "x"}, {"ls", {{"mode", "static"}}}};
  const Json m =
      mergeConfig(preset, Json{{"n", 8.0}, {"lr", 1}, {"ls", {{"mode", "dynamic"}}}}, "c.json");
  EXPECT_TRUE(m["n"].is_number_integer());
  EXPECT_EQ(m["n"], 8);
  EXPECT_EQ(m["lr"], 1.0);
  EXPECT_EQ(m["ls"]["mode"], "dynamic");
  EXPECT_EQ(m["name"], "x");
  EXPECT_THROW(mergeConfig(preset, Json{{"n", 8.5}}, "c.json"), ConfigError);
  EXPECT_THROW(mergeConfig(preset, Json{{"name", 3}}, "c.json"), ConfigError);
  try {
    mergeConfig(preset, Json{{"ls", {{"scale", 2}}}}, "c.json");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "ls.scale");
  }
  EXPECT_THROW(mergeConfig(preset, Json::array({1}), "c.json"), ConfigError);
}

TEST(ConfigMerge, LoadJsonFileNamesTheFile) {
  const auto path = std::filesystem::temp_directory_path() / "harness_bad_config.json";
  std::ofstream(path) << "{\"a\": 1,";
  try {
    loadJsonFile(path);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos);
  }
  std::filesystem::remove(path);
  EXPECT_THROW(loadJsonFile(path), ConfigError);
}

}  // namespace
}  // namespace ipu::harness
