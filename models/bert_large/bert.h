// BERT pretraining (the MLPerf BERT-Large reference: masked LM + next-sentence prediction) on the
// project's graph IR, over packed sequences as Graphcore's packed format has them.
//
//   embeddings: word[input_ids] + position[position_ids] + token_type[segment_ids] -> LayerNorm
//   encoder layer (post-LN) x L:
//     attention: q, k, v dense -> [B*heads, S, d] -> softmax(q k^T / sqrt(d) + mask) v
//                -> output dense -> + input -> LayerNorm
//     FFN:       intermediate dense (4H) -> GELU (tanh form) -> output dense -> + input ->
//     LayerNorm
//   pooler:      tanh(dense(hidden at each sequence's [CLS]))
//   MLM head:    hidden at the masked slots -> dense -> GELU -> LayerNorm -> x word_embeddings^T
//                + output_bias (the decoder is tied to the word embeddings)
//   NSP head:    pooled x output_weights^T + output_bias
//   loss = MLM (sum w * nll / (sum w + 1e-5), over the whole batch) + NSP (mean over sequences)
//
// Packing: a row of the batch is a pack of up to maxPerPack sequences. Every token carries its
// sequence index (1..k, 0 = padding); attention is restricted to keys of the same sequence
// (block-diagonal mask, additive -10000 as the reference's, built in the graph from the index),
// and padding keys are masked for every query. Position ids restart at 0 per sequence. An
// unpacked batch is the special case of one sequence per row (maxPerPack 1).
//
// Layouts: activations [B*S, H] (row = pack * S + token); kernels [in, out] as TensorFlow's, so
// every variable has its TF checkpoint name and layout (`bert/encoder/layer_0/attention/self/
// query/kernel`, ...: the 398 names of the MLPerf checker). Dropout as BertConfig sets it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ipu_backend/ir/graph.h"
#include "ipu_backend/optimizers/optimizer.h"
#include "ipu_backend/precision/precision_policy.h"
#include "models/task_graph.h"

namespace ipu::models {

struct BertConfig {
  int layers = 24;
  int hidden = 1024;
  int heads = 16;
  int ffn = 4096;
  int vocab = 30522;
  int maxPositions = 512;
  int typeVocab = 2;
  double layerNormEps = 1e-12;
  // Dropout rates (the MLPerf reference trains with 0.1 and 0.1; 0 builds no dropout op):
  // after the embeddings' LayerNorm and on each sublayer's output before its residual add
  // (hidden), and on the attention probabilities (attention). Each site draws its own mask
  // (seed attribute dropoutSeed + site) from the graph input `dropout_key`.
  double hiddenDropout = 0.0;
  double attentionDropout = 0.0;
  std::int64_t dropoutSeed = 0;

  static BertConfig large();  // BERT-Large: 336,226,108 parameters
  // Tests: 2 layers x 32 hidden, 4 heads, FFN 128, vocab 64, 32 positions (the same code).
  static BertConfig small();
};

// The batch the graph is built for: `batch` rows (packs) of `seqLength` tokens, `maskedSlots`
// masked-LM slots per row and `maxPerPack` [CLS] / NSP slots per row (1 when unpacked).
struct BertShape {
  i64 batch = 1;
  i64 seqLength = 128;
  i64 maskedSlots = 20;
  i64 maxPerPack = 1;
};

struct BertGraph {
  BertConfig config;
  BertShape shape;
  Graph graph;
  // Inputs (B rows, S tokens, P masked slots, K sequences per row). Row indices into the
  // flattened [B*S] tokens are row * S + position; makeBertFeeds derives them.
  int inputIds = -1;          // i32 [B,S]
  int segmentIds = -1;        // i32 [B,S]
  int positionIds = -1;       // i32 [B,S], restart at 0 per sequence
  int sequenceIndex = -1;     // f32 [B,S], 1..K per token, 0 = padding
  int maskedRows = -1;        // i32 [B*P], token row of each masked slot
  int maskedLabels = -1;      // i32 [B*P], original token id
  int maskedWeights = -1;     // f32 [B*P], 1 = a masked token, 0 = unused slot
  int maskedLabelIndex = -1;  // i32 [B*P], slot * V + label: the label's logit (metrics)
  // i32 [2] = (step, global index of this replica's first row), only when a dropout rate is
  // > 0: the masks depend on the step and on the global row, not on the replica split.
  int dropoutKey = -1;
  int clsRows = -1;     // i32 [B*K], token row of each sequence's [CLS]
  int nspLabels = -1;   // i32 [B*K], 0 = real next sentence, 1 = random
  int nspWeights = -1;  // f32 [B*K], 1 = a sequence is there
  int lr = -1;          // f32 [] (training graphs only)
  // Outputs.
  int mlmLogits = -1;               // [B*P, V]
  int nspLogits = -1;               // [B*K, 2]
  int mlmLoss = -1;                 // []
  int nspLoss = -1;                 // []
  int loss = -1;                    // [] = mlmLoss + nspLoss
  int mlmCorrect = -1;              // [B*P]: 1 where argmax(logits) == label (ties count), else 0
  int mlmCorrectCount = -1;         // [] sum of weight * correct (per-token accuracy's numerator)
  int mlmWeightSum = -1;            // [] sum of weights (its denominator)
  std::vector<int> params;          // trainable variables, canonical (TF checkpoint) order
  std::map<int, int> grads;         // param -> gradient (after appendBertGradients / training)
  std::vector<int> optimizerState;  // after buildBertTraining
  std::vector<StateInit> optimizerInit;  // per state variable: its value before step 1
  std::vector<int> optimizerWeightOf;    // per state variable: its weight
  int lossScale = -1, lossScaleInverse = -1, overflow = -1;

  std::vector<std::string> paramNames() const;
  i64 parameterCount() const;
};

// The 398 TensorFlow variable names of a config (16 per layer + 14), canonical order.
std::vector<std::string> bertParameterNames(const BertConfig& c);
// Parameter elements of a config, from the shapes alone (no graph).
i64 bertParameterCount(const BertConfig& c);

// Forward graph; mlm/nsp logits, the losses and the metrics are marked as outputs.
// GraphError for a shape the config cannot take (sequence longer than maxPositions, ...).
BertGraph buildBertForward(const BertConfig& c, const BertShape& s);
// Appends the backward pass of `loss`; every parameter must get a gradient.
void appendBertGradients(BertGraph& bg);
// The MLPerf reference's LAMB: no weight decay and trust ratio 1 for LayerNorm and bias
// variables.
OptimizerOptions bertLambOptions(double beta1 = 0.9, double beta2 = 0.999,
                                 double weightDecay = 0.01, double epsilon = 1e-6);
// One training step (forward + backward + optimizer, "lr" input) under a precision policy.
BertGraph buildBertTraining(const BertConfig& c, const BertShape& s, const OptimizerOptions& opts,
                            const precision::PrecisionPolicy& policy = {});

// The MLPerf reference's initialisation of every variable of the graph, by name: embeddings,
// kernels and cls/seq_relationship/output_weights truncated normal (stddev 0.02, redrawn
// beyond 2 stddev, TF's truncated_normal_initializer); biases and LayerNorm beta 0, gamma 1;
// optimizer state as the optimizer asks. Deterministic for a seed on every platform
// (models/common/init_random.h).
std::map<std::string, std::vector<float>> initBertWeights(const BertGraph& bg, std::uint64_t seed,
                                                          double stddev = 0.02);

// Host view of a batch in the packed layout of datasets/bert (PackedRecord's fields, widened
// to i32), row-major [rows][...]. Unpacked data is one sequence per row with sequence index 1.
struct BertHostBatch {
  std::vector<std::int32_t> inputIds, segmentIds, positions, sequenceIndex;  // [B*S]
  std::vector<std::int32_t> maskedPositions, maskedIds;           // [B*P], position within the row
  std::vector<std::int32_t> maskedSequence;                       // [B*P], 0 = unused slot
  std::vector<std::int32_t> clsPositions, nspLabels, nspWeights;  // [B*K]
};

// The graph's input arrays, in BertGraph's input order.
struct BertFeeds {
  std::vector<std::int32_t> inputIds, segmentIds, positionIds;
  std::vector<float> sequenceIndex;
  std::vector<std::int32_t> maskedRows, maskedLabels;
  std::vector<float> maskedWeights;
  std::vector<std::int32_t> maskedLabelIndex;
  std::vector<std::int32_t> clsRows, nspLabels;
  std::vector<float> nspWeights;
};

// How the masked-LM loss and accuracy average: over the batch's masked tokens (the closed
// division, the reference) or per sequence (the open division as Graphcore ran it: each
// sequence's mean, averaged over the sequences). Per sequence is the same graph with slot
// weights 1 / (masked tokens of the slot's sequence): sum w nll / sum w is then the mean over
// sequences of each sequence's mean, and mlmCorrectCount / mlmWeightSum its accuracy.
enum class MlmAveraging { PerToken, PerSequence };

// Checks a host batch against the graph's shape and config (sizes, token / segment / position
// ids in range, masked and [CLS] positions inside the row and on a token of the sequence they
// name) and derives the feeds. std::invalid_argument naming the field, row and slot, what was
// expected and a hint.
BertFeeds makeBertFeeds(const BertGraph& bg, const BertHostBatch& batch,
                        MlmAveraging averaging = MlmAveraging::PerToken);

// The open division's per-sequence masked-LM accuracy: each sequence's correct / masked
// tokens, summed over the sequences of the batch that have masked tokens (divide the sum over
// the eval set by `sequences`).
struct PerSequenceAccuracy {
  double sum = 0;
  i64 sequences = 0;
};
PerSequenceAccuracy perSequenceAccuracy(const BertShape& s, const std::vector<float>& mlmCorrect,
                                        const std::vector<std::int32_t>& maskedSequence);

// The graph as the harness's trainer takes it: every input of the packed layout (and
// `dropout_key` when dropout is on) as data inputs, the loss, and the evaluation output
// "mlm_correct" ([B*P], 1 where the masked-LM prediction is right) that the masked-LM accuracy
// reads with `masked_lm_weights`.
inline TaskGraph taskGraph(const BertGraph& bg,
                           const precision::LossScalingConfig& lossScaling = {}) {
  TaskGraph t;
  t.graph = bg.graph;
  t.inputs = {bg.inputIds,   bg.segmentIds,   bg.positionIds,   bg.sequenceIndex,
              bg.maskedRows, bg.maskedLabels, bg.maskedWeights, bg.maskedLabelIndex,
              bg.clsRows,    bg.nspLabels,    bg.nspWeights};
  if (bg.dropoutKey >= 0) t.inputs.push_back(bg.dropoutKey);
  t.lr = bg.lr;
  t.loss = bg.loss;
  t.outputs = {{"mlm_correct", bg.mlmCorrect}};
  t.parameters = bg.params;
  t.state = bg.optimizerState;
  t.optimizer.stateVariables = bg.optimizerState;
  t.optimizer.init = bg.optimizerInit;
  t.optimizer.weightOf = bg.optimizerWeightOf;
  t.lossScale = bg.lossScale;
  t.lossScaleInverse = bg.lossScaleInverse;
  t.overflow = bg.overflow;
  t.lossScaling = lossScaling;
  return t;
}

}  // namespace ipu::models
