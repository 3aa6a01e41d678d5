// EfficientNet-B4's rules of our own (harness/rules/efficientnet_b4.json) as the harness reads and
// enforces them before a run: the reference recipe passes closed, every tuned fixed value and
// G16 in closed are refused naming the key, bad rule files name the file. The checker's side
// (the YAML, on logs) is tests/scripts/test_efficientnet_rules.py and
// efficientnet_compliance_test.cpp.
#include "harness/rules/efficientnet_rules.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace ipu::harness {
namespace {

namespace fs = std::filesystem;

}  // namespace

// The reference recipe at Graphcore's G1 POD16 batch (3 x 64 x 4), k = 0.016 per 256 images.
Json efficientNetClosedReference() {
  return Json{{"global_batch_size", 768},
              {"gradient_accumulation_steps", 64},
              {"benchmark_scale", "full"},
              {"opt_name", "rmsprop"},
              {"opt_base_learning_rate", 0.016 * 768 / 256},
              {"opt_learning_rate_warmup_epochs", 5},
              {"opt_rmsprop_decay", 0.9},
              {"opt_rmsprop_momentum", 0.9},
              {"opt_rmsprop_epsilon", 0.001},
              {"opt_learning_rate_decay_factor", 0.97},
              {"opt_learning_rate_decay_epochs", 2.4},
              {"label_smoothing", 0.1},
              {"opt_weight_decay", 1e-05},
              {"opt_weight_decay_skip_norm", true},
              {"model_eval_ema_factor", 0.9999},
              {"dropout_rate", 0.4},
              {"stochastic_depth_rate", 0.2},
              {"model_variant", "b4"},
              {"norm_type", "batch_norm"},
              {"model_bn_span", 3},
              {"model_bn_momentum", 0.9},
              {"model_classifier_init_fan_out", 1000}};
}

namespace {

Json closedReference() {
  return efficientNetClosedReference();
}

const EfficientNetRules& rules() {
  return builtinEfficientNetRules();
}

std::vector<Violation> closed(const Json& hp) {
  return validateEfficientNet(rules(), Division::kClosed, hp);
}

TEST(EfficientNetRules, BuiltinEqualsTheFileAndHoldsTheDefinition) {
  const EfficientNetRules file =
      loadEfficientNetRules(fs::path(IPU_SOURCE_DIR) / "harness/rules/efficientnet_b4.json");
  EXPECT_EQ(file.closed_fixed, rules().closed_fixed);
  EXPECT_EQ(file.closed_tunable, rules().closed_tunable);
  EXPECT_EQ(file.target, rules().target);
  EXPECT_EQ(rules().target, 0.82);
  EXPECT_EQ(rules().eval_period_epochs, 4);
  EXPECT_EQ(rules().eval_offsets, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(rules().closed_fixed.size(), 17u);
  EXPECT_EQ(file.mini_closed_fixed, rules().mini_closed_fixed);
  EXPECT_EQ(file.mini_target, rules().mini_target);
  EXPECT_EQ(rules().open_model_variants, (std::vector<std::string>{"b4", "g16"}));
}

TEST(EfficientNetRules, ReferenceRecipePassesClosedAndOpen) {
  EXPECT_TRUE(closed(closedReference()).empty()) << formatViolations(closed(closedReference()));
  EXPECT_TRUE(validateEfficientNet(rules(), Division::kOpen, closedReference()).empty());
}

TEST(EfficientNetRules, EachTunedFixedValueIsRefusedNamingTheKey) {
  for (const auto& [key, value] : rules().closed_fixed.items()) {
    Json hp = closedReference();
    hp[key] = value.is_boolean()  ? Json(!value.get<bool>())
              : value.is_number() ? Json(value.get<double>() * 1.1)
                                  : Json(value.get<std::string>() + "_x");
    const auto v = closed(hp);
    ASSERT_EQ(v.size(), 1u) << key << ":\n" << formatViolations(v);
    EXPECT_EQ(v[0].key, key);
    EXPECT_NE(v[0].message().find("fixed in the closed division"), std::string::npos);
    hp.erase(key);
    ASSERT_EQ(closed(hp).size(), 1u) << key;
    EXPECT_EQ(closed(hp)[0].value, "<missing>");
  }
  // true is not 1, 0.9 is not "0.9".
  Json hp = closedReference();
  hp["opt_weight_decay_skip_norm"] = 1;
  hp["opt_rmsprop_decay"] = "0.9";
  EXPECT_EQ(closed(hp).size(), 2u) << formatViolations(closed(hp));
}

TEST(EfficientNetRules, MiniScaleFixesTheMiniRecipe) {
  Json mini = closedReference();
  for (const auto& [key, value] : rules().mini_closed_fixed.items()) mini[key] = value;
  EXPECT_EQ(mini["benchmark_scale"], "mini");
  EXPECT_EQ(mini["dropout_rate"], 0.0);
  EXPECT_TRUE(closed(mini).empty()) << formatViolations(closed(mini));
  // The full recipe's regularisation in a mini log, and the mini values in a full one.
  Json regularised = mini;
  regularised["dropout_rate"] = 0.4;
  const auto v = closed(regularised);
  ASSERT_EQ(v.size(), 1u) << formatViolations(v);
  EXPECT_EQ(v[0].key, "dropout_rate");
  EXPECT_EQ(v[0].allowed, "0.0 (fixed in the closed division)");
  Json full = mini;
  full["benchmark_scale"] = "full";
  EXPECT_EQ(closed(full).size(), rules().mini_closed_fixed.size() - 1)
      << formatViolations(closed(full));
  EXPECT_GT(rules().mini_target, 0.1);  // above chance (10 classes)
  EXPECT_LT(rules().mini_target, rules().target);
}

TEST(EfficientNetRules, G16InClosedIsRefusedPointingToOpen) {
  Json hp = closedReference();
  hp["model_variant"] = "g16";
  const auto v = closed(hp);
  ASSERT_EQ(v.size(), 1u) << formatViolations(v);
  EXPECT_EQ(v[0].message(),
            "EfficientNet-B4 closed rules (harness/rules/efficientnet_b4.json (built in); "
            "docs/rules/efficientnet_b4.md): model_variant must be \"b4\" (fixed in the closed "
            "division); other variants such as G16 are open-division entries (--division open) "
            "(got \"g16\")");
  hp["norm_type"] = "group_norm";
  EXPECT_TRUE(validateEfficientNet(rules(), Division::kOpen, hp).empty());
}

TEST(EfficientNetRules, TunableValuesMustBeLegal) {
  Json hp = closedReference();
  hp["global_batch_size"] = 0;
  hp["opt_learning_rate_warmup_epochs"] = 2.5;
  hp["model_bn_span"] = "3";
  hp.erase("gradient_accumulation_steps");
  const std::string text = formatViolations(closed(hp));
  EXPECT_NE(text.find("global_batch_size must be an integer > 0 (got 0)"), std::string::npos)
      << text;
  EXPECT_NE(text.find("opt_learning_rate_warmup_epochs must be an integer >= 0 (got 2.5)"),
            std::string::npos);
  EXPECT_NE(text.find("model_bn_span must be an integer > 0 (got \"3\")"), std::string::npos);
  EXPECT_NE(text.find("gradient_accumulation_steps must be present"), std::string::npos);
}

TEST(EfficientNetRules, LearningRateFollowsTheScalingRule) {
  Json hp = closedReference();
  hp["global_batch_size"] = 4096;
  hp["opt_base_learning_rate"] = 0.256;  // the reference: 0.016 x 4096 / 256
  EXPECT_TRUE(closed(hp).empty()) << formatViolations(closed(hp));
  hp["opt_base_learning_rate"] = 0.25;  // k = 0.015625 (Graphcore's 2^-14 per image)
  const auto v = closed(hp);
  ASSERT_EQ(v.size(), 1u) << formatViolations(v);
  EXPECT_EQ(v[0].key, "opt_base_learning_rate");
  EXPECT_NE(v[0].allowed.find("k = 0.015625 here; the nearest allowed is 0.256"), std::string::npos)
      << v[0].allowed;
}

TEST(EfficientNetRules, OpenNeedsTheVariantAndKnownNames) {
  const auto missing =
      validateEfficientNet(rules(), Division::kOpen, Json{{"norm_type", "group_norm"}});
  ASSERT_EQ(missing.size(), 1u);
  EXPECT_EQ(missing[0].key, "model_variant");
  const auto unknown = validateEfficientNet(
      rules(), Division::kOpen, Json{{"model_variant", "b7"}, {"norm_type", "group_norm"}});
  ASSERT_EQ(unknown.size(), 1u);
  EXPECT_EQ(unknown[0].allowed, "one of \"b4\", \"g16\"");
}

TEST(EfficientNetRules, ClosedEvaluatesEvery4EpochsWithAnOffsetOf0To3) {
  for (int offset = 0; offset < 4; ++offset) {
    EXPECT_TRUE(validateEfficientNetEvaluation(rules(), Division::kClosed, 4, offset).empty());
  }
  const auto v = validateEfficientNetEvaluation(rules(), Division::kClosed, 2, 4);
  ASSERT_EQ(v.size(), 2u) << formatViolations(v);
  EXPECT_EQ(v[0].key, "eval_period");
  EXPECT_EQ(v[1].key, "eval_offset");
  EXPECT_EQ(v[1].allowed, "one of 0, 1, 2, 3");
  EXPECT_TRUE(validateEfficientNetEvaluation(rules(), Division::kOpen, 1, 0).empty());
}

class EfficientNetRulesFile : public ::testing::Test {
 protected:
  fs::path write(const std::string& text) {
    const fs::path p = fs::temp_directory_path() /
                       ("efficientnet_rules_" + std::to_string(::getpid()) + "_" +
                        ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".json");
    std::ofstream(p) << text;
    paths_.push_back(p);
    return p;
  }
  void TearDown() override {
    for (const auto& p : paths_) fs::remove(p);
  }
  std::vector<fs::path> paths_;
};

std::string errorOf(const fs::path& p) {
  try {
    loadEfficientNetRules(p);
  } catch (const RulesError& e) {
    return e.what();
  }
  return "<no error>";
}

TEST_F(EfficientNetRulesFile, SyntaxErrorNamesFileLineAndColumn) {
  const fs::path p = write("{\n  \"quality\": {\"target\": 0.82,}\n}\n");
  const std::string e = errorOf(p);
  EXPECT_EQ(e.rfind(p.string() + ":2:", 0), 0u) << e;
  EXPECT_NE(e.find("not valid JSON"), std::string::npos) << e;
}

TEST_F(EfficientNetRulesFile, MissingOrWrongMemberIsNamed) {
  std::ifstream in(fs::path(IPU_SOURCE_DIR) / "harness/rules/efficientnet_b4.json");
  Json good = Json::parse(in);
  Json noTarget = good;
  noTarget["quality"].erase("target");
  const fs::path noTargetFile = write(noTarget.dump());
  EXPECT_EQ(errorOf(noTargetFile),
            noTargetFile.string() + ": \"quality.target\" is missing (expected a number)");
  Json badOffsets = good;
  badOffsets["evaluation"]["offsets"] = Json::array({0, 4});
  EXPECT_NE(errorOf(write(badOffsets.dump()))
                .find("\"evaluation.offsets\" must hold integers in 0..3 (got 4)"),
            std::string::npos);
  const std::string missing = errorOf(fs::temp_directory_path() / "no_such_rules.json");
  EXPECT_NE(missing.find("no_such_rules.json: cannot read"), std::string::npos) << missing;
}

}  // namespace
}  // namespace ipu::harness
