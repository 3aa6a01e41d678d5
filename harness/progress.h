// The live progress line of run_benchmark: one line on stderr, rewritten in place (\r) at most
// a few times a second, only when stderr is a terminal; silent otherwise (CI logs, pipes).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace ipu::harness {

struct ProgressState {
  int run = 0, runs = 1;
  int epoch = 0, max_epochs = 0;
  std::int64_t step = 0, steps_per_epoch = 0;
  double images_per_second = 0;
  double loss = 0;
  std::optional<double> last_accuracy;
  double eta_seconds = -1;  // < 0: unknown
  std::string phase;        // "train", "eval", "init"
};

class ProgressLine {
 public:
  // enabled: draw at all (default: isatty(stderr)).
  explicit ProgressLine(bool enabled);
  static bool stderrIsTerminal();

  void update(const ProgressState& state, bool force = false);
  void clear();  // erases the line (before other output and at the end)
  bool enabled() const { return enabled_; }

  static std::string format(const ProgressState& state);  // the line's text, for tests

 private:
  bool enabled_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace ipu::harness
