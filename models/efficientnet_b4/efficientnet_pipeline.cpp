#include "models/efficientnet_b4/efficientnet_pipeline.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

#include <fmt/format.h>

namespace ipu::models::efficientnet {

std::string splitPrefix(const Config& c, const std::string& graphcoreBlock) {
  const std::string& b = graphcoreBlock;
  const bool wellFormed = b.size() == 7 && b.compare(0, 5, "block") == 0 &&
                          std::isdigit(static_cast<unsigned char>(b[5])) && b[6] >= 'a' &&
                          b[6] <= 'z';
  if (!wellFormed)
    throw std::invalid_argument(fmt::format(
        "EfficientNet split '{}': expected Graphcore's block name, 'block' + MBConv stage (1..{}) "
        "+ block letter, e.g. 'block2b'",
        b, c.stages.size()));
  const int stage = b[5] - '0';
  const int index = b[6] - 'a';
  int layers = -1;
  std::string before = "features.0";  // the stem
  for (const BlockSpec& s : blocks(c)) {
    if (s.stage == stage) layers = std::max(layers, s.index + 1);
    if (s.stage < stage || (s.stage == stage && s.index < index))
      before = s.prefix.substr(0, s.prefix.size() - 1);  // "features.2.0." without the dot
  }
  if (layers < 0 || index >= layers)
    throw std::invalid_argument(fmt::format(
        "EfficientNet split '{}' names no block: {} (hint: the MBConv stages are 1..{})", b,
        layers < 0 ? fmt::format("the model has no stage {}", stage)
                   : fmt::format("stage {} has {} blocks (a..{})", stage, layers,
                                 static_cast<char>('a' + layers - 1)),
        c.stages.size()));
  return before;
}

std::vector<std::string> splitPrefixes(const Config& c, const std::vector<std::string>& blocks) {
  std::vector<std::string> out;
  for (const std::string& b : blocks) out.push_back(splitPrefix(c, b));
  return out;
}

}  // namespace ipu::models::efficientnet
