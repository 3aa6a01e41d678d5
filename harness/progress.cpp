#include "harness/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>

namespace ipu::harness {
namespace {

std::string duration(double seconds) {
  if (seconds < 0 || !std::isfinite(seconds)) return "?";
  const auto s = static_cast<long long>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, (s / 60) % 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

}  // namespace

ProgressLine::ProgressLine(bool enabled) : enabled_(enabled) {}

bool ProgressLine::stderrIsTerminal() {
  return ::isatty(STDERR_FILENO) == 1;
}

std::string ProgressLine::format(const ProgressState& s) {
  std::string line = fmt::format(
      "run {}/{} | epoch {}/{} | step {}/{} | {:.1f} img/s | loss {:.4f}", s.run, s.runs, s.epoch,
      s.max_epochs, s.step, s.steps_per_epoch, s.images_per_second, s.loss);
  line += s.last_accuracy ? fmt::format(" | acc {:.4f}", *s.last_accuracy) : " | acc -";
  line += " | ETA " + duration(s.eta_seconds);
  if (!s.phase.empty() && s.phase != "train") line += " | " + s.phase;
  return line;
}

void ProgressLine::update(const ProgressState& state, bool force) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (!force && drawn_ && now - last_ < std::chrono::milliseconds(200)) return;
  last_ = now;
  // \r + erase-to-end keeps one line however long the previous text was.
  std::fprintf(stderr, "\r\033[K%s", format(state).c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressLine::clear() {
  if (!enabled_ || !drawn_) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  drawn_ = false;
}

}  // namespace ipu::harness
