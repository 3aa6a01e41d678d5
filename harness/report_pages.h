// run_benchmark --report DIR: the report page (ipu_backend/report) of every program the fit
// check compiles, one HTML file each, with its view as JSON beside it so that two of them can be
// set side by side later (`ipu_report compare A.json B.json -o page.html`). A program that does
// not fit is drawn as planned up to the memory verdict (no exchange copies: its timeline holds
// compute and sync only, and says so).
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/run_loop.h"
#include "ipu_backend/compiler/executable.h"
#include "ipu_backend/cost/cost_model.h"

namespace ipu::harness {

// Called for each program a fit check compiles: its name ("training", "evaluation"), the program
// (or the part planned before the memory verdict: `partial`), what to call its page, and the
// cost options its timeline is priced with (the configuration's precision). Returns the view.
using ProgramReportSink =
    std::function<nlohmann::json(const std::string& program, const Executable& exe, bool partial,
                                 const std::string& title, const cost::CostOptions& cost)>;

// A sink writing DIR/<stem>_<program>.html and .json (`files` collects the pages written; a
// write that fails throws std::runtime_error naming the file).
ProgramReportSink reportWriter(const std::filesystem::path& dir, const std::string& stem,
                               std::vector<std::filesystem::path>* files);

// A run's page: the training program's view (`trainView`, as the sink wrote it) with the run's
// loss after every step (at most ~2,000 points drawn) and its evaluations, each with the host
// time and the modeled IPU time of the program runs done (`stepSeconds` per training step,
// `evalSeconds` per evaluation batch: the cost model's). Returns the page written.
std::filesystem::path writeRunReport(const std::filesystem::path& file, nlohmann::json trainView,
                                     const RunOutcome& run, double stepSeconds,
                                     double evalSeconds, const std::string& metric);

}  // namespace ipu::harness
