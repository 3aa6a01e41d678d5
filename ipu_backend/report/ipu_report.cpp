// ipu_report compare A.json B.json -o page.html: two report views (the .json files that
// run_benchmark --report writes beside each page) side by side on one page, the headline figures
// that differ by more than 1% highlighted: two micro-batches, two precisions, two placements.
#include <cstdio>
#include <string>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "ipu_backend/report/report.h"

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
    const nlohmann::json va = ipu::report::readView(a), vb = ipu::report::readView(b);
    if (title.empty())
      title =
          fmt::format("{} vs {}", va["title"].get<std::string>(), vb["title"].get<std::string>());
    ipu::report::writeHtmlPage(out, {va, vb}, title);
    std::printf("%s\n", out.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ipu_report: %s\n", e.what());
    return 1;
  }
}
