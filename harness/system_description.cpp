#include "harness/system_description.h"

#include <fmt/format.h>
#include <sys/statvfs.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace ipu::harness {
namespace {

namespace fs = std::filesystem;

std::string trim(std::string s) {
  const auto notSpace = [](unsigned char c) { return !std::isspace(c); };
  s.erase(s.begin(), std::find_if(s.begin(), s.end(), notSpace));
  s.erase(std::find_if(s.rbegin(), s.rend(), notSpace).base(), s.end());
  return s;
}

std::string readFirstLine(const fs::path& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return trim(line);
}

std::string formatBytes(std::int64_t bytes) {
  constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", v, kUnits[u]);
}

// "48K" -> "48 KiB" (the /sys cache size notation).
std::string sysSize(std::string s) {
  if (!s.empty() && s.back() == 'K') return s.substr(0, s.size() - 1) + " KiB";
  if (!s.empty() && s.back() == 'M') return s.substr(0, s.size() - 1) + " MiB";
  return s;
}

std::string probeCaches() {
  std::string out;
  const fs::path base = "/sys/devices/system/cpu/cpu0/cache";
  std::error_code ec;
  std::vector<std::pair<std::string, std::string>> entries;
  for (const auto& dir : fs::directory_iterator(base, ec)) {
    if (dir.path().filename().string().rfind("index", 0) != 0) continue;
    const std::string level = readFirstLine(dir.path() / "level");
    const std::string type = readFirstLine(dir.path() / "type");
    const std::string size = readFirstLine(dir.path() / "size");
    if (level.empty() || size.empty()) continue;
    std::string name = "L" + level;
    if (type == "Data") name += "d";
    if (type == "Instruction") name += "i";
    entries.emplace_back(name, sysSize(size));
  }
  std::sort(entries.begin(), entries.end());
  for (const auto& [name, size] : entries) {
    out += (out.empty() ? "" : ", ") + name + " " + size;
  }
  return out;
}

std::string compilerString() {
#if defined(__clang__)
  return fmt::format("Clang {}.{}.{}", __clang_major__, __clang_minor__, __clang_patchlevel__);
#elif defined(__GNUC__)
  return fmt::format("GCC {}.{}.{}", __GNUC__, __GNUC_MINOR__, __GNUC_PATCHLEVEL__);
#else
  return "unknown compiler";
#endif
}

std::string orUnknown(const std::string& s, const char* what) {
  return s.empty() ? fmt::format("unknown ({} not readable on this host)", what) : s;
}

}  // namespace

HostInfo probeHost() {
  HostInfo h;
  h.logical_cpus = static_cast<int>(std::thread::hardware_concurrency());
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::set<std::string> sockets;
  for (std::string line; std::getline(cpuinfo, line);) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = trim(line.substr(0, colon));
    const std::string value = trim(line.substr(colon + 1));
    if (key == "model name" && h.cpu_model.empty()) h.cpu_model = value;
    if (key == "physical id") sockets.insert(value);
    if (key == "cpu MHz" && h.cpu_mhz == 0) h.cpu_mhz = std::atof(value.c_str());
  }
  h.sockets = sockets.empty() ? 1 : static_cast<int>(sockets.size());
  h.caches = probeCaches();

  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);) {
    if (line.rfind("MemTotal:", 0) == 0) {
      h.memory_bytes = std::atoll(line.c_str() + 9) * 1024;  // the value is in kB
      break;
    }
  }

  std::ifstream osRelease("/etc/os-release");
  for (std::string line; std::getline(osRelease, line);) {
    if (line.rfind("PRETTY_NAME=", 0) == 0) {
      std::string v = line.substr(12);
      if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
      h.os_name = v;
    }
  }

  struct utsname u {};
  if (::uname(&u) == 0) {
    h.kernel = fmt::format("{} {}", u.sysname, u.release);
    h.machine = u.machine;
    h.hostname = u.nodename;
  }

  std::error_code ec;
  for (const auto& dir : fs::directory_iterator("/sys/class/net", ec)) {
    const std::string name = dir.path().filename().string();
    if (name != "lo") h.network_interfaces.push_back(name);
  }
  std::sort(h.network_interfaces.begin(), h.network_interfaces.end());
  return h;
}

StorageInfo probeStorage(const fs::path& path) {
  StorageInfo s;
  std::error_code ec;
  fs::path p = fs::absolute(path, ec);
  while (!p.empty() && !fs::exists(p, ec) && p != p.root_path()) p = p.parent_path();
  p = fs::weakly_canonical(p, ec);
  struct statvfs st {};
  if (::statvfs(p.c_str(), &st) == 0) {
    s.capacity_bytes = static_cast<std::int64_t>(st.f_blocks) * st.f_frsize;
  }
  // The longest mount point that contains the folder.
  std::ifstream mounts("/proc/mounts");
  const std::string target = p.string();
  for (std::string line; std::getline(mounts, line);) {
    std::istringstream fields(line);
    std::string device, mountPoint, fsType;
    fields >> device >> mountPoint >> fsType;
    const bool contains = target.rfind(mountPoint, 0) == 0 &&
                          (mountPoint == "/" || target.size() == mountPoint.size() ||
                           target[mountPoint.size()] == '/');
    if (contains && mountPoint.size() >= s.mount_point.size()) {
      s.device = device;
      s.mount_point = mountPoint;
      s.filesystem = fsType;
    }
  }
  return s;
}

std::string projectNameAndVersion() {
#if defined(IPU_PROJECT_NAME) && defined(IPU_PROJECT_VERSION)
  return fmt::format("{} {}", IPU_PROJECT_NAME, IPU_PROJECT_VERSION);
#else
  return "ipu_mlperf (version unknown)";
#endif
}

const std::vector<std::string>& systemDescriptionFields() {
  static const std::vector<std::string> kFields = {
      "submitter",
      "division",
      "status",
      "system_name",
      "number_of_nodes",
      "host_processors_per_node",
      "host_processor_model_name",
      "host_processor_core_count",
      "host_processor_vcpu_count",
      "host_processor_frequency",
      "host_processor_caches",
      "host_processor_interconnect",
      "host_memory_capacity",
      "host_storage_type",
      "host_storage_capacity",
      "host_networking",
      "host_networking_topology",
      "host_memory_configuration",
      "accelerators_per_node",
      "accelerator_model_name",
      "accelerator_host_interconnect",
      "accelerator_frequency",
      "accelerator_on-chip_memories",
      "accelerator_memory_configuration",
      "accelerator_memory_capacity",
      "accelerator_interconnect",
      "accelerator_interconnect_topology",
      "cooling",
      "hw_notes",
      "framework",
      "other_software_stack",
      "operating_system",
      "sw_notes",
  };
  return kFields;
}

std::string systemDescriptionStatus(std::string_view submissionStatus) {
  if (submissionStatus == "research") return "Research, Development, or Internal (RDI)";
  if (submissionStatus == "onprem") return "Available on-premise";
  if (submissionStatus == "cloud") return "Available cloud";
  if (submissionStatus == "preview") return "Preview";
  throw std::invalid_argument(
      fmt::format("unknown submission status '{}': valid are research, onprem, cloud, preview",
                  submissionStatus));
}

Json buildSystemDescription(const SystemDescriptionOptions& o, const HostInfo& host,
                            const StorageInfo& storage) {
  const PodTopology& pod = o.pod;
  const std::string interfaces = [&] {
    std::string s;
    for (const auto& n : host.network_interfaces) s += (s.empty() ? "" : ", ") + n;
    return s.empty() ? std::string("none besides loopback") : s;
  }();
  const std::string gw = pod.gw_links ? "; GW-Links (100 GbE) between POD64s" : "";

  Json d = Json::object();
  d["submitter"] = o.submitter;
  d["division"] = o.division;
  d["status"] = o.status;
  d["system_name"] = o.system_name;
  // The real host(s), not the hosts a physical pod of this size would use.
  d["number_of_nodes"] = "1";
  d["host_processors_per_node"] = std::to_string(host.sockets);
  d["host_processor_model_name"] = orUnknown(host.cpu_model, "/proc/cpuinfo");
  // Logical CPUs visible to this process: on a VM the physical core count is not observable.
  d["host_processor_core_count"] = std::to_string(host.logical_cpus);
  d["host_processor_vcpu_count"] = std::to_string(host.logical_cpus);
  d["host_processor_frequency"] =
      host.cpu_mhz > 0 ? fmt::format("{:.0f} MHz (as reported by /proc/cpuinfo)", host.cpu_mhz)
                       : "unknown (not reported by /proc/cpuinfo)";
  d["host_processor_caches"] = orUnknown(host.caches, "/sys/devices/system/cpu/cpu0/cache");
  d["host_processor_interconnect"] =
      host.sockets > 1 ? fmt::format("{} sockets (interconnect not observable)", host.sockets)
                       : "N/A (single socket)";
  d["host_memory_capacity"] = host.memory_bytes > 0 ? formatBytes(host.memory_bytes) + " (MemTotal)"
                                                    : "unknown (/proc/meminfo not readable)";
  d["host_storage_type"] =
      storage.filesystem.empty()
          ? "unknown (results folder not found in /proc/mounts)"
          : fmt::format("{} on {} (mounted at {}; device type not observable)", storage.filesystem,
                        storage.device, storage.mount_point);
  d["host_storage_capacity"] = storage.capacity_bytes > 0
                                   ? formatBytes(storage.capacity_bytes) + " (results file system)"
                                   : "unknown (statvfs failed)";
  d["host_networking"] =
      fmt::format("network interfaces: {} (unused: single-host emulation)", interfaces);
  d["host_networking_topology"] = "N/A (single host; no multi-host traffic)";
  d["host_memory_configuration"] = "unknown (DIMM layout not observable from this host)";
  d["accelerators_per_node"] = std::to_string(pod.pod_size);
  d["accelerator_model_name"] = "Graphcore IPU Mk2 GC200 (emulated)";
  d["accelerator_host_interconnect"] =
      "emulated in host memory; modeled as the IPU-M2000 gateway (PCIe Gen4 x16 equivalent, "
      "64 GB/s per IPU; 100 GbE RoCE to the host)";
  d["accelerator_frequency"] = "1.33 GHz (modeled)";
  d["accelerator_on-chip_memories"] =
      "900 MB SRAM per IPU (1,472 tiles x 624 KiB; modeled, backed by host DRAM)";
  d["accelerator_memory_configuration"] =
      "emulated: IPU-M2000 streaming memory (DDR4) is modeled, backed by host DRAM";
  d["accelerator_memory_capacity"] = "32 GB streaming memory per IPU (modeled)";
  d["accelerator_interconnect"] = pod.pod_size == 1
                                      ? std::string("none (single IPU)")
                                      : "IPU-Links (modeled, 10 per IPU, 320 GB/s)" + gw;
  d["accelerator_interconnect_topology"] = pod.description();
  d["cooling"] = "N/A (emulated accelerator; host cooling not observable)";
  d["hw_notes"] = fmt::format(
      "The IPUs are EMULATED on a CPU host: no IPU hardware was used. This is an emulated "
      "{} ({} IPUs, {} IPU-M2000) running on one {} host. Reported times are host wall-clock "
      "times of the emulation, not measurements of IPU hardware (modeled IPU times, where a "
      "run reports them, come from the project's cost model).",
      pod.name, pod.pod_size, pod.m2000s, host.machine.empty() ? "Linux" : host.machine);
  d["framework"] = o.framework.empty() ? projectNameAndVersion() : o.framework;
  d["other_software_stack"] =
      o.other_software_stack.empty() ? compilerString() : o.other_software_stack;
  d["operating_system"] = fmt::format("{} ({})", orUnknown(host.os_name, "/etc/os-release"),
                                      host.kernel.empty() ? "kernel unknown" : host.kernel);
  std::string notes = fmt::format("Built with {} (C++20). Host name: {}.", compilerString(),
                                  host.hostname.empty() ? "unknown" : host.hostname);
  if (!o.sw_notes.empty()) notes += " " + o.sw_notes;
  d["sw_notes"] = notes;
  return d;
}

Json buildSystemDescription(const SystemDescriptionOptions& options) {
  return buildSystemDescription(options, probeHost(), probeStorage(options.results_dir));
}

}  // namespace ipu::harness
