#include "harness/result_package.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace ipu::harness {
namespace {

namespace fs = std::filesystem;

void checkFolderName(std::string_view what, const std::string& name) {
  const bool bad =
      name.empty() || name == "." || name == ".." || name.find_first_of("/\\") != std::string::npos;
  if (bad) {
    throw std::invalid_argument(
        fmt::format("results package: {} '{}' must be a plain folder name", what, name));
  }
}

}  // namespace

std::string defaultSystemId(int podSize) {
  return fmt::format("ipu-pod{}-emulated", podSize);
}

int requiredRunCount(Benchmark benchmark) {
  return benchmark == Benchmark::kBertLarge ? 10 : 5;
}

fs::path orgDir(const PackageLayout& layout) {
  checkFolderName("org", layout.org);
  return layout.results_dir / layout.org;
}

fs::path benchmarkDir(const PackageLayout& layout, Benchmark benchmark) {
  checkFolderName("system", layout.system);
  return orgDir(layout) / "results" / layout.system / mlperfBenchmarkName(benchmark);
}

fs::path resultFilePath(const PackageLayout& layout, Benchmark benchmark, int runIndex) {
  if (runIndex < 0) {
    throw std::invalid_argument(fmt::format("results package: run index {} < 0", runIndex));
  }
  const fs::path dir = benchmarkDir(layout, benchmark);
  fs::create_directories(dir);
  return dir / fmt::format("result_{}.txt", runIndex);
}

fs::path systemDescriptionPath(const PackageLayout& layout) {
  checkFolderName("system", layout.system);
  return orgDir(layout) / "systems" / (layout.system + ".json");
}

fs::path writeSystemDescription(const PackageLayout& layout, const Json& description) {
  const fs::path path = systemDescriptionPath(layout);
  fs::create_directories(path.parent_path());
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << description.dump(4) << '\n';
    out.flush();
    out.close();
    if (!out) {
      // A full disk or a quota: the earlier file (if any) stays as it was, and no half-written
      // temporary file is left in the package.
      const int err = errno;
      std::error_code ignored;
      fs::remove(tmp, ignored);
      throw std::runtime_error(fmt::format("results package: writing '{}' failed: {}", tmp.string(),
                                           std::strerror(err)));
    }
  }
  fs::rename(tmp, path);
  return path;
}

}  // namespace ipu::harness
