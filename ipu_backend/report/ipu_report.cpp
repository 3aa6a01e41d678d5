// ipu_report compare A.json B.json -o page.html: two report views (the .json files that
// run_benchmark --report writes beside each page) side by side on one page, the headline figures
// that differ by more than 1% highlighted: two micro-batches, two precisions, two placements.
#include <cstdio>
#include <fstream>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ipu_backend/report/report.h"

namespace {

nlohmann::json readView(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(fmt::format("cannot open the view {}", path));
  nlohmann::json v;
  try {
    in >> v;
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(fmt::format(
        "{} is not a report view ({}); use the .json that run_benchmark --report writes "
        "beside each page",
        path, e.what()));
  }
  for (const char* key : {"title", "memory", "liveness", "timeline", "summary"})
    if (!v.is_object() || !v.contains(key))
      throw std::runtime_error(fmt::format(
          "{} is not a report view: no \"{}\" (use the .json that run_benchmark --report "
          "writes beside each page)",
          path, key));
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Report pages of compiled IPU programs"};
  app.require_subcommand(1);
  CLI::App* compare = app.add_subcommand("compare", "two views side by side on one page");
  std::string a, b, out, title;
  compare->add_option("a", a, "the first view (.json)")->required();
  compare->add_option("b", b, "the second view (.json)")->required();
  compare->add_option("-o,--out", out, "the page to write (.html)")->required();
  compare->add_option("--title", title, "the page's title (default: A vs B)");
  CLI11_PARSE(app, argc, argv);
  try {
    const nlohmann::json va = readView(a), vb = readView(b);
    if (title.empty())
      title = fmt::format("{} vs {}", va["title"].get<std::string>(), vb["title"].get<std::string>());
    ipu::report::writeHtmlPage(out, {va, vb}, title);
    std::printf("%s\n", out.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ipu_report: %s\n", e.what());
    return 1;
  }
}
