// Shared by the fuzz targets: the libFuzzer entry point and a scratch file for readers that take
// a path. Each target is built twice: with -fsanitize=fuzzer under IPU_FUZZ=ON, and in every
// build with replay_main.cpp, so that the seed corpus and every crash input found so far are
// replayed by ctest (fuzz_replay.<target>).
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace ipu::fuzz {

// A per-process scratch folder under $TMPDIR (libFuzzer -fork/-jobs run several processes),
// removed at exit.
inline const std::filesystem::path& scratchDir() {
  static const std::filesystem::path dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::filesystem::path d = std::filesystem::path(tmp && *tmp ? tmp : "/tmp") /
                              ("ipu_fuzz_" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratchDir(), ec);
    });
    return d;
  }();
  return dir;
}

// Writes the input to scratchDir()/name and returns the path.
inline std::filesystem::path writeScratch(const std::string& name, const uint8_t* data,
                                          size_t size) {
  const auto path = scratchDir() / name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) {
    std::fprintf(stderr, "fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
  return path;
}

// A broken promise of the code under test (e.g. a round trip that does not hold): abort so the
// fuzzer saves the input.
[[noreturn]] inline void violated(const char* what) {
  std::fprintf(stderr, "fuzz: property violated: %s\n", what);
  std::abort();
}

}  // namespace ipu::fuzz
