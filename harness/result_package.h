// The MLPerf submission package layout the official package checker reads:
//
//   <results-dir>/<org>/results/<system>/<benchmark>/result_<i>.txt
//   <results-dir>/<org>/systems/<system>.json      (file name = the <system> folder name)
//
// <benchmark> is the MLPerf name ("resnet", "bert"): the package checker skips any other
// folder name. Run it with `python -m mlperf_logging.package_checker <results-dir>/<org>
// training 4.0.0` and read its last line (it exits 0 even on errors).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "harness/benchmark.h"
#include "harness/mllog.h"  // Json

namespace ipu::harness {

struct PackageLayout {
  std::filesystem::path results_dir;  // e.g. <repo>/results/local
  std::string org;                    // submitter folder, = submission_org
  std::string system;                 // system id, e.g. "ipu-pod16-emulated"
};

// "ipu-pod<N>-emulated": the system id (and submission_platform) of an emulated pod.
std::string defaultSystemId(int podSize);

// Runs per benchmark result (MLPerf: ResNet 5, BERT 10; EfficientNet as an image entry: 5).
int requiredRunCount(Benchmark benchmark);

std::filesystem::path orgDir(const PackageLayout& layout);
std::filesystem::path benchmarkDir(const PackageLayout& layout, Benchmark benchmark);
// <...>/result_<runIndex>.txt, creating its folders. Throws std::invalid_argument for a negative
// index or an org/system that is not a plain folder name, std::filesystem::filesystem_error
// when the folders cannot be created.
std::filesystem::path resultFilePath(const PackageLayout& layout, Benchmark benchmark,
                                     int runIndex);
std::filesystem::path systemDescriptionPath(const PackageLayout& layout);
// Writes the system JSON (4-space indent, like the published ones) through a temporary file
// and a rename, so a reader never sees half a file. Returns its path.
std::filesystem::path writeSystemDescription(const PackageLayout& layout, const Json& description);

}  // namespace ipu::harness
