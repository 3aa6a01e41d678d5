#include "harness/report_pages.h"

#include <fmt/format.h>

#include "ipu_backend/report/report.h"

namespace ipu::harness {

ProgramReportSink reportWriter(const std::filesystem::path& dir, const std::string& stem,
                               std::vector<std::filesystem::path>* files) {
  return [dir, stem, files](const std::string& program, const Executable& exe, bool partial,
                            const std::string& title, const cost::CostOptions& cost) {
    const std::string t =
        partial ? title + " (does not fit: planned up to the memory verdict, no exchanges)" : title;
    const nlohmann::json view = report::compileView(exe, cost::estimateStep(exe, cost), t);
    const std::string name = stem + "_" + program;
    const std::filesystem::path page = dir / (name + ".html");
    report::writeHtmlPage(page, {view}, t);
    report::writeView(dir / (name + ".json"), view);
    if (files) files->push_back(page);
    return view;
  };
}

std::filesystem::path writeRunReport(const std::filesystem::path& file, nlohmann::json trainView,
                                     const RunOutcome& run, double stepSeconds, double evalSeconds,
                                     const std::string& metric) {
  nlohmann::json losses = nlohmann::json::array();
  const size_t n = run.curve.losses.size(), every = n > 2000 ? (n + 1999) / 2000 : 1;
  for (size_t i = 0; i < n; i += every) {
    const RunCurve::Loss& l = run.curve.losses[i];
    losses.push_back({{"samples", l.samples}, {"seconds", l.seconds}, {"loss", l.loss}});
  }
  nlohmann::json evals = nlohmann::json::array();
  for (const RunCurve::Eval& e : run.curve.evals)
    evals.push_back({{"samples", e.samples},
                     {"host_seconds", e.seconds},
                     {"ipu_seconds", static_cast<double>(e.train_steps) * stepSeconds +
                                         static_cast<double>(e.eval_runs) * evalSeconds},
                     {"accuracy", e.accuracy}});
  trainView["run"] = {
      {"metric", metric},
      {"loss", losses},
      {"evals", evals},
      {"note", fmt::format("run with seed {}: {} ({}); loss after every step{}; modeled IPU "
                           "time: the cost model's price of the training steps and evaluation "
                           "batches run so far",
                           run.seed, toString(run.status), run.message,
                           every > 1 ? fmt::format(" (every {}th drawn)", every) : "")}};
  const std::string title =
      trainView.value("title", std::string("run")) + fmt::format(", run with seed {}", run.seed);
  trainView["title"] = title;
  report::writeHtmlPage(file, {trainView}, title);
  return file;
}

}  // namespace ipu::harness
