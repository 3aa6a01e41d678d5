// Graphcore's pipeline placements of BERT over the IPUs of a replica, as split points and a
// stage -> IPU map for ipu::pipeline::PipelineOptions (the facts: ../shared/docs/
// PIPELINING_FACTS.md section 2). The word embeddings are tied to the masked-LM decoder, so the
// embedding and the heads share IPU0: the heads form a last stage that goes back to IPU0.
#pragma once

#include <string>
#include <vector>

#include "models/bert_large/bert.h"

namespace ipu::models {

struct BertPlacement {
  std::vector<std::string> splits;  // tensor-name prefixes, forward order
  std::vector<int> stageIpu;        // stage -> IPU
  int ipus = 0;
  // Recomputation checkpoints (PipelineOptions::checkpoints): the output of every encoder
  // sublayer but the last of its stage, as Graphcore's BERT checkpoints its attention and FFN
  // outputs (`checkpointOutput`), so the backward recomputes one sublayer at a time. None in the
  // last stage, which is not recomputed.
  std::vector<std::string> checkpoints;
  std::string describe() const;            // "stage 0 on IPU 0: ..., stage 1 on IPU 1: ..."
  std::vector<std::string> stageContents;  // per stage, for describe()
};

// Graphcore's v1.1 `att_ffn_placement`: the embedding alone on IPU0 (stage 0); encoder stage k
// (k = 1..n) holds attention[k-1] attention and ffn[k-1] feed-forward sublayers, in the encoder's
// order (a0 f0 a1 f1 ...), on IPU k, except the last encoder stage, which goes back to IPU0 with
// the pooler and the MLM / NSP heads. POD16: attention {7,6,7,4}, ffn {6,7,6,5}. Throws
// std::invalid_argument when the counts do not add up to the layers or a boundary would put an
// FFN before its attention.
BertPlacement bertAttentionFfnPlacement(const BertConfig& c, const std::vector<int>& attention,
                                        const std::vector<int>& ffn);

// Graphcore's v1.0 / PopART `layers_per_ipu` with the embedding on IPU0 beside the first count
// of layers; the pooler and heads go back to IPU0 as a last stage. POD16: {3,7,7,7}.
BertPlacement bertLayersPerIpuPlacement(const BertConfig& c, const std::vector<int>& layersPerIpu);

}  // namespace ipu::models
