#include "ipu_backend/report/report.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <stdexcept>

#include <fmt/format.h>

#include "ipu_backend/ir/op_defs.h"

namespace ipu::report {

// The page template (page.html), generated into a string at build time.
extern const char* const kPageTemplate;

namespace {

std::string setName(const Executable& exe, int cs) {
  return cs >= 0 && cs < static_cast<int>(exe.computeSets.size()) ? exe.computeSets[cs].name
                                                                  : "the host stream copies";
}

nlohmann::json memoryJson(const Executable& exe) {
  const i64 capacity = exe.target.bytesPerTile;
  std::vector<i64> always, notAlways;
  int worst = 0, over = 0;
  for (size_t t = 0; t < exe.tileMemory.size(); ++t) {
    const TileMemory& m = exe.tileMemory[t];
    always.push_back(m.alwaysLive);
    notAlways.push_back(m.peakNotAlwaysLive);
    over += m.total() > capacity;
    if (m.total() > exe.tileMemory[worst].total()) worst = static_cast<int>(t);
  }
  const i64 worstBytes = exe.tileMemory.empty() ? 0 : exe.tileMemory[worst].total();
  return {{"capacity", capacity},           {"always_live", always},
          {"not_always_live", notAlways},   {"max_tile", worst},
          {"max_tile_bytes", worstBytes},   {"tiles_over", over},
          {"fits", worstBytes <= capacity}, {"arena_bytes", exe.arenaBytes}};
}

nlohmann::json worstTilesJson(const Executable& exe) {
  nlohmann::json out = nlohmann::json::array();
  for (const TileDetail& d : exe.memoryDetail.worstTiles) {
    nlohmann::json occ = nlohmann::json::array();
    for (const TileOccupant& o : d.occupants)
      occ.push_back({{"name", o.name}, {"bytes", o.bytes}, {"always_live", o.alwaysLive}});
    out.push_back({{"tile", d.tile},
                   {"total", d.memory.total()},
                   {"always_live", d.memory.alwaysLive},
                   {"peak_not_always_live", d.memory.peakNotAlwaysLive},
                   {"code_and_vertex_state", d.codeAndVertexState},
                   {"peak_compute_set", setName(exe, d.peakComputeSet)},
                   {"occupants", occ}});
  }
  return out;
}

nlohmann::json livenessJson(const Executable& exe) {
  const MemoryDetail& d = exe.memoryDetail;
  nlohmann::json peak = nlohmann::json::array();
  for (const auto& [name, bytes] : d.peakTensors)
    peak.push_back({{"name", name}, {"bytes", bytes}});
  return {{"live_bytes", d.liveBytes},
          {"worst_tile_live_bytes", d.worstTileLiveBytes},
          {"worst_tile", d.worstTiles.empty() ? -1 : d.worstTiles.front().tile},
          {"peak_index", d.peakComputeSet},
          {"peak_compute_set", setName(exe, d.peakComputeSet)},
          {"peak_bytes", d.peakComputeSet >= 0 ? d.liveBytes[d.peakComputeSet] : 0},
          {"peak_tensors", peak}};
}

nlohmann::json timelineJson(const Executable& exe, const cost::StepCost& step) {
  nlohmann::json sets = nlohmann::json::array();
  struct Totals {
    double compute = 0, exchange = 0, sync = 0;
    int sets = 0;
  };
  std::map<std::string, Totals> byKind;
  for (const cost::ComputeSetCost& c : step.computeSets) {
    const std::string kind(opName(c.kind));
    const double imbalance =
        c.meanTileComputeCycles > 0 ? c.computeCycles / c.meanTileComputeCycles : 0.0;
    sets.push_back({{"name", c.name},
                    {"kind", kind},
                    {"phase", c.phase},
                    {"compute", c.computeCycles},
                    {"exchange", c.exchangeCycles},
                    {"sync", c.syncCycles},
                    {"busiest_tile", c.busiestTile},
                    {"tiles_used", c.tilesUsed},
                    {"imbalance", imbalance},
                    {"optimizer", c.optimizer}});
    Totals& t = byKind[kind];
    t.compute += c.computeCycles;
    t.exchange += c.exchangeCycles;
    t.sync += c.syncCycles;
    ++t.sets;
  }
  nlohmann::json kinds = nlohmann::json::array();
  for (const auto& [k, t] : byKind)
    kinds.push_back({{"kind", k},
                     {"compute", t.compute},
                     {"exchange", t.exchange},
                     {"sync", t.sync},
                     {"sets", t.sets}});
  return {{"clock_hz", exe.target.clockHz},
          {"compute_cycles", step.computeCycles},
          {"exchange_cycles", step.exchangeCycles},
          {"sync_cycles", step.syncCycles},
          {"device_cycles", step.deviceCycles},
          {"collective_cycles", step.collectiveCycles},
          {"optimizer_cycles", step.optimizerCycles},
          {"step_seconds", step.seconds},
          {"device_seconds", step.deviceSeconds},
          {"host_seconds", step.hostSeconds},
          {"utilisation", step.utilisation},
          {"sets", sets},
          {"by_kind", kinds}};
}

}  // namespace

nlohmann::json compileView(const Executable& exe, const cost::StepCost& step,
                           const std::string& title) {
  nlohmann::json v;
  v["title"] = title;
  v["target"] = {{"name", exe.target.name},
                 {"tiles", exe.target.numTiles},
                 {"bytes_per_tile", exe.target.bytesPerTile},
                 {"clock_hz", exe.target.clockHz}};
  v["summary"] = exe.report();
  v["memory"] = memoryJson(exe);
  v["worst_tiles"] = worstTilesJson(exe);
  v["liveness"] = livenessJson(exe);
  v["timeline"] = timelineJson(exe, step);
  return v;
}

std::string htmlPage(const std::vector<nlohmann::json>& views, const std::string& title) {
  if (views.empty() || views.size() > 2)
    throw std::invalid_argument(
        fmt::format("a report page shows one view or two (a comparison), not {}", views.size()));
  nlohmann::json data = {{"title", title}, {"views", views}};
  // Inside <script>, "</" would end the element early (a tensor named "</script>" is legal).
  std::string json = data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string safe;
  safe.reserve(json.size());
  for (size_t i = 0; i < json.size(); ++i) {
    if (json[i] == '<' && i + 1 < json.size() && json[i + 1] == '/') {
      safe += "<\\/";
      ++i;
    } else {
      safe += json[i];
    }
  }
  std::string page = kPageTemplate;
  const std::string marker = "/*@REPORT_DATA@*/null";
  const size_t at = page.find(marker);
  if (at == std::string::npos) throw std::logic_error("report page template has no data marker");
  page.replace(at, marker.size(), safe);
  return page;
}

namespace {

void writeFile(const std::filesystem::path& file, const std::string& text, const char* what) {
  std::error_code ec;
  if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path(), ec);
  if (ec)
    throw std::runtime_error(fmt::format("cannot create the report folder {}: {}",
                                         file.parent_path().string(), ec.message()));
  std::ofstream out(file, std::ios::binary);
  out << text;
  out.close();
  if (!out)
    throw std::runtime_error(
        fmt::format("cannot write the {} {} (full disk or no permission?)", what, file.string()));
}

}  // namespace

void writeHtmlPage(const std::filesystem::path& file, const std::vector<nlohmann::json>& views,
                   const std::string& title) {
  writeFile(file, htmlPage(views, title), "report");
}

void writeView(const std::filesystem::path& file, const nlohmann::json& view) {
  writeFile(file, view.dump(), "report view");
}

nlohmann::json readView(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw std::runtime_error(fmt::format("cannot open the view {}", file.string()));
  nlohmann::json v;
  try {
    in >> v;
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(fmt::format(
        "{} is not a report view ({}); use the .json that run_benchmark --report writes "
        "beside each page",
        file.string(), e.what()));
  }
  for (const char* key : {"title", "memory", "liveness", "timeline", "summary"})
    if (!v.is_object() || !v.contains(key))
      throw std::runtime_error(fmt::format(
          "{} is not a report view: no \"{}\" (use the .json that run_benchmark --report "
          "writes beside each page)",
          file.string(), key));
  return v;
}

}  // namespace ipu::report
