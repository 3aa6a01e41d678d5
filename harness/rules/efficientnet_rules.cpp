#include "harness/rules/efficientnet_rules.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

namespace ipu::harness {

// Generated at build time from harness/rules/efficientnet_b4.json (embed_json.cmake).
extern const char* const kEfficientNetRulesJson;

namespace {

constexpr char kBuiltinSource[] = "harness/rules/efficientnet_b4.json (built in)";

// The member at the dotted `path`, of the JSON type `want` names, or a RulesError.
const Json& member(const Json& root, const std::string& source, const std::string& path,
                   Json::value_t type, const char* want) {
  const Json* at = &root;
  std::string walked;
  std::istringstream parts(path);
  for (std::string part; std::getline(parts, part, '.');) {
    walked += (walked.empty() ? "" : ".") + part;
    if (!at->is_object() || !at->contains(part)) {
      throw RulesError(fmt::format("{}: \"{}\" is missing (expected {})", source, walked, want));
    }
    at = &(*at)[part];
  }
  const bool ok = type == Json::value_t::number_float ? at->is_number() : at->type() == type;
  if (!ok)
    throw RulesError(fmt::format("{}: \"{}\" must be {} (got {})", source, path, want, at->dump()));
  return *at;
}

std::vector<std::string> strings(const Json& root, const std::string& source,
                                 const std::string& path) {
  std::vector<std::string> out;
  for (const Json& x : member(root, source, path, Json::value_t::array, "an array of strings")) {
    if (!x.is_string()) {
      throw RulesError(
          fmt::format("{}: \"{}\" must hold strings (got {})", source, path, x.dump()));
    }
    out.push_back(x.get<std::string>());
  }
  return out;
}

// Same tolerance as the checker's is_integer().
bool isInteger(double x) {
  return std::abs(std::round(x) - x) < 1e-5;
}

bool contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

std::string quotedList(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& x : v) out += (out.empty() ? "" : ", ") + Json(x).dump();
  return out;
}

// Same type and value: JSON's true is not 1, 0.9 is not "0.9".
bool sameValue(const Json& a, const Json& b) {
  if (a.is_number() && b.is_number() && !a.is_boolean() && !b.is_boolean()) {
    return a.get<double>() == b.get<double>();
  }
  return a == b;
}

}  // namespace

EfficientNetRules parseEfficientNetRules(std::string_view text, const std::string& source) {
  Json root;
  try {
    root = Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error& e) {
    // e.byte: 1-based offset of the character where parsing failed.
    int line = 1, column = 1;
    for (std::size_t i = 0; i + 1 < e.byte && i < text.size(); ++i) {
      if (text[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    throw RulesError(fmt::format("{}:{}:{}: not valid JSON ({})", source, line, column, e.what()));
  }
  using T = Json::value_t;
  EfficientNetRules r;
  r.source = source;
  r.target = member(root, source, "quality.target", T::number_float, "a number").get<double>();
  if (!(r.target > 0 && r.target < 1)) {
    throw RulesError(fmt::format(
        "{}: \"quality.target\" must be a top-1 fraction in (0, 1) (got {})", source, r.target));
  }
  const Json& period =
      member(root, source, "evaluation.period_epochs", T::number_float, "a number");
  if (!period.is_number_integer() || period.get<int>() < 1) {
    throw RulesError(
        fmt::format("{}: \"evaluation.period_epochs\" must be an integer >= 1 (got {})", source,
                    period.dump()));
  }
  r.eval_period_epochs = period.get<int>();
  for (const Json& x : member(root, source, "evaluation.offsets", T::array, "an array")) {
    if (!x.is_number_integer() || x.get<int>() < 0 || x.get<int>() >= r.eval_period_epochs) {
      throw RulesError(
          fmt::format("{}: \"evaluation.offsets\" must hold integers in 0..{} (got {})", source,
                      r.eval_period_epochs - 1, x.dump()));
    }
    r.eval_offsets.push_back(x.get<int>());
  }
  r.closed_fixed = member(root, source, "closed.fixed", T::object, "an object");
  for (const auto& [key, value] :
       member(root, source, "closed.tunable", T::object, "an object").items()) {
    r.closed_tunable.push_back(key);
  }
  r.lr_per_256_multiple_of =
      member(root, source, "closed.learning_rate_per_256_multiple_of", T::number_float, "a number")
          .get<double>();
  if (!(r.lr_per_256_multiple_of > 0)) {
    throw RulesError(
        fmt::format("{}: \"closed.learning_rate_per_256_multiple_of\" must be > 0 (got {})", source,
                    r.lr_per_256_multiple_of));
  }
  r.mini_target = member(root, source, "mini.target", T::number_float, "a number").get<double>();
  if (!(r.mini_target > 0 && r.mini_target < 1)) {
    throw RulesError(fmt::format("{}: \"mini.target\" must be a top-1 fraction in (0, 1) (got {})",
                                 source, r.mini_target));
  }
  r.mini_closed_fixed = member(root, source, "mini.closed_fixed", T::object, "an object");
  for (const auto& [key, value] : r.mini_closed_fixed.items()) {
    if (!r.closed_fixed.contains(key)) {
      throw RulesError(fmt::format(
          "{}: \"mini.closed_fixed.{}\" is not a key of \"closed.fixed\" (the mini section "
          "only changes values of the full recipe)",
          source, key));
    }
  }
  r.open_model_variants = strings(root, source, "open.model_variant");
  r.open_norm_types = strings(root, source, "open.norm_type");
  r.open_required = strings(root, source, "open.required");
  return r;
}

EfficientNetRules loadEfficientNetRules(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw RulesError(
        fmt::format("{}: cannot read the EfficientNet-B4 rules (missing or "
                    "unreadable file)",
                    path.string()));
  }
  std::ostringstream text;
  text << in.rdbuf();
  return parseEfficientNetRules(text.str(), path.string());
}

const EfficientNetRules& builtinEfficientNetRules() {
  static const EfficientNetRules rules =
      parseEfficientNetRules(kEfficientNetRulesJson, kBuiltinSource);
  return rules;
}

Json closedFixedFor(const EfficientNetRules& rules, const Json& hp) {
  Json fixed = rules.closed_fixed;
  if (hp.is_object() && hp.value(keys::kBenchmarkScale, Json()) == "mini") {
    for (const auto& [key, value] : rules.mini_closed_fixed.items()) fixed[key] = value;
  }
  return fixed;
}

std::vector<Violation> validateEfficientNet(const EfficientNetRules& rules, Division division,
                                            const Json& hp) {
  const std::string rule =
      fmt::format("EfficientNet-B4 {} rules ({}; docs/rules/efficientnet_b4.md)",
                  toString(division), rules.source);
  std::vector<Violation> out;
  auto add = [&](const std::string& key, const std::string& value, const std::string& allowed) {
    out.push_back({key, value, allowed, rule});
  };
  if (!hp.is_object()) {
    add("hyperparameters", hp.dump(), "a JSON object");
    return out;
  }
  if (division == Division::kOpen) {
    for (const std::string& key : rules.open_required) {
      if (!hp.contains(key)) add(key, "<missing>", "present (logged exactly once)");
    }
    const std::pair<const char*, const std::vector<std::string>*> choices[] = {
        {"model_variant", &rules.open_model_variants}, {"norm_type", &rules.open_norm_types}};
    for (const auto& [key, allowed] : choices) {
      if (hp.contains(key) &&
          !(hp[key].is_string() && contains(*allowed, hp[key].get<std::string>()))) {
        add(key, hp[key].dump(), "one of " + quotedList(*allowed));
      }
    }
    return out;
  }

  const Json fixed = closedFixedFor(rules, hp);
  for (const auto& [key, want] : fixed.items()) {
    if (!hp.contains(key)) {
      add(key, "<missing>", want.dump() + " (fixed in the closed division)");
    } else if (!sameValue(hp[key], want)) {
      std::string allowed = want.dump() + " (fixed in the closed division)";
      if (key == "model_variant") {
        allowed += "; other variants such as G16 are open-division entries (--division open)";
      } else if (key == "norm_type") {
        allowed += "; group norm and other norms are open-division entries (--division open)";
      }
      add(key, hp[key].dump(), allowed);
    }
  }
  for (const std::string& key : rules.closed_tunable) {
    if (!hp.contains(key)) add(key, "<missing>", "present (a tunable hyperparameter, logged once)");
  }
  auto number = [&](const char* key) -> const Json* {
    if (!hp.contains(key)) return nullptr;
    const Json& v = hp[key];
    return v.is_number() && !v.is_boolean() ? &v : nullptr;
  };
  auto integerAtLeast = [&](const char* key, double lowest, const char* allowed) {
    if (!hp.contains(key)) return;
    const Json* v = number(key);
    if (v == nullptr || v->get<double>() < lowest || !isInteger(v->get<double>())) {
      add(key, hp[key].dump(), allowed);
    }
  };
  integerAtLeast("global_batch_size", 1, "an integer > 0");
  integerAtLeast("gradient_accumulation_steps", 1, "an integer > 0");
  integerAtLeast("model_bn_span", 1, "an integer > 0");
  integerAtLeast("opt_learning_rate_warmup_epochs", 0, "an integer >= 0");
  const Json* lr = number("opt_base_learning_rate");
  const Json* batch = number("global_batch_size");
  if (hp.contains("opt_base_learning_rate") && lr == nullptr) {
    add("opt_base_learning_rate", hp["opt_base_learning_rate"].dump(), "a number > 0");
  } else if (lr != nullptr && batch != nullptr && batch->get<double>() > 0) {
    const double step = rules.lr_per_256_multiple_of;
    const double k = lr->get<double>() * 256 / batch->get<double>();
    if (!(lr->get<double>() > 0) || !isInteger(k / step)) {
      const double nearest =
          std::max(1.0, std::round(k / step)) * step * batch->get<double>() / 256;
      add("opt_base_learning_rate", lr->dump(),
          fmt::format("k x global_batch_size / 256 with k a multiple of {} (k = {:.6g} here; the "
                      "nearest allowed is {:.6g})",
                      step, k, nearest));
    }
  }
  return out;
}

std::vector<Violation> validateEfficientNetEvaluation(const EfficientNetRules& rules,
                                                      Division division, int periodEpochs,
                                                      int offset) {
  std::vector<Violation> out;
  if (division == Division::kOpen) return out;
  const std::string rule = fmt::format(
      "EfficientNet-B4 closed rules ({}; docs/rules/efficientnet_b4.md, evaluation cadence)",
      rules.source);
  if (periodEpochs != rules.eval_period_epochs) {
    out.push_back({"eval_period", std::to_string(periodEpochs),
                   fmt::format("{} (evaluate every {} epochs)", rules.eval_period_epochs,
                               rules.eval_period_epochs),
                   rule});
  }
  if (std::find(rules.eval_offsets.begin(), rules.eval_offsets.end(), offset) ==
      rules.eval_offsets.end()) {
    out.push_back({"eval_offset", std::to_string(offset),
                   fmt::format("one of {}", fmt::join(rules.eval_offsets, ", ")), rule});
  }
  return out;
}

}  // namespace ipu::harness
