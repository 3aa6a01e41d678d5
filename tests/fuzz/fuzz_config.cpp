// `--config FILE`: loadJsonFile parses the file and applyConfig merges it into every pod preset
// (the keys run_benchmark validates against). Each input must end in a preset or a ConfigError
// naming the file; no other exception, no crash, no undefined behaviour on odd numbers.
#include <cstdio>
#include <string>
#include <utility>

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
      // What the user asked for is what runs: no silent narrowing or rounding.
      for (const auto& [key, got] :
           {std::pair{"micro_batch_size", p.micro_batch},
            std::pair{"gradient_accumulation_steps", p.gradient_accumulation}}) {
        if (user.contains(key) && user[key].is_number() && user[key].get<double>() != got) {
          std::fprintf(stderr, "%s: asked %s, got %d\n", key, user[key].dump().c_str(), got);
          ipu::fuzz::violated("applyConfig changed a batch size the user gave");
        }
      }
    } catch (const ipu::harness::ConfigError& e) {
      if (e.source().empty()) ipu::fuzz::violated("ConfigError without the file name");
    }
  }
  return 0;
}
