// Shared by the harness tests that run the official mlperf-logging tools from <repo>/.venv
// (created by scripts/setup.sh).
#pragma once

#include <sys/wait.h>
#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

namespace ipu::harness::checker {

inline std::filesystem::path venvPython() {
  return IPU_SOURCE_DIR "/.venv/bin/python";
}

inline bool haveChecker() {
  return std::filesystem::exists(venvPython()) &&
         std::system(("'" + venvPython().string() + "' -c 'import mlperf_logging' >/dev/null 2>&1")
                         .c_str()) == 0;
}

inline constexpr char kNoChecker[] =
    "the MLPerf checker is not installed: run `bash scripts/setup.sh` to create " IPU_SOURCE_DIR
    "/.venv with mlperf-logging";

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs `args` (already shell-quoted) with the venv's interpreter, in `cwd`.
inline CommandResult runPython(const std::string& args, const std::filesystem::path& cwd) {
  const std::string cmd =
      "cd '" + cwd.string() + "' && '" + venvPython().string() + "' " + args + " 2>&1";
  CommandResult r;
  std::FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buf{};
  while (std::fgets(buf.data(), buf.size(), pipe) != nullptr) r.output += buf.data();
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

inline std::string lastNonEmptyLine(const std::string& text) {
  std::string last, line;
  for (char c : text + "\n") {
    if (c == '\n') {
      if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
      line.clear();
    } else {
      line += c;
    }
  }
  return last;
}

}  // namespace ipu::harness::checker
