// Graphcore's EfficientNet pipeline split points ("block2b": MBConv stage 2, its second block,
// is the first layer of the next IPU; ../shared/docs/EFFICIENTNET_FACTS.md 4.1) as this model's
// split points, which end a stage (ipu::pipeline::PipelineOptions::splits): the tensor-name
// prefix of the block before it (torchvision's "features.2.0"; the stem "features.0" before
// block1a).
#pragma once

#include <string>
#include <vector>

#include "models/efficientnet_b4/efficientnet.h"

namespace ipu::models::efficientnet {

// "block<stage><letter>" -> the prefix of the block before it. Throws std::invalid_argument
// naming the split when it is malformed or names a block the config does not have.
std::string splitPrefix(const Config& c, const std::string& graphcoreBlock);
std::vector<std::string> splitPrefixes(const Config& c, const std::vector<std::string>& blocks);

}  // namespace ipu::models::efficientnet
