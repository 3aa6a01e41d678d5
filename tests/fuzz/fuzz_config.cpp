// `--config FILE`: loadJsonFile parses the file and applyConfig merges it into every pod preset
// (the keys run_benchmark validates against). Each input must end in a preset or a ConfigError
// naming the file; no other exception, no crash, no undefined behaviour on odd numbers.
#include <string>

#include "harness/config.h"
#include "harness/pod_presets.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = ipu::fuzz::writeScratch("config.json", data, size);
  ipu::harness::Json user;
  try {
    user = ipu::harness::loadJsonFile(path);
  } catch (const ipu::harness::ConfigError& e) {
    if (e.source().empty()) ipu::fuzz::violated("ConfigError without the file name");
    return 0;
  }
  for (const auto& preset : ipu::harness::allPresets()) {
    try {
      const auto p = ipu::harness::applyConfig(preset, user, path.string());
      if (p.micro_batch < 1 || p.gradient_accumulation < 1) {
        ipu::fuzz::violated("applyConfig accepted a batch size below 1");
      }
    } catch (const ipu::harness::ConfigError& e) {
      if (e.source().empty()) ipu::fuzz::violated("ConfigError without the file name");
    }
  }
  return 0;
}
