// User configuration files (--config FILE): JSON objects whose keys override a preset's.
// Unknown keys are rejected (a typo must not silently fall back to the preset's value), and
// every error names the file and the key.
#pragma once

#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>

#include "harness/mllog.h"  // Json

namespace ipu::harness {

class ConfigError : public std::runtime_error {
 public:
  ConfigError(const std::string& message, std::string source, std::string key)
      : std::runtime_error(message), source_(std::move(source)), key_(std::move(key)) {}
  const std::string& source() const { return source_; }  // file name (or "<cli>" ...)
  const std::string& key() const { return key_; }        // dotted path; empty for the file

 private:
  std::string source_;
  std::string key_;
};

// `preset` with every key of `user` replaced by the user's value. Rules: `user` is an object;
// each of its keys exists in `preset` (else ConfigError listing the valid keys); the type
// matches (number for number, an integer where the preset has an integer, string for string,
// bool for bool; objects merge recursively, arrays are replaced whole). `sourceName` names the
// file in messages.
Json mergeConfig(const Json& preset, const Json& user, std::string_view sourceName);

// Parses a JSON file; ConfigError naming the file (and the parser's position) on failure.
Json loadJsonFile(const std::filesystem::path& path);

}  // namespace ipu::harness
