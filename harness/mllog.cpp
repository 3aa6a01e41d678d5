#include "harness/mllog.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ostream>
#include <stdexcept>

namespace ipu::harness {
namespace {

// The repository root, derived from this file's own path (".../harness/mllog.cpp").
std::string_view repositoryRoot() {
  static const std::string root = [] {
    std::string self = std::source_location::current().file_name();
    constexpr std::string_view kSuffix = "harness/mllog.cpp";
    if (self.size() >= kSuffix.size() &&
        self.compare(self.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0) {
      return self.substr(0, self.size() - kSuffix.size());
    }
    return std::string();
  }();
  return root;
}

bool startsWith(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

std::int64_t systemNowMs() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

// Keys logged once per run but not caught by the prefixes below.
constexpr std::string_view kOnceKeys[] = {
    keys::kSubmissionBenchmark, keys::kSubmissionDivision,
    keys::kSubmissionOrg,       keys::kSubmissionPlatform,
    keys::kSubmissionStatus,    keys::kSeed,
    keys::kGlobalBatchSize,     keys::kGradientAccumulationSteps,
    keys::kTrainSamples,        keys::kEvalSamples,
    keys::kModelBnSpan,         keys::kMaxSequenceLength,
    keys::kNumWarmupSteps,      keys::kStartWarmupStep,
    keys::kLarsEpsilon,         keys::kLabelSmoothing,
};

// Keys the checker requires EXACTLY_ONE of that are not hyperparameters.
bool isExactlyOnceInterval(std::string_view key) {
  return key == keys::kInitStop || key == keys::kRunStart || key == keys::kRunStop;
}

std::string siteString(const std::source_location& where) {
  return fmt::format("{}:{}", MlLogger::callSiteFile(where), where.line());
}

}  // namespace

const char* toString(EventType type) {
  switch (type) {
    case EventType::kPointInTime:
      return "POINT_IN_TIME";
    case EventType::kIntervalStart:
      return "INTERVAL_START";
    case EventType::kIntervalEnd:
      return "INTERVAL_END";
  }
  return "?";
}

bool isOnceKey(std::string_view key) {
  for (std::string_view k : kOnceKeys) {
    if (key == k) return true;
  }
  return startsWith(key, "opt_") || startsWith(key, "lars_") || startsWith(key, "sgd_");
}

std::string dumpPythonStyle(const Json& value) {
  if (value.is_object()) {
    std::string out = "{";
    bool first = true;
    for (const auto& [k, v] : value.items()) {
      if (!first) out += ", ";
      first = false;
      out += Json(k).dump(-1, ' ', /*ensure_ascii=*/true);
      out += ": ";
      out += dumpPythonStyle(v);
    }
    return out + "}";
  }
  if (value.is_array()) {
    std::string out = "[";
    bool first = true;
    for (const auto& v : value) {
      if (!first) out += ", ";
      first = false;
      out += dumpPythonStyle(v);
    }
    return out + "]";
  }
  // Scalars: nlohmann prints floats shortest-round-trip like Python's repr (0.0001, 5e-05, 2.0).
  return value.dump(-1, ' ', /*ensure_ascii=*/true);
}

std::string MlLogger::callSiteFile(const std::source_location& where) {
  std::string_view file = where.file_name();
  std::string_view root = repositoryRoot();
  if (!root.empty() && startsWith(file, root)) return std::string(file.substr(root.size()));
  if (!file.empty() && file.front() != '/') return std::string(file);  // already relative
  auto slash = file.find_last_of('/');
  return std::string(slash == std::string_view::npos ? file : file.substr(slash + 1));
}

std::string MlLogger::formatLine(std::string_view ns, std::int64_t timeMs, EventType type,
                                 std::string_view key, const Json& value, const Json& metadata,
                                 const std::source_location& where) {
  Json md = Json::object();
  md[meta::kFile] = callSiteFile(where);
  md[meta::kLineno] = where.line();
  if (!metadata.is_null() && !metadata.is_object()) {
    throw std::invalid_argument(fmt::format(
        "MLLOG key '{}': metadata must be a JSON object, got {}", key, metadata.dump()));
  }
  if (metadata.is_object()) {
    for (const auto& [k, v] : metadata.items()) {
      if (k == meta::kFile || k == meta::kLineno) continue;  // the call site wins
      md[k] = v;
    }
  }
  Json line = Json::object();
  line["namespace"] = std::string(ns);
  line["time_ms"] = timeMs;
  line["event_type"] = toString(type);
  line["key"] = std::string(key);
  line["value"] = value;
  line["metadata"] = std::move(md);
  return ":::MLLOG " + dumpPythonStyle(line);
}

MlLogger::MlLogger(MlLoggerOptions options) : options_(std::move(options)) {
  enabled_ = options_.rank == 0;
  if (!options_.clock) options_.clock = systemNowMs;
  if (!enabled_ || options_.path.empty()) return;
  file_ = std::fopen(options_.path.c_str(), options_.append ? "a" : "w");
  if (file_ == nullptr) {
    throw std::runtime_error(fmt::format("MlLogger: cannot open '{}' for writing: {}",
                                         options_.path.string(), std::strerror(errno)));
  }
}

MlLogger::~MlLogger() {
  if (file_ != nullptr) std::fclose(file_);
}

void MlLogger::event(std::string_view key, const Json& value, const Json& metadata,
                     std::source_location where) {
  emit(EventType::kPointInTime, key, value, metadata, where);
}

void MlLogger::start(std::string_view key, const Json& value, const Json& metadata,
                     std::source_location where) {
  emit(EventType::kIntervalStart, key, value, metadata, where);
}

void MlLogger::end(std::string_view key, const Json& value, const Json& metadata,
                   std::source_location where) {
  emit(EventType::kIntervalEnd, key, value, metadata, where);
}

std::vector<std::string> MlLogger::warnings() const {
  std::lock_guard lock(mutex_);
  return warnings_;
}

std::int64_t MlLogger::linesWritten() const {
  std::lock_guard lock(mutex_);
  return lines_;
}

void MlLogger::warn(std::string message) {
  if (options_.print_warnings) fmt::print(stderr, "MlLogger warning: {}\n", message);
  warnings_.push_back(std::move(message));
}

void MlLogger::emit(EventType type, std::string_view key, const Json& value, const Json& metadata,
                    const std::source_location& where) {
  if (!enabled_) return;
  std::lock_guard lock(mutex_);
  const std::string k(key);
  const bool once =
      (type == EventType::kPointInTime && isOnceKey(key)) || isExactlyOnceInterval(key);
  if (once) {
    auto it = once_values_.find(k);
    if (it != once_values_.end()) {
      if (isExactlyOnceInterval(key)) {
        throw std::logic_error(fmt::format(
            "MLLOG key '{}' must be logged exactly once per log: first at {}, again at {}", k,
            once_sites_[k], siteString(where)));
      }
      if (it->second != value) {
        throw std::logic_error(fmt::format(
            "MLLOG hyperparameter '{}' logged twice with different values: {} (at {}) and {} "
            "(at {}); each hyperparameter must be logged exactly once",
            k, it->second.dump(), once_sites_[k], value.dump(), siteString(where)));
      }
      warn(
          fmt::format("hyperparameter '{}' = {} logged again at {} (first at {}); duplicate "
                      "dropped",
                      k, value.dump(), siteString(where), once_sites_[k]));
      return;
    }
  }
  // The time is read under the lock so that times never go backwards down the file.
  const std::string line =
      formatLine(options_.ns, options_.clock(), type, key, value, metadata, where);
  if (file_ != nullptr) {
    if (std::fputs(line.c_str(), file_) < 0 || std::fputc('\n', file_) == EOF ||
        std::fflush(file_) != 0) {
      throw std::runtime_error(fmt::format("MlLogger: writing '{}' failed: {}",
                                           options_.path.string(), std::strerror(errno)));
    }
    if (options_.fsync_each_line) ::fsync(::fileno(file_));
  }
  if (options_.echo != nullptr) *options_.echo << line << std::endl;
  if (once) {
    once_values_.emplace(k, value);
    once_sites_.emplace(k, siteString(where));
  }
  ++lines_;
}

}  // namespace ipu::harness
