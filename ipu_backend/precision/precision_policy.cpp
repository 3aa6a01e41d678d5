#include "ipu_backend/precision/precision_policy.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>
#include <stdexcept>

namespace ipu::precision {

namespace {

constexpr const char* kLossForms = "none | static:<S> | dynamic[:<initial S>[:<growth interval>]]";
constexpr const char* kPolicyForms =
    "<preset>[,loss=<spec>][,sr=on|off] with preset one of fp32, fp16, bf16, 16.16, 16.32";

[[noreturn]] void badLoss(std::string_view spec, const std::string& why) {
  throw std::invalid_argument("invalid loss scaling '" + std::string(spec) + "': " + why +
                              "; valid forms: " + kLossForms);
}

[[noreturn]] void badPolicy(std::string_view s, const std::string& why) {
  throw std::invalid_argument("invalid precision policy '" + std::string(s) + "': " + why +
                              "; valid forms: " + kPolicyForms);
}

bool parseFloat(std::string_view t, float& v) {
  const char* end = t.data() + t.size();
  auto [p, ec] = std::from_chars(t.data(), end, v);
  return ec == std::errc() && p == end;
}

bool parseInt(std::string_view t, i64& v) {
  const char* end = t.data() + t.size();
  auto [p, ec] = std::from_chars(t.data(), end, v);
  return ec == std::errc() && p == end;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  for (;;) {
    const auto k = s.find(sep);
    parts.push_back(s.substr(0, k));
    if (k == std::string_view::npos) return parts;
    s.remove_prefix(k + 1);
  }
}

// Shortest decimal that reads back to the same float.
std::string formatFloat(float v) {
  char buf[32];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, p);
}

PrecisionPolicy makePreset(std::string_view name) {
  PrecisionPolicy p;
  p.preset = std::string(name);
  if (name == "fp32") return p;
  if (name == "fp16") {
    p.compute = DType::F16;
    p.lossScaling = LossScalingConfig::dynamic();
  } else if (name == "bf16") {
    p.compute = DType::BF16;
    p.nativeOnIpu = false;
  } else if (name == "16.16") {
    p.compute = p.masterWeights = p.partials = DType::F16;
    p.stochasticRounding = true;
    p.lossScaling = LossScalingConfig::fixed(128.0f);
  } else if (name == "16.32") {
    p.compute = DType::F16;
    p.stochasticRounding = true;
    p.lossScaling = LossScalingConfig::fixed(128.0f);
  }
  return p;
}

}  // namespace

const std::vector<std::string_view>& precisionPresets() {
  static const std::vector<std::string_view> names = {"fp32", "fp16", "bf16", "16.16", "16.32"};
  return names;
}

LossScalingConfig parseLossScaling(std::string_view spec) {
  const auto parts = split(spec, ':');
  const std::string_view kind = parts[0];
  auto scaleAt = [&](size_t i) {
    float v = 0;
    if (!parseFloat(parts[i], v) || !std::isfinite(v) || v <= 0)
      badLoss(spec, "'" + std::string(parts[i]) + "' is not a positive finite scale");
    return v;
  };
  if (kind == "none") {
    if (parts.size() != 1) badLoss(spec, "'none' takes no value");
    return LossScalingConfig::none();
  }
  if (kind == "static") {
    if (parts.size() != 2) badLoss(spec, "'static' needs exactly one scale, as in static:128");
    return LossScalingConfig::fixed(scaleAt(1));
  }
  if (kind == "dynamic") {
    if (parts.size() > 3) badLoss(spec, "too many ':' fields");
    LossScalingConfig c = LossScalingConfig::dynamic();
    if (parts.size() >= 2) c.scale = scaleAt(1);
    if (parts.size() == 3) {
      i64 n = 0;
      if (!parseInt(parts[2], n) || n < 1)
        badLoss(spec, "'" + std::string(parts[2]) + "' is not a growth interval >= 1");
      c.growthInterval = n;
    }
    if (c.scale < c.minScale || c.scale > c.maxScale)
      badLoss(spec, "initial scale must be within [" + formatFloat(c.minScale) + ", " +
                        formatFloat(c.maxScale) + "]");
    return c;
  }
  badLoss(spec, "unknown kind '" + std::string(kind) + "'");
}

std::string toString(const LossScalingConfig& c) {
  switch (c.mode) {
    case LossScalingMode::None:
      return "none";
    case LossScalingMode::Static:
      return "static:" + formatFloat(c.scale);
    case LossScalingMode::Dynamic:
      return "dynamic:" + formatFloat(c.scale) + ":" + std::to_string(c.growthInterval);
  }
  return "?";
}

PrecisionPolicy PrecisionPolicy::parse(std::string_view s) {
  const auto parts = split(s, ',');
  const auto& names = precisionPresets();
  if (std::find(names.begin(), names.end(), parts[0]) == names.end())
    badPolicy(s, "unknown preset '" + std::string(parts[0]) + "'");
  PrecisionPolicy p = makePreset(parts[0]);
  bool seenLoss = false, seenSr = false;
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string_view opt = parts[i];
    if (opt.starts_with("loss=")) {
      if (seenLoss) badPolicy(s, "'loss=' given twice");
      seenLoss = true;
      try {
        p.lossScaling = parseLossScaling(opt.substr(5));
      } catch (const std::invalid_argument& e) {
        badPolicy(s, e.what());
      }
    } else if (opt.starts_with("sr=")) {
      if (seenSr) badPolicy(s, "'sr=' given twice");
      seenSr = true;
      const std::string_view v = opt.substr(3);
      if (v != "on" && v != "off")
        badPolicy(s, "sr must be on or off, got '" + std::string(v) + "'");
      p.stochasticRounding = v == "on";
    } else {
      badPolicy(s, "unknown option '" + std::string(opt) + "'");
    }
  }
  if (p.compute == DType::F32 && p.stochasticRounding)
    badPolicy(s, "stochastic rounding needs a 16-bit preset");
  return p;
}

std::string PrecisionPolicy::toString() const {
  return preset + ",loss=" + precision::toString(lossScaling) +
         ",sr=" + (stochasticRounding ? "on" : "off");
}

std::string PrecisionPolicy::describe() const {
  std::ostringstream os;
  os << "precision " << preset << (nativeOnIpu ? "" : " (extension: not native on the IPU)")
     << ": compute " << dtypeName(compute) << ", master weights " << dtypeName(masterWeights)
     << ", partials " << dtypeName(partials) << ", rounding "
     << (stochasticRounding ? "stochastic" : "nearest-even") << ", loss scaling "
     << precision::toString(lossScaling)
     << (isMixed() ? ", numerically fragile ops in f32 (per op kind)" : ", all ops f32");
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const PrecisionPolicy& p) {
  return os << p.toString();
}

}  // namespace ipu::precision
