// The text IR parser: parseGraph must return a graph or throw ParseError (with a line and a
// column); a graph it accepts must print and parse back to the same text (text.h's promise
// print(parse(print(g))) == print(g)).
#include <string>
#include <string_view>

#include "ipu_backend/ir/text.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::string printed;
  try {
    printed = ipu::printGraph(ipu::parseGraph(text, "fuzz.ir"));
  } catch (const ipu::ParseError& e) {
    if (e.line() < 1 || e.column() < 1) ipu::fuzz::violated("ParseError without a position");
    return 0;
  }
  std::string again;
  try {
    again = ipu::printGraph(ipu::parseGraph(printed, "printed"));
  } catch (const ipu::ParseError& e) {
    std::fprintf(stderr, "printed text:\n%s\nerror: %s\n", printed.c_str(), e.what());
    ipu::fuzz::violated("the printed form of an accepted graph does not parse");
  }
  if (again != printed) {
    std::fprintf(stderr, "first:\n%s\nsecond:\n%s\n", printed.c_str(), again.c_str());
    ipu::fuzz::violated("print(parse(print(g))) != print(g)");
  }
  return 0;
}
