#include "harness/config.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <sstream>

namespace ipu::harness {
namespace {

std::string typeName(const Json& j) {
  if (j.is_number_integer()) return "integer";
  if (j.is_number()) return "number";
  return j.type_name();
}

std::string validKeys(const Json& preset) {
  std::string out;
  for (const auto& [k, v] : preset.items()) {
    if (!out.empty()) out += ", ";
    out += k;
  }
  return out;
}

void mergeInto(Json& target, const Json& user, const std::string& source,
               const std::string& prefix) {
  for (const auto& [key, value] : user.items()) {
    const std::string path = prefix.empty() ? key : prefix + "." + key;
    auto it = target.find(key);
    if (it == target.end()) {
      throw ConfigError(
          fmt::format("{}: unknown key '{}'; valid keys{}: {}", source, path,
                      prefix.empty() ? "" : " in '" + prefix + "'", validKeys(target)),
          source, path);
    }
    Json& slot = *it;
    const auto mismatch = [&] {
      return ConfigError(
          fmt::format("{}: key '{}' must be {} (like the preset's {}), got {} {}", source, path,
                      typeName(slot), slot.dump(), typeName(value), value.dump()),
          source, path);
    };
    if (slot.is_object()) {
      if (!value.is_object()) throw mismatch();
      mergeInto(slot, value, source, path);
    } else if (slot.is_number_integer()) {
      // 3.0 is accepted where an integer is expected; 3.5 is not, nor 1e300 (no int64 holds it).
      const double d = value.is_number_float() ? value.get<double>() : 0.0;
      if (value.is_number_integer()) {
        slot = value;
      } else if (value.is_number_float() && std::floor(d) == d && d >= -0x1p63 && d < 0x1p63) {
        slot = static_cast<std::int64_t>(d);
      } else {
        throw mismatch();
      }
    } else if (slot.is_number()) {
      if (!value.is_number()) throw mismatch();
      slot = value.get<double>();
    } else if (slot.is_null() || slot.type() == value.type()) {
      slot = value;
    } else {
      throw mismatch();
    }
  }
}

}  // namespace

Json mergeConfig(const Json& preset, const Json& user, std::string_view sourceName) {
  const std::string source(sourceName);
  if (!preset.is_object()) {
    throw std::invalid_argument("mergeConfig: the preset must be a JSON object");
  }
  if (!user.is_object()) {
    throw ConfigError(fmt::format("{}: the configuration must be a JSON object of key: value "
                                  "pairs, got {}; valid keys: {}",
                                  source, typeName(user), validKeys(preset)),
                      source, "");
  }
  Json merged = preset;
  mergeInto(merged, user, source, "");
  return merged;
}

Json loadJsonFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) {
    throw ConfigError(fmt::format("{}: cannot open the file", path.string()), path.string(), "");
  }
  std::stringstream text;
  text << in.rdbuf();
  try {
    return Json::parse(text.str());
  } catch (const Json::exception& e) {  // parse_error, and out_of_range for 1e400 and the like
    throw ConfigError(fmt::format("{}: not valid JSON ({})", path.string(), e.what()),
                      path.string(), "");
  }
}

}  // namespace ipu::harness
