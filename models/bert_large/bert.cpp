#include "models/bert_large/bert.h"

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "ipu_backend/compiler/autodiff.h"
#include "ipu_backend/compiler/mixed_precision.h"
#include "ipu_backend/ir/builder.h"
#include "ipu_backend/ops/op_info.h"
#include "models/common/gradients.h"
#include "models/common/init_random.h"

namespace ipu::models {

BertConfig BertConfig::large() {
  return BertConfig{};
}

BertConfig BertConfig::small() {
  BertConfig c;
  c.layers = 2;
  c.hidden = 32;
  c.heads = 4;
  c.ffn = 128;
  c.vocab = 64;
  c.maxPositions = 32;
  return c;
}

namespace {

// The reference's additive attention mask value ((1 - mask) * -10000).
constexpr double kMaskValue = 10000.0;

std::string layerPrefix(int l) {
  return fmt::format("bert/encoder/layer_{}/", l);
}

// (name, shape) of every parameter, canonical order: the order the builder declares them.
std::vector<std::pair<std::string, Shape>> parameterSpecs(const BertConfig& c) {
  const i64 h = c.hidden, f = c.ffn;
  std::vector<std::pair<std::string, Shape>> v = {
      {"bert/embeddings/word_embeddings", {c.vocab, h}},
      {"bert/embeddings/position_embeddings", {c.maxPositions, h}},
      {"bert/embeddings/token_type_embeddings", {c.typeVocab, h}},
      {"bert/embeddings/LayerNorm/gamma", {h}},
      {"bert/embeddings/LayerNorm/beta", {h}},
  };
  for (int l = 0; l < c.layers; ++l) {
    const std::string p = layerPrefix(l);
    for (const char* qkv : {"query", "key", "value"}) {
      v.push_back({fmt::format("{}attention/self/{}/kernel", p, qkv), {h, h}});
      v.push_back({fmt::format("{}attention/self/{}/bias", p, qkv), {h}});
    }
    v.push_back({p + "attention/output/dense/kernel", {h, h}});
    v.push_back({p + "attention/output/dense/bias", {h}});
    v.push_back({p + "attention/output/LayerNorm/gamma", {h}});
    v.push_back({p + "attention/output/LayerNorm/beta", {h}});
    v.push_back({p + "intermediate/dense/kernel", {h, f}});
    v.push_back({p + "intermediate/dense/bias", {f}});
    v.push_back({p + "output/dense/kernel", {f, h}});
    v.push_back({p + "output/dense/bias", {h}});
    v.push_back({p + "output/LayerNorm/gamma", {h}});
    v.push_back({p + "output/LayerNorm/beta", {h}});
  }
  v.push_back({"bert/pooler/dense/kernel", {h, h}});
  v.push_back({"bert/pooler/dense/bias", {h}});
  v.push_back({"cls/predictions/output_bias", {c.vocab}});
  v.push_back({"cls/predictions/transform/dense/kernel", {h, h}});
  v.push_back({"cls/predictions/transform/dense/bias", {h}});
  v.push_back({"cls/predictions/transform/LayerNorm/gamma", {h}});
  v.push_back({"cls/predictions/transform/LayerNorm/beta", {h}});
  v.push_back({"cls/seq_relationship/output_weights", {2, h}});
  v.push_back({"cls/seq_relationship/output_bias", {2}});
  return v;
}

void checkConfig(const BertConfig& c, const BertShape& s) {
  auto bad = [](const std::string& what) { throw GraphError("bert: " + what); };
  if (c.layers < 1 || c.hidden < 1 || c.heads < 1 || c.ffn < 1 || c.vocab < 1 ||
      c.maxPositions < 1 || c.typeVocab < 1)
    bad("every config size must be >= 1");
  if (c.hiddenDropout < 0 || c.hiddenDropout >= 1 || c.attentionDropout < 0 ||
      c.attentionDropout >= 1)
    bad(fmt::format("dropout rates must be in [0, 1), got hidden {} and attention {}",
                    c.hiddenDropout, c.attentionDropout));
  if (c.hidden % c.heads != 0)
    bad(fmt::format("hidden {} is not a multiple of heads {}", c.hidden, c.heads));
  if (s.batch < 1 || s.seqLength < 1 || s.maskedSlots < 1 || s.maxPerPack < 1)
    bad(
        fmt::format("batch {}, sequence length {}, masked slots {} and sequences per row {} "
                    "must all be >= 1",
                    s.batch, s.seqLength, s.maskedSlots, s.maxPerPack));
  if (s.seqLength > c.maxPositions)
    bad(
        fmt::format("sequence length {} exceeds the model's {} positions (max_position_"
                    "embeddings); use a shorter sequence length or a larger config",
                    s.seqLength, c.maxPositions));
  if (s.maskedSlots > s.seqLength || s.maxPerPack > s.seqLength)
    bad(fmt::format("{} masked slots / {} sequences per row do not fit {} tokens", s.maskedSlots,
                    s.maxPerPack, s.seqLength));
}

class BertBuilder {
 public:
  explicit BertBuilder(BertGraph& bg) : bg_(bg), c_(bg.config), g_(bg.graph), b_(bg.graph) {}

  void build() {
    const BertShape& s = bg_.shape;
    const i64 B = s.batch, S = s.seqLength, P = s.maskedSlots, K = s.maxPerPack;
    const i64 H = c_.hidden;
    bg_.inputIds = b_.input("input_ids", {B, S}, DType::I32);
    bg_.segmentIds = b_.input("segment_ids", {B, S}, DType::I32);
    bg_.positionIds = b_.input("position_ids", {B, S}, DType::I32);
    bg_.sequenceIndex = b_.input("sequence_index", {B, S});
    bg_.maskedRows = b_.input("masked_lm_rows", {B * P}, DType::I32);
    bg_.maskedLabels = b_.input("masked_lm_ids", {B * P}, DType::I32);
    bg_.maskedWeights = b_.input("masked_lm_weights", {B * P});
    bg_.maskedLabelIndex = b_.input("masked_lm_label_index", {B * P}, DType::I32);
    bg_.clsRows = b_.input("cls_rows", {B * K}, DType::I32);
    bg_.nspLabels = b_.input("next_sentence_labels", {B * K}, DType::I32);
    bg_.nspWeights = b_.input("next_sentence_weights", {B * K});
    if (c_.hiddenDropout > 0 || c_.attentionDropout > 0)
      bg_.dropoutKey = b_.input("dropout_key", {2}, DType::I32);

    for (const auto& [name, shape] : parameterSpecs(c_)) {
      const int t = b_.variable(name, shape);
      bg_.params.push_back(t);
      p_[name] = t;
    }

    // Embeddings -> [B*S, H].
    int x = b_.add(gather(p("bert/embeddings/word_embeddings"), bg_.inputIds, "word"),
                   gather(p("bert/embeddings/position_embeddings"), bg_.positionIds, "position"),
                   "bert/embeddings/sum_wp");
    x = b_.add(x, gather(p("bert/embeddings/token_type_embeddings"), bg_.segmentIds, "type"),
               "bert/embeddings/sum");
    x = b_.reshape(x, {B * S, H}, "bert/embeddings/flat");
    x = layerNorm(x, "bert/embeddings/LayerNorm");
    x = dropout(x, c_.hiddenDropout, "bert/embeddings/dropout");

    const int mask = attentionMask();
    for (int l = 0; l < c_.layers; ++l) x = encoderLayer(x, mask, layerPrefix(l));

    // Heads.
    const int cls = ops::add(g_, "gather", {x, bg_.clsRows}, {}, {"bert/pooler/cls"})[0];
    int pooled = b_.dense(cls, p("bert/pooler/dense/kernel"), p("bert/pooler/dense/bias"),
                          "bert/pooler/dense");
    pooled = b_.unary("tanh", pooled, "bert/pooler/tanh");
    bg_.nspLogits = b_.add(b_.matmul(pooled, p("cls/seq_relationship/output_weights"), false, true,
                                     "cls/seq_relationship/matmul"),
                           p("cls/seq_relationship/output_bias"), "cls/seq_relationship/logits");

    int m = ops::add(g_, "gather", {x, bg_.maskedRows}, {}, {"cls/predictions/gathered"})[0];
    m = b_.dense(m, p("cls/predictions/transform/dense/kernel"),
                 p("cls/predictions/transform/dense/bias"), "cls/predictions/transform/dense");
    m = gelu(m, "cls/predictions/transform/gelu");
    m = layerNorm(m, "cls/predictions/transform/LayerNorm");
    bg_.mlmLogits = b_.add(
        b_.matmul(m, p("bert/embeddings/word_embeddings"), false, true, "cls/predictions/decoder"),
        p("cls/predictions/output_bias"), "cls/predictions/logits");

    losses();
    metrics();
    for (int t : {bg_.mlmLogits, bg_.nspLogits, bg_.mlmLoss, bg_.nspLoss, bg_.loss, bg_.mlmCorrect,
                  bg_.mlmCorrectCount, bg_.mlmWeightSum})
      g_.markOutput(t);
  }

 private:
  int p(const std::string& name) const { return p_.at(name); }

  int gather(int table, int ids, const std::string& what) {
    return ops::add(g_, "gather", {table, ids}, {}, {"bert/embeddings/" + what})[0];
  }

  int layerNorm(int x, const std::string& scope) {
    return ops::add(g_, "layer_norm", {x, p(scope + "/gamma"), p(scope + "/beta")},
                    Attrs{{"eps", c_.layerNormEps}},
                    {scope + "/y", scope + "/mean", scope + "/rstd"})[0];
  }

  // x with a leading row (pack) dimension, so that the key's offset counts packs whatever
  // the tensor's layout: [B*S, H] goes through [B, S, H].
  int dropout(int x, double rate, const std::string& name) {
    if (rate <= 0) return x;
    const Shape shape = g_.tensor(x).shape;
    const i64 B = bg_.shape.batch;
    int rows = shape[0] == B ? x : b_.reshape(x, {B, numElements(shape) / B}, name + "/rows");
    rows = ops::add(g_, "dropout", {rows, bg_.dropoutKey},
                    Attrs{{"rate", rate},
                          {"seed", c_.dropoutSeed + dropoutSites_++},
                          {"mode", std::string("element")}},
                    {name})[0];
    return shape[0] == B ? rows : b_.reshape(rows, shape, name + "/flat");
  }

  int gelu(int x, const std::string& name) {
    return ops::add(g_, "gelu", {x}, Attrs{{"approximate", std::string("tanh")}}, {name})[0];
  }

  int dense(int x, const std::string& scope) {
    return b_.dense(x, p(scope + "/kernel"), p(scope + "/bias"), scope);
  }

  // [B,1,S,S]: 0 where query i and key j are tokens of one sequence, -10000 elsewhere (other
  // sequences of the pack, padding keys). keep = (s_i == s_j) * (s_j > 0), from the integer
  // valued sequence index with sub / mul / min only: (s_i - s_j)^2 >= 1 unless equal.
  int attentionMask() {
    const i64 B = bg_.shape.batch, S = bg_.shape.seqLength;
    const std::string n = "bert/attention_mask/";
    const int qi = b_.reshape(bg_.sequenceIndex, {B, S, 1}, n + "query");
    const int kj = b_.reshape(bg_.sequenceIndex, {B, 1, S}, n + "key");
    const int one = b_.constant({}, 1.0, DType::F32, n + "one");
    const int d = b_.sub(qi, kj, n + "diff");
    const int differ = b_.binary("min", b_.mul(d, d, n + "diff2"), one, n + "differ");
    const int same = b_.sub(one, differ, n + "same");
    const int keyValid = b_.binary("min", kj, one, n + "key_valid");
    const int keep = b_.mul(same, keyValid, n + "keep");
    const int add = b_.scale(b_.sub(keep, one, n + "keep_minus_one"), kMaskValue, n + "additive");
    return b_.reshape(add, {B, 1, S, S}, n + "mask");
  }

  int encoderLayer(int x, int mask, const std::string& pre) {
    const i64 B = bg_.shape.batch, S = bg_.shape.seqLength, H = c_.hidden, nh = c_.heads;
    const i64 d = H / nh;
    const std::string a = pre + "attention/self/";
    auto heads = [&](const std::string& which) {
      int t = dense(x, a + which);
      t = b_.reshape(t, {B, S, nh, d}, a + which + "/split");
      t = b_.transpose(t, {0, 2, 1, 3}, a + which + "/heads");
      return b_.reshape(t, {B * nh, S, d}, a + which + "/batched");
    };
    const int q = heads("query"), k = heads("key"), v = heads("value");
    int scores = b_.matmul(q, k, false, true, a + "scores");
    scores = b_.scale(scores, 1.0 / std::sqrt(static_cast<double>(d)), a + "scaled");
    scores = b_.reshape(scores, {B, nh, S, S}, a + "scores4");
    int probs = ops::add(g_, "masked_softmax", {scores, mask}, {}, {a + "probs"})[0];
    probs = dropout(probs, c_.attentionDropout, a + "dropout");
    probs = b_.reshape(probs, {B * nh, S, S}, a + "probs3");
    int ctx = b_.matmul(probs, v, false, false, a + "context");
    ctx = b_.reshape(ctx, {B, nh, S, d}, a + "context4");
    ctx = b_.transpose(ctx, {0, 2, 1, 3}, a + "context_t");
    ctx = b_.reshape(ctx, {B * S, H}, a + "context_flat");

    const std::string ao = pre + "attention/output/";
    int y = dropout(dense(ctx, ao + "dense"), c_.hiddenDropout, ao + "dropout");
    y = layerNorm(b_.add(y, x, ao + "residual"), ao + "LayerNorm");

    int f = gelu(dense(y, pre + "intermediate/dense"), pre + "intermediate/gelu");
    f = dropout(dense(f, pre + "output/dense"), c_.hiddenDropout, pre + "output/dropout");
    return layerNorm(b_.add(f, y, pre + "output/residual"), pre + "output/LayerNorm");
  }

  void losses() {
    const int terms =
        ops::add(g_, "masked_lm_loss", {bg_.mlmLogits, bg_.maskedLabels, bg_.maskedWeights}, {},
                 {"loss/mlm_terms"})[0];
    bg_.mlmLoss = b_.reduceSum(terms, {0}, false, "loss/mlm");
    const int ce = b_.softmaxCrossEntropy(bg_.nspLogits, bg_.nspLabels, 0.0, "loss/nsp_ce");
    const int weighted = b_.mul(ce, bg_.nspWeights, "loss/nsp_weighted");
    bg_.nspLoss = b_.binary("div", b_.reduceSum(weighted, {0}, false, "loss/nsp_sum"),
                            b_.reduceSum(bg_.nspWeights, {0}, false, "loss/nsp_count"), "loss/nsp");
    bg_.loss = b_.add(bg_.mlmLoss, bg_.nspLoss, "loss");
  }

  // correct_p = 1 exactly when the label's logit equals the row maximum (x - y == 0 iff
  // x == y in IEEE arithmetic): the difference, scaled twice by 1e30, is >= 1 for any non-zero
  // f32 value (the smallest subnormal, 1.4e-45, times 1e60) and inf for any non-zero f16 one
  // (under a 16-bit policy), 0 for equal logits; 1 - min(that, 1) is the 0/1 flag.
  void metrics() {
    const i64 rows = bg_.shape.batch * bg_.shape.maskedSlots;
    const i64 V = c_.vocab;
    const std::string n = "metrics/";
    const int flat = b_.reshape(bg_.mlmLogits, {rows * V, 1}, n + "logits_flat");
    int labelLogit =
        ops::add(g_, "gather", {flat, bg_.maskedLabelIndex}, {}, {n + "label_logit"})[0];
    labelLogit = b_.reshape(labelLogit, {rows}, n + "label_logit1");
    const int mx = b_.reduce("max", bg_.mlmLogits, {1}, false, n + "max_logit");
    int gap = b_.sub(mx, labelLogit, n + "gap");
    gap = b_.scale(b_.scale(gap, 1e30, n + "gap_big"), 1e30, n + "gap_huge");
    const int one = b_.constant({}, 1.0, DType::F32, n + "one");
    bg_.mlmCorrect = b_.sub(one, b_.binary("min", gap, one, n + "wrong"), n + "mlm_correct");
    const int w = bg_.maskedWeights;
    bg_.mlmCorrectCount = b_.reduceSum(b_.mul(bg_.mlmCorrect, w, n + "weighted_correct"), {0},
                                       false, n + "mlm_correct_count");
    bg_.mlmWeightSum = b_.reduceSum(w, {0}, false, n + "mlm_weight_sum");
  }

  BertGraph& bg_;
  const BertConfig& c_;
  Graph& g_;
  Builder b_;
  std::map<std::string, int> p_;
  std::int64_t dropoutSites_ = 0;
};

}  // namespace

std::vector<std::string> BertGraph::paramNames() const {
  std::vector<std::string> names;
  names.reserve(params.size());
  for (int t : params) names.push_back(graph.tensor(t).name);
  return names;
}

i64 BertGraph::parameterCount() const {
  i64 n = 0;
  for (int t : params) n += graph.tensor(t).elements();
  return n;
}

std::vector<std::string> bertParameterNames(const BertConfig& c) {
  std::vector<std::string> names;
  for (auto& [name, shape] : parameterSpecs(c)) names.push_back(name);
  return names;
}

i64 bertParameterCount(const BertConfig& c) {
  i64 n = 0;
  for (auto& [name, shape] : parameterSpecs(c)) n += numElements(shape);
  return n;
}

BertGraph buildBertForward(const BertConfig& c, const BertShape& s) {
  checkConfig(c, s);
  BertGraph bg;
  bg.config = c;
  bg.shape = s;
  bg.graph = Graph("bert_pretraining");
  BertBuilder(bg).build();
  return bg;
}

void appendBertGradients(BertGraph& bg) {
  GradientResult r = appendBackward(bg.graph, bg.loss, bg.params);
  requireGradients(bg.graph, r.grads, bg.params, "bert");
  bg.grads = std::move(r.grads);
}

OptimizerOptions bertLambOptions(double beta1, double beta2, double weightDecay, double epsilon) {
  OptimizerOptions o;
  o.kind = "lamb";
  o.beta1 = beta1;
  o.beta2 = beta2;
  o.weightDecay = weightDecay;
  o.epsilon = epsilon;
  o.decay = [](const Tensor& t) {
    const std::string& n = t.name;
    return n.find("LayerNorm") == std::string::npos && n.find("layer_norm") == std::string::npos &&
           n.find("bias") == std::string::npos;
  };
  return o;
}

BertGraph buildBertTraining(const BertConfig& c, const BertShape& s, const OptimizerOptions& opts,
                            const precision::PrecisionPolicy& policy) {
  BertGraph fwd = buildBertForward(c, s);
  PrecisionRewrite rw = applyPrecision(fwd.graph, policy);
  BertGraph bg;
  bg.config = fwd.config;
  bg.shape = fwd.shape;
  for (auto [dst, src] : {std::pair{&bg.inputIds, fwd.inputIds},
                          {&bg.segmentIds, fwd.segmentIds},
                          {&bg.positionIds, fwd.positionIds},
                          {&bg.sequenceIndex, fwd.sequenceIndex},
                          {&bg.maskedRows, fwd.maskedRows},
                          {&bg.maskedLabels, fwd.maskedLabels},
                          {&bg.maskedWeights, fwd.maskedWeights},
                          {&bg.maskedLabelIndex, fwd.maskedLabelIndex},
                          {&bg.clsRows, fwd.clsRows},
                          {&bg.nspLabels, fwd.nspLabels},
                          {&bg.nspWeights, fwd.nspWeights},
                          {&bg.dropoutKey, fwd.dropoutKey},
                          {&bg.mlmLogits, fwd.mlmLogits},
                          {&bg.nspLogits, fwd.nspLogits},
                          {&bg.mlmLoss, fwd.mlmLoss},
                          {&bg.nspLoss, fwd.nspLoss},
                          {&bg.loss, fwd.loss},
                          {&bg.mlmCorrect, fwd.mlmCorrect},
                          {&bg.mlmCorrectCount, fwd.mlmCorrectCount},
                          {&bg.mlmWeightSum, fwd.mlmWeightSum}})
    *dst = rw.map(src);
  for (int p : fwd.params) bg.params.push_back(rw.map(p));
  bg.graph = std::move(rw.graph);
  bg.lr = bg.graph.addInput("lr", {}, DType::F32);
  TrainingStepTensors step = appendTrainingStep(bg.graph, bg.loss, bg.params, bg.lr, opts, policy);
  requireGradients(bg.graph, step.grads, bg.params, "bert");
  bg.grads = std::move(step.grads);
  bg.optimizerState = step.optimizer.stateVariables;
  bg.optimizerInit = step.optimizer.init;
  bg.optimizerWeightOf = step.optimizer.weightOf;
  bg.lossScale = step.lossScale;
  bg.lossScaleInverse = step.lossScaleInverse;
  bg.overflow = step.overflow;
  return bg;
}

std::map<std::string, std::vector<float>> initBertWeights(const BertGraph& bg, std::uint64_t seed,
                                                          double stddev) {
  std::map<std::string, std::vector<float>> out;
  for (int p : bg.params) {
    const Tensor& t = bg.graph.tensor(p);
    const std::string& n = t.name;
    std::vector<float> v;
    if (n.ends_with("/gamma")) {
      v.assign(t.elements(), 1.0f);
    } else if (n.ends_with("/beta") || n.ends_with("bias")) {
      v.assign(t.elements(), 0.0f);
    } else {  // embeddings, kernels, output_weights
      std::mt19937_64 rng = tensorRng(seed, n);
      v = truncatedNormal(rng, t.elements(), stddev);
    }
    out.emplace(n, std::move(v));
  }
  for (size_t i = 0; i < bg.optimizerState.size(); ++i) {
    const Tensor& t = bg.graph.tensor(bg.optimizerState[i]);
    switch (bg.optimizerInit[i]) {
      case StateInit::Zero:
        out.emplace(t.name, std::vector<float>(t.elements(), 0.0f));
        break;
      case StateInit::One:
        out.emplace(t.name, std::vector<float>(t.elements(), 1.0f));
        break;
      case StateInit::Weight:
        out.emplace(t.name, out.at(bg.graph.tensor(bg.optimizerWeightOf[i]).name));
        break;
    }
  }
  for (const Tensor& t : bg.graph.tensors())
    if (t.kind == TensorKind::Variable && !out.count(t.name))
      throw GraphError(fmt::format("bert: no initial value for variable '{}'", t.name));
  return out;
}

namespace {

[[noreturn]] void badBatch(const std::string& field, i64 row, i64 slot, const std::string& what,
                           const std::string& hint) {
  throw std::invalid_argument(
      fmt::format("bert batch: {} of row {} slot {}: {} ({})", field, row, slot, what, hint));
}

void checkSize(const std::string& field, size_t got, i64 want, const std::string& dims) {
  if (static_cast<i64>(got) != want)
    throw std::invalid_argument(fmt::format(
        "bert batch: {} has {} values, the graph takes {} ({}); was the data made for another "
        "batch, sequence length or packing layout?",
        field, got, want, dims));
}

}  // namespace

BertFeeds makeBertFeeds(const BertGraph& bg, const BertHostBatch& in, MlmAveraging averaging) {
  const BertShape& s = bg.shape;
  const BertConfig& c = bg.config;
  const i64 B = s.batch, S = s.seqLength, P = s.maskedSlots, K = s.maxPerPack;
  const std::string tok = fmt::format("[{} rows x {} tokens]", B, S);
  const std::string msk = fmt::format("[{} rows x {} masked slots]", B, P);
  const std::string seq = fmt::format("[{} rows x {} sequences]", B, K);
  checkSize("input_ids", in.inputIds.size(), B * S, tok);
  checkSize("segment_ids", in.segmentIds.size(), B * S, tok);
  checkSize("positions", in.positions.size(), B * S, tok);
  checkSize("sequence_index", in.sequenceIndex.size(), B * S, tok);
  checkSize("masked_lm_positions", in.maskedPositions.size(), B * P, msk);
  checkSize("masked_lm_ids", in.maskedIds.size(), B * P, msk);
  checkSize("masked_lm_sequence", in.maskedSequence.size(), B * P, msk);
  checkSize("cls_positions", in.clsPositions.size(), B * K, seq);
  checkSize("next_sentence_labels", in.nspLabels.size(), B * K, seq);
  checkSize("next_sentence_weights", in.nspWeights.size(), B * K, seq);

  BertFeeds f;
  f.inputIds = in.inputIds;
  f.segmentIds = in.segmentIds;
  f.positionIds = in.positions;
  f.sequenceIndex.resize(B * S);
  for (i64 r = 0; r < B; ++r) {
    for (i64 t = 0; t < S; ++t) {
      const i64 i = r * S + t;
      if (in.inputIds[i] < 0 || in.inputIds[i] >= c.vocab)
        badBatch("input_ids", r, t,
                 fmt::format("token id {} outside [0, {})", in.inputIds[i], c.vocab),
                 "the data was tokenized with another vocabulary than the model's");
      if (in.segmentIds[i] < 0 || in.segmentIds[i] >= c.typeVocab)
        badBatch("segment_ids", r, t,
                 fmt::format("segment id {} outside [0, {})", in.segmentIds[i], c.typeVocab),
                 "segment ids are 0 for [CLS] A [SEP] and 1 for B [SEP]");
      if (in.positions[i] < 0 || in.positions[i] >= c.maxPositions)
        badBatch("positions", r, t,
                 fmt::format("position {} outside [0, {})", in.positions[i], c.maxPositions),
                 "a sequence longer than the model's max_position_embeddings");
      if (in.sequenceIndex[i] < 0 || in.sequenceIndex[i] > K)
        badBatch("sequence_index", r, t,
                 fmt::format("sequence index {} outside [0, {}]", in.sequenceIndex[i], K),
                 "the data packs more sequences per row than the graph was built for");
      f.sequenceIndex[i] = static_cast<float>(in.sequenceIndex[i]);
    }
  }
  f.maskedRows.resize(B * P);
  f.maskedLabels = in.maskedIds;
  f.maskedWeights.resize(B * P);
  f.maskedLabelIndex.resize(B * P);
  for (i64 r = 0; r < B; ++r) {
    for (i64 p = 0; p < P; ++p) {
      const i64 i = r * P + p;
      const std::int32_t pos = in.maskedPositions[i], sq = in.maskedSequence[i],
                         id = in.maskedIds[i];
      if (sq < 0 || sq > K)
        badBatch("masked_lm_sequence", r, p,
                 fmt::format("sequence index {} outside [0, {}]", sq, K), "0 marks an unused slot");
      if (pos < 0 || pos >= S)
        badBatch("masked_lm_positions", r, p, fmt::format("position {} outside [0, {})", pos, S),
                 "masked positions index the row's tokens");
      if (id < 0 || id >= c.vocab)
        badBatch("masked_lm_ids", r, p, fmt::format("label {} outside [0, {})", id, c.vocab),
                 "the data was tokenized with another vocabulary than the model's");
      if (sq > 0 && in.sequenceIndex[r * S + pos] != sq)
        badBatch("masked_lm_positions", r, p,
                 fmt::format("position {} belongs to sequence {}, the slot says {}", pos,
                             in.sequenceIndex[r * S + pos], sq),
                 "masked slots must point at a token of their own sequence");
      f.maskedRows[i] = static_cast<std::int32_t>(r * S + pos);
      f.maskedWeights[i] = sq > 0 ? 1.0f : 0.0f;
      f.maskedLabelIndex[i] = static_cast<std::int32_t>(i * c.vocab + id);
    }
    if (averaging == MlmAveraging::PerSequence) {
      std::vector<float> count(K + 1, 0.0f);
      for (i64 p = 0; p < P; ++p) count[in.maskedSequence[r * P + p]] += 1.0f;
      for (i64 p = 0; p < P; ++p)
        if (const std::int32_t sq = in.maskedSequence[r * P + p]; sq > 0)
          f.maskedWeights[r * P + p] = 1.0f / count[sq];
    }
  }
  f.clsRows.resize(B * K);
  f.nspLabels = in.nspLabels;
  f.nspWeights.resize(B * K);
  for (i64 r = 0; r < B; ++r) {
    i64 present = 0;
    for (i64 k = 0; k < K; ++k) {
      const i64 i = r * K + k;
      const std::int32_t pos = in.clsPositions[i];
      if (in.nspWeights[i] != 0 && in.nspWeights[i] != 1)
        badBatch("next_sentence_weights", r, k, fmt::format("weight {}", in.nspWeights[i]),
                 "1 where a sequence is there, else 0");
      if (in.nspLabels[i] < 0 || in.nspLabels[i] > 1)
        badBatch("next_sentence_labels", r, k, fmt::format("label {}", in.nspLabels[i]),
                 "0 = real next sentence, 1 = random");
      if (pos < 0 || pos >= S)
        badBatch("cls_positions", r, k, fmt::format("position {} outside [0, {})", pos, S),
                 "[CLS] positions index the row's tokens");
      if (in.nspWeights[i] == 1 && in.sequenceIndex[r * S + pos] != k + 1)
        badBatch("cls_positions", r, k,
                 fmt::format("position {} belongs to sequence {}, expected {}", pos,
                             in.sequenceIndex[r * S + pos], k + 1),
                 "each sequence's [CLS] slot must point at its own first token");
      f.clsRows[i] = static_cast<std::int32_t>(r * S + pos);
      f.nspWeights[i] = static_cast<float>(in.nspWeights[i]);
      present += in.nspWeights[i];
    }
    if (present == 0)
      badBatch("next_sentence_weights", r, 0, "no sequence in the row",
               "every row of a batch must hold at least one sequence");
  }
  return f;
}

PerSequenceAccuracy perSequenceAccuracy(const BertShape& s, const std::vector<float>& correct,
                                        const std::vector<std::int32_t>& maskedSequence) {
  const i64 P = s.maskedSlots, K = s.maxPerPack;
  if (static_cast<i64>(correct.size()) != s.batch * P || correct.size() != maskedSequence.size())
    throw std::invalid_argument(fmt::format(
        "perSequenceAccuracy: {} correct flags and {} slot sequence indices for {} x {} slots",
        correct.size(), maskedSequence.size(), s.batch, P));
  PerSequenceAccuracy acc;
  for (i64 r = 0; r < s.batch; ++r) {
    std::vector<double> hits(K + 1, 0.0), count(K + 1, 0.0);
    for (i64 p = 0; p < P; ++p) {
      const std::int32_t sq = maskedSequence[r * P + p];
      if (sq <= 0 || sq > K) continue;
      hits[sq] += correct[r * P + p];
      count[sq] += 1;
    }
    for (i64 k = 1; k <= K; ++k)
      if (count[k] > 0) acc.sum += hits[k] / count[k], ++acc.sequences;
  }
  return acc;
}

}  // namespace ipu::models
