// Errors raised by the datasets layer. Every message names the file (or directory) involved so a
// failed run can be diagnosed from the log alone.
#pragma once

#include <stdexcept>
#include <string>

namespace datasets {

class DatasetError : public std::runtime_error {
 public:
  explicit DatasetError(const std::string& message, std::string path = {})
      : std::runtime_error(message), path_(std::move(path)) {}
  // The file or directory the error is about (may be empty).
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A single sample that cannot be decoded (corrupt, truncated, unreadable). The pipeline may skip
// these under CorruptPolicy::Skip; every other DatasetError is always fatal.
class CorruptSampleError : public DatasetError {
 public:
  using DatasetError::DatasetError;
};

// What to do with a corrupt sample (and, for image folders, an empty class folder).
enum class CorruptPolicy { kSkip, kFail };

}  // namespace datasets
