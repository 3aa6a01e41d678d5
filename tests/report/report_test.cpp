// The report page of a compiled program: the memory detail the compiler keeps, the view's
// figures against the compile report and the cost model, and the page rendered in headless
// Chromium (no script errors; the figures it shows are the view's).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "ipu_backend/compiler/autodiff.h"
#include "ipu_backend/compiler/compiler.h"
#include "ipu_backend/ir/builder.h"
#include "ipu_backend/report/report.h"

namespace ipu::report {
namespace {

namespace fs = std::filesystem;

// A small training step (conv, relu, matmul, softmax cross-entropy and their gradients) on a
// 32-tile target whose tile memory `bytesPerTile` decides whether it fits.
Executable compileStep(i64 batch, i64 bytesPerTile, const std::string& inputName = "x") {
  Graph g;
  Builder b(g);
  int x = b.input(inputName, {batch, 8, 8, 4});
  int labels = b.input("labels", {batch}, DType::I32);
  int w = b.variable("conv_w", {8, 3, 3, 4});
  int y = b.relu(b.conv2d(x, w, Conv2dOptions::make(1, 1), "conv"), "relu");
  int flat = b.reshape(y, {batch, 8 * 8 * 8}, "flat");
  int fc = b.variable("fc_w", {8 * 8 * 8, 10});
  int logits = b.matmul(flat, fc, false, false, "logits");
  int loss = b.reduceMean(b.softmaxCrossEntropy(logits, labels, 0.0, "xent"), {0}, false, "loss");
  g.markOutput(loss);
  const GradientResult grads = appendBackward(g, loss, {w, fc});
  for (const auto& [weight, grad] : grads.grads) g.markOutput(grad);
  Target t = Target::mk2();
  t.numTiles = 32;
  t.bytesPerTile = bytesPerTile;
  return compile(g, t, CompileOptions{.deviceIterations = 1, .checkMemory = false});
}

TEST(MemoryDetail, DescribesTheFullestTilesAndTheLiveBytes) {
  const Executable exe = compileStep(8, 1 << 20);
  const MemoryDetail& d = exe.memoryDetail;
  ASSERT_FALSE(d.worstTiles.empty());
  ASSERT_EQ(d.liveBytes.size(), exe.computeSets.size());
  ASSERT_EQ(d.worstTileLiveBytes.size(), exe.computeSets.size());
  const nlohmann::json r = exe.report();
  EXPECT_EQ(d.worstTiles[0].tile, r["memory"]["max_tile"].get<int>());
  EXPECT_EQ(d.worstTiles[0].memory.total(), r["memory"]["max_tile_bytes"].get<i64>());
  for (size_t k = 1; k < d.worstTiles.size(); ++k)
    EXPECT_LE(d.worstTiles[k].memory.total(), d.worstTiles[k - 1].memory.total());
  // First fit never packs below the live bytes: the arena's not-always-live extent is at least
  // the largest sum of what is live at one compute set, on the fullest tile and overall.
  const i64 worstPeak = *std::max_element(d.worstTileLiveBytes.begin(), d.worstTileLiveBytes.end());
  EXPECT_GT(worstPeak, 0);
  EXPECT_LE(worstPeak, d.worstTiles[0].memory.peakNotAlwaysLive);
  i64 sumPeaks = 0;
  for (const TileMemory& m : exe.tileMemory) sumPeaks += m.peakNotAlwaysLive;
  EXPECT_LE(d.liveBytes[d.peakComputeSet], sumPeaks);
  EXPECT_EQ(d.liveBytes[d.peakComputeSet],
            *std::max_element(d.liveBytes.begin(), d.liveBytes.end()));
  // The occupants at the fullest tile's peak fit inside it, largest first.
  i64 occupied = d.worstTiles[0].codeAndVertexState;
  for (size_t k = 0; k < d.worstTiles[0].occupants.size(); ++k) {
    occupied += d.worstTiles[0].occupants[k].bytes;
    if (k) {
      EXPECT_LE(d.worstTiles[0].occupants[k].bytes, d.worstTiles[0].occupants[k - 1].bytes);
    }
  }
  EXPECT_LE(occupied, d.worstTiles[0].memory.total());
  ASSERT_FALSE(d.peakTensors.empty());
}

TEST(MemoryDetail, TheOverflowErrorNamesTheSameTileAndOccupants) {
  Executable report = compileStep(8, 4096);
  const TileDetail& w = report.memoryDetail.worstTiles.at(0);
  ASSERT_GT(w.memory.total(), 4096);
  Graph g = report.graph;
  try {
    (void)compile(g, report.target, CompileOptions{.deviceIterations = 1, .checkMemory = true});
    FAIL() << "expected the memory check to fail";
  } catch (const CompileError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("tile " + std::to_string(w.tile) + " needs " +
                       std::to_string(w.memory.total()) + " B"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find(w.occupants.at(0).name), std::string::npos) << msg;
    // The program planned up to the verdict goes with it, for a report of the overflow.
    ASSERT_TRUE(e.partial());
    EXPECT_EQ(e.partial()->memoryDetail.worstTiles.at(0).tile, e.tile());
    EXPECT_EQ(e.partial()->tileMemory.size(), report.tileMemory.size());
    EXPECT_NO_THROW((void)compileView(*e.partial(), cost::estimateStep(*e.partial()), "partial"));
  }
}

TEST(ReportView, FiguresAreTheCompileReportsAndTheCostModels) {
  const Executable exe = compileStep(8, 1 << 20);
  const cost::StepCost step = cost::estimateStep(exe);
  const nlohmann::json v = compileView(exe, step, "step");
  EXPECT_EQ(v["memory"]["max_tile_bytes"], exe.report()["memory"]["max_tile_bytes"]);
  EXPECT_EQ(v["memory"]["always_live"].size(), exe.tileMemory.size());
  EXPECT_EQ(v["timeline"]["sets"].size(), step.computeSets.size());
  EXPECT_DOUBLE_EQ(v["timeline"]["device_cycles"].get<double>(), step.deviceCycles);
  double compute = 0;
  for (const auto& k : v["timeline"]["by_kind"]) compute += k["compute"].get<double>();
  EXPECT_NEAR(compute, step.computeCycles, 1e-6 * step.computeCycles);
  for (const auto& s : v["timeline"]["sets"])
    if (s["compute"].get<double>() > 0) {
      EXPECT_GE(s["imbalance"].get<double>(), 1.0 - 1e-9);
    }
}

TEST(ReportPage, RejectsNoViewAndThreeViews) {
  EXPECT_THROW((void)htmlPage({}, "t"), std::invalid_argument);
  const nlohmann::json v = {{"title", "x"}};
  EXPECT_THROW((void)htmlPage({v, v, v}, "t"), std::invalid_argument);
}

TEST(ReportPage, EscapesTheEndOfTheScriptElement) {
  const std::string page = htmlPage({{{"title", "</script><b>x</b>"}}}, "t");
  EXPECT_EQ(page.find("</script><b>"), std::string::npos);
  EXPECT_NE(page.find("<\\/script><b>x<\\/b>"), std::string::npos);
}

// ---- the page in a real browser ------------------------------------------------------------
std::string chromium() {
  for (const char* c : {"/usr/bin/chromium", "/usr/bin/chromium-browser"})
    if (fs::exists(c)) return c;
  return {};
}

std::string run(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

// The DOM after the page's script ran (and, when asked, a screenshot next to the page).
std::string render(const fs::path& page, bool screenshot = false) {
  const std::string flags =
      "--headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run "
      "--virtual-time-budget=5000 --window-size=1600,2400";
  const std::string url = "file://" + fs::absolute(page).string();
  if (screenshot)
    (void)run(chromium() + " " + flags + " --screenshot=" + page.string() + ".png " + url +
              " 2>/dev/null");
  return run(chromium() + " " + flags + " --dump-dom " + url + " 2>/dev/null");
}

std::string attr(const std::string& dom, const std::string& id) {
  const std::regex re("id=\"" + id + "\" data-value=\"([^\"]*)\"");
  std::smatch m;
  return std::regex_search(dom, m, re) ? m[1].str() : std::string("<missing " + id + ">");
}

class ReportBrowser : public ::testing::Test {
 protected:
  void SetUp() override {
    if (chromium().empty())
      GTEST_SKIP() << "SKIPPED LOUDLY: no chromium (Debian's chromium; scripts/setup.sh installs "
                      "it), so the report page is not rendered";
    dir_ = fs::temp_directory_path() / ("ipu_report_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {  // IPU_REPORT_TEST_KEEP=1 keeps the pages and screenshots
    if (dir_.empty()) return;
    if (std::getenv("IPU_REPORT_TEST_KEEP"))
      std::printf("report pages kept in %s\n", dir_.c_str());
    else
      fs::remove_all(dir_);
  }
  fs::path dir_;
};

TEST_F(ReportBrowser, RendersWithoutErrorsAndShowsTheViewsFigures) {
  const Executable exe = compileStep(8, 16 << 10);  // over: some tiles overflow
  const cost::StepCost step = cost::estimateStep(exe);
  const nlohmann::json v = compileView(exe, step, "small step, batch 8");
  ASSERT_FALSE(v["memory"]["fits"].get<bool>());
  const fs::path page = dir_ / "report.html";
  writeHtmlPage(page, {v}, "a small training step");
  const std::string dom = render(page, true);
  ASSERT_NE(dom.find("data-rendered=\"1\""), std::string::npos) << dom.substr(0, 2000);
  EXPECT_NE(dom.find("<div id=\"errors\"></div>"), std::string::npos) << "script errors: " << dom;
  EXPECT_EQ(attr(dom, "v0-max-tile-bytes"),
            std::to_string(v["memory"]["max_tile_bytes"].get<i64>()));
  EXPECT_EQ(attr(dom, "v0-tiles-over"), std::to_string(v["memory"]["tiles_over"].get<int>()));
  EXPECT_EQ(attr(dom, "v0-fits"), "false");
  EXPECT_EQ(std::stod(attr(dom, "v0-step-cycles")), v["timeline"]["device_cycles"].get<double>());
  EXPECT_EQ(attr(dom, "v0-peak-live-bytes"),
            std::to_string(v["liveness"]["peak_bytes"].get<i64>()));
  // The occupants of the fullest tile, as the overflow error names them.
  EXPECT_NE(dom.find("tile " + std::to_string(exe.memoryDetail.worstTiles[0].tile) + ": "),
            std::string::npos);
  ASSERT_TRUE(fs::exists(page.string() + ".png"));
  EXPECT_GT(fs::file_size(page.string() + ".png"), 10000u);
}

TEST_F(ReportBrowser, ComparesTwoViewsAndHighlightsWhatDiffers) {
  const Executable a = compileStep(4, 1 << 20), b = compileStep(16, 1 << 20);
  const nlohmann::json va = compileView(a, cost::estimateStep(a), "batch 4");
  const nlohmann::json vb = compileView(b, cost::estimateStep(b), "batch 16");
  const fs::path page = dir_ / "compare.html";
  writeHtmlPage(page, {va, vb}, "batch 4 vs 16");
  const std::string dom = render(page);
  ASSERT_NE(dom.find("data-rendered=\"1\""), std::string::npos);
  EXPECT_NE(dom.find("<div id=\"errors\"></div>"), std::string::npos);
  EXPECT_NE(dom.find("id=\"comparison\""), std::string::npos);
  EXPECT_NE(dom.find("class=\"diff\""), std::string::npos);  // the step cycles grow with batch
  EXPECT_EQ(attr(dom, "v1-max-tile-bytes"),
            std::to_string(vb["memory"]["max_tile_bytes"].get<i64>()));
}

TEST_F(ReportBrowser, ATensorNamedLikeMarkupStaysText) {
  const Executable exe = compileStep(2, 1 << 20, "</script><i>x");
  const fs::path page = dir_ / "names.html";
  writeHtmlPage(page, {compileView(exe, cost::estimateStep(exe), "</script> view")}, "names");
  const std::string dom = render(page);
  ASSERT_NE(dom.find("data-rendered=\"1\""), std::string::npos);
  EXPECT_NE(dom.find("<div id=\"errors\"></div>"), std::string::npos);
  // Shown as text (escaped in the DOM dump), never parsed as elements.
  EXPECT_NE(dom.find("&lt;/script&gt;&lt;i&gt;x"), std::string::npos);
}

TEST(ReportPage, AnUnwritableFileIsNamed) {
  try {
    writeHtmlPage("/proc/no/such/report.html", {{{"title", "x"}}}, "t");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/proc/no/such"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ipu::report
