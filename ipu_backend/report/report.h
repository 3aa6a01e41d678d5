// A PopVision-style page of a compiled program: the memory of every tile (always-live vs peak
// not-always-live against the capacity, the fullest tiles' occupants as the overflow error names
// them), memory over the program (the liveness peak and the tensors that make it), and the BSP
// timeline of one step from the cost model (compute, exchange and sync per compute set, totals
// per op kind, the slowest sets and their tile imbalance). One self-contained HTML file: the data
// and the script that draws it (plain SVG) are inline, so it opens without a network.
//
// A page holds one view or two (a comparison: two micro-batches, precisions or placements side by
// side, with the headline figures that differ highlighted). A caller may add a "run" object to a
// view before writing it (harness: loss and accuracy against samples and time); see page.html for
// the fields the page reads.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ipu_backend/compiler/executable.h"
#include "ipu_backend/cost/cost_model.h"

namespace ipu::report {

// Everything one view draws, from a compiled program and its cost. `title` names the view
// ("resnet50 training step, micro-batch 20, 16.16"). The numbers are the compile report's and
// the cost model's own (tests compare them).
nlohmann::json compileView(const Executable& exe, const cost::StepCost& step,
                           const std::string& title);

// The page: the template with `views` (one or two) inlined.
std::string htmlPage(const std::vector<nlohmann::json>& views, const std::string& title);

// Writes htmlPage to `file` (its folder is created); throws std::runtime_error naming the file
// when it cannot be written.
void writeHtmlPage(const std::filesystem::path& file, const std::vector<nlohmann::json>& views,
                   const std::string& title);

// A view as JSON, to set beside another one later (`ipu_report compare`): written (the same
// errors as writeHtmlPage) and read back (std::runtime_error naming the file when it is not a
// view).
void writeView(const std::filesystem::path& file, const nlohmann::json& view);
nlohmann::json readView(const std::filesystem::path& file);

}  // namespace ipu::report
