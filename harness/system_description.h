// The MLPerf system description (<org>/systems/<system>.json) with true values: the emulated
// IPU pod as the accelerator, and this host as read at run time (/proc/cpuinfo, /proc/meminfo,
// /etc/os-release, /sys caches, statvfs of the results folder, uname). Nothing is copied from
// the published Graphcore descriptions: fields we cannot know say so instead of guessing.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "harness/mllog.h"  // Json
#include "harness/pod_presets.h"

namespace ipu::harness {

struct HostInfo {
  std::string cpu_model;          // "model name" of /proc/cpuinfo
  int logical_cpus = 0;           // std::thread::hardware_concurrency()
  int sockets = 0;                // distinct "physical id" values (1 when none are listed)
  double cpu_mhz = 0;             // "cpu MHz" of the first processor (0 when not listed)
  std::string caches;             // "L1d 48 KiB, L1i 32 KiB, L2 1 MiB, L3 32 MiB" (per core/shared)
  std::int64_t memory_bytes = 0;  // MemTotal
  std::string os_name;            // PRETTY_NAME of /etc/os-release
  std::string kernel;             // uname -sr
  std::string machine;            // uname -m
  std::string hostname;
  std::vector<std::string> network_interfaces;  // /sys/class/net minus "lo"
};
HostInfo probeHost();

struct StorageInfo {
  std::string filesystem;  // e.g. "ext4", from the /proc/mounts entry holding the folder
  std::string device;      // e.g. "/dev/vda1"
  std::string mount_point;
  std::int64_t capacity_bytes = 0;  // statvfs f_blocks x f_frsize
};
// The file system holding `path` (the nearest existing parent of it).
StorageInfo probeStorage(const std::filesystem::path& path);

struct SystemDescriptionOptions {
  std::string submitter;    // the org, as in submission_org
  std::string division;     // "closed" | "open"
  std::string status;       // as the system checker wants it (systemDescriptionStatus())
  std::string system_name;  // free text, e.g. "IPU-POD16 (emulated on 1 CPU host)"
  PodTopology pod;
  std::filesystem::path results_dir;  // where results are stored (for host_storage_*)
  // This project and its backend libraries, e.g. "ipu_mlperf 0.1.0, oneDNN 2.6.3" (the caller
  // adds oneDNN: harness_core does not link it). Default: projectNameAndVersion().
  std::string framework;
  std::string other_software_stack;  // compiler, MPI, ... ; default: the compiler
  std::string sw_notes;              // appended to the generated notes
};

// "ipu_mlperf 0.1.0": the CMake project name and version this library was built from.
std::string projectNameAndVersion();

// The 33 fields the MLPerf system-description checker requires, in its order.
const std::vector<std::string>& systemDescriptionFields();

// submission_status of the log ("research", "onprem", "cloud", "preview") -> the system JSON
// "status" the checker accepts from ruleset 4.0 on ("Research, Development, or Internal
// (RDI)", "Available on-premise", "Available cloud", "Preview"). Throws on anything else.
std::string systemDescriptionStatus(std::string_view submissionStatus);

// Every field filled (all values are strings, as in published descriptions).
Json buildSystemDescription(const SystemDescriptionOptions& options, const HostInfo& host,
                            const StorageInfo& storage);
Json buildSystemDescription(const SystemDescriptionOptions& options);  // probes this host

}  // namespace ipu::harness
