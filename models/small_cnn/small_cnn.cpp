#include "models/small_cnn/small_cnn.h"

#include <cmath>
#include <random>

#include "ipu_backend/compiler/mixed_precision.h"
#include "ipu_backend/ir/builder.h"

namespace ipu::models {
namespace {

using ipu::Builder;
using ipu::DType;
using ipu::Graph;
using ipu::i64;

struct Built {
  int images, labels, logits, loss;
  std::vector<int> params;
};

// Shared forward: `train` selects batch statistics (and EMA updates) or running statistics.
Built forward(Graph& g, const SmallCnnConfig& c, i64 n, bool train) {
  Builder b(g);
  Built r;
  r.images = b.input("images", {n, c.height, c.width, c.channels});
  r.labels = b.input("labels", {n}, DType::I32);
  int x = r.images;
  i64 inC = c.channels, h = c.height, w = c.width;
  int stage = 1;
  for (i64 outC : {c.conv1Channels, c.conv2Channels}) {
    std::string p = "conv" + std::to_string(stage);
    int wt = b.variable(p + "_weight", {outC, 3, 3, inC});
    std::string bn = "bn" + std::to_string(stage);
    int gamma = b.variable(bn + "_gamma", {outC}), beta = b.variable(bn + "_beta", {outC});
    int rmean = b.variable(bn + "_running_mean", {outC});
    int rvar = b.variable(bn + "_running_var", {outC});
    r.params.insert(r.params.end(), {wt, gamma, beta});
    int y = b.conv2d(x, wt, ipu::Conv2dOptions::make(1, 1), p);
    if (train) {
      auto o = b.batchNormTrainAcrossReplicas(y, gamma, beta, c.bnEps, c.bnSpanReplicas, bn);
      double rows = static_cast<double>(n * h * w * c.bnSpanReplicas);
      g.addOp(ipu::OpKind::EmaUpdate, {rmean, o.mean}, ipu::Attrs{{"momentum", c.bnMomentum}});
      g.addOp(ipu::OpKind::EmaUpdate, {rvar, o.var},
              ipu::Attrs{{"momentum", c.bnMomentum}, {"scale", rows / (rows - 1.0)}});
      y = o.y;
    } else {
      y = b.batchNormInference(y, gamma, beta, rmean, rvar, c.bnEps, bn);
    }
    y = b.relu(y, "relu" + std::to_string(stage));
    x = b.maxPool(y, ipu::Pool2dOptions::make(2, 2, 0), "pool" + std::to_string(stage));
    h /= 2, w /= 2, inC = outC, ++stage;
  }
  int flat = b.reshape(x, {n, h * w * inC}, "flatten");
  int fw = b.variable("fc_weight", {h * w * inC, c.numClasses});
  int fb = b.variable("fc_bias", {c.numClasses});
  r.params.insert(r.params.end(), {fw, fb});
  r.logits = b.dense(flat, fw, fb, "logits");
  int perSample = b.softmaxCrossEntropy(r.logits, r.labels, c.labelSmoothing, "xent");
  r.loss = b.reduceMean(perSample, {0}, false, "loss");
  g.markOutput(r.loss);
  g.markOutput(r.logits);
  return r;
}

std::vector<int> stateOf(const Graph& g, const std::vector<int>& params) {
  std::vector<int> s;
  for (const auto& t : g.tensors())
    if (t.kind == ipu::TensorKind::Variable &&
        std::find(params.begin(), params.end(), t.id) == params.end())
      s.push_back(t.id);
  return s;
}

// The classifier's task contract: data inputs images and labels, evaluation output logits.
void setIo(TaskGraph& cg, int images, int labels, int logits, int loss) {
  cg.inputs = {images, labels};
  cg.outputs = {{"logits", logits}};
  cg.loss = loss;
}

}  // namespace

TaskGraph buildSmallCnnTraining(const SmallCnnConfig& c, i64 batch, const ipu::SgdOptions& sgd) {
  TaskGraph cg;
  cg.graph = Graph("small_cnn_train");
  Built b = forward(cg.graph, c, batch, true);
  cg.lr = cg.graph.addInput("lr", {});
  auto grads = ipu::appendBackward(cg.graph, b.loss, b.params).grads;
  cg.optimizer = ipu::appendOptimizer(cg.graph, grads, cg.lr, sgd);
  setIo(cg, b.images, b.labels, b.logits, b.loss);
  cg.parameters = b.params;
  cg.state = stateOf(cg.graph, b.params);
  return cg;
}

TaskGraph buildSmallCnnInference(const SmallCnnConfig& c, i64 batch) {
  TaskGraph cg;
  cg.graph = Graph("small_cnn_eval");
  Built b = forward(cg.graph, c, batch, false);
  setIo(cg, b.images, b.labels, b.logits, b.loss);
  cg.parameters = b.params;
  cg.state = stateOf(cg.graph, b.params);
  return cg;
}

TaskGraph buildSmallCnnTraining(const SmallCnnConfig& c, i64 batch, const ipu::SgdOptions& sgd,
                                const ipu::precision::PrecisionPolicy& policy) {
  if (!policy.isMixed() && policy.lossScaling.mode == ipu::precision::LossScalingMode::None)
    return buildSmallCnnTraining(c, batch, sgd);
  Graph fwd("small_cnn_train");
  Built b = forward(fwd, c, batch, true);
  auto rw = ipu::applyPrecision(fwd, policy);
  TaskGraph cg;
  cg.graph = std::move(rw.graph);
  cg.lr = cg.graph.addInput("lr", {});
  for (int p : b.params) cg.parameters.push_back(rw.map(p));
  auto step = ipu::appendTrainingStep(cg.graph, rw.map(b.loss), cg.parameters, cg.lr, sgd, policy);
  setIo(cg, rw.map(b.images), rw.map(b.labels), rw.map(b.logits), rw.map(b.loss));
  cg.optimizer = step.optimizer;
  cg.state = stateOf(cg.graph, cg.parameters);
  cg.lossScale = step.lossScale, cg.lossScaleInverse = step.lossScaleInverse;
  cg.overflow = step.overflow;
  cg.lossScaling = policy.lossScaling;
  return cg;
}

TaskGraph buildSmallCnnInference(const SmallCnnConfig& c, i64 batch,
                                 const ipu::precision::PrecisionPolicy& policy) {
  if (!policy.isMixed()) return buildSmallCnnInference(c, batch);
  Graph fwd("small_cnn_eval");
  Built b = forward(fwd, c, batch, false);
  auto rw = ipu::applyPrecision(fwd, policy);
  TaskGraph cg;
  cg.graph = std::move(rw.graph);
  for (int p : b.params) cg.parameters.push_back(rw.map(p));
  setIo(cg, rw.map(b.images), rw.map(b.labels), rw.map(b.logits), rw.map(b.loss));
  cg.state = stateOf(cg.graph, cg.parameters);
  return cg;
}

std::map<std::string, std::vector<float>> initSmallCnn(const Graph& g, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uniform = [&] { return (static_cast<double>(rng() >> 11) + 0.5) / 9007199254740992.0; };
  auto normal = [&] {  // Box-Muller: portable, unlike std::normal_distribution
    double u1 = uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  };
  std::map<std::string, std::vector<float>> out;
  for (const auto& t : g.tensors()) {
    if (t.kind != ipu::TensorKind::Variable) continue;
    std::vector<float> v(static_cast<size_t>(t.elements()), 0.f);
    const std::string& n = t.name;
    auto ends = [&](const char* s) {
      std::string suf(s);
      return n.size() >= suf.size() && n.compare(n.size() - suf.size(), suf.size(), suf) == 0;
    };
    if (n.rfind("conv", 0) == 0 && ends("_weight")) {
      double fanOut = static_cast<double>(t.shape[0] * t.shape[1] * t.shape[2]);
      double sd = std::sqrt(2.0 / fanOut);
      for (auto& x : v) x = static_cast<float>(sd * normal());
    } else if (n.rfind("fc", 0) == 0 && (ends("_weight") || ends("_bias"))) {
      double bound =
          1.0 / std::sqrt(static_cast<double>(
                    g.get("fc_weight") >= 0 ? g.tensor(g.get("fc_weight")).shape[0] : 1));
      for (auto& x : v) x = static_cast<float>((2.0 * uniform() - 1.0) * bound);
    } else if (ends("_gamma") || ends("_running_var")) {
      std::fill(v.begin(), v.end(), 1.f);
    }
    out[n] = std::move(v);
  }
  return out;
}

}  // namespace ipu::models
