#include "models/resnet50/resnet50.h"

#include <cmath>
#include <random>

#include <fmt/format.h>

#include "ipu_backend/compiler/mixed_precision.h"
#include "ipu_backend/ir/builder.h"
#include "models/common/gradients.h"
#include "models/common/init_random.h"

namespace ipu::models {

ResNetConfig ResNetConfig::resnet50() {
  return ResNetConfig{};
}

ResNetConfig ResNetConfig::small() {
  ResNetConfig c;
  c.numClasses = 10;
  c.blocks = {1, 1, 1, 1};
  c.baseWidth = 8;
  c.inputH = c.inputW = 32;
  return c;
}

ResNetConfig ResNetConfig::fashionMnist() {
  ResNetConfig c;
  c.numClasses = 10;
  c.inputH = c.inputW = 28;
  c.inputC = 1;
  c.stem = Stem::SmallImage;
  c.smallStemStride = 2;
  return c;
}

namespace {

bool endsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string unitPrefix(int stage, int unit) {
  return fmt::format("stage{}_unit{}_", stage, unit);
}

// Builds the network, declaring the parameters in canonical order.
class ResNetBuilder {
 public:
  ResNetBuilder(ResNetGraph& rg) : rg_(rg), g_(rg.graph), b_(rg.graph) {}

  void build() {
    const ResNetConfig& c = rg_.config;
    const i64 n = rg_.batch;
    rg_.images = b_.input("images", {n, c.inputH, c.inputW, c.inputC});
    rg_.labels = b_.input("labels", {n}, DType::I32);

    // Stem.
    int x = rg_.images;
    if (c.stem == ResNetConfig::Stem::ImageNet) {
      x = convBn(x, "conv0", "bn0", c.baseWidth, 7, 2, 3);
      x = b_.relu(x, "relu0");
      x = b_.maxPool(x, Pool2dOptions::make(3, 2, 1), "pool0");  // [N,H/4,W/4,64]
    } else {
      x = convBn(x, "conv0", "bn0", c.baseWidth, 3, c.smallStemStride, 1);
      x = b_.relu(x, "relu0");  // [N,H/stride,W/stride,64]
    }

    // Bottleneck stages.
    for (size_t s = 0; s < c.blocks.size(); ++s) {
      const i64 width = i64{c.baseWidth} << s;
      for (int u = 0; u < c.blocks[s]; ++u) {
        const i64 stride = (s > 0 && u == 0) ? 2 : 1;
        x = bottleneck(x, static_cast<int>(s) + 1, u + 1, width, stride, /*project=*/u == 0);
      }
    }

    // Head: [N,h,w,C] -> [N,C] -> [N,classes].
    x = b_.globalAvgPool(x, "avgpool");
    const i64 features = g_.tensor(x).shape[1];
    int w = param("fc1_weight", {features, c.numClasses});
    int bias = param("fc1_bias", {c.numClasses});
    rg_.logits = b_.dense(x, w, bias, "logits");
    rg_.sampleLoss =
        b_.softmaxCrossEntropy(rg_.logits, rg_.labels, c.labelSmoothing, "sample_loss");
    rg_.loss = b_.reduceMean(rg_.sampleLoss, {0}, false, "loss");  // f32[]
    g_.markOutput(rg_.logits);
    g_.markOutput(rg_.loss);
  }

 private:
  int param(const std::string& name, Shape shape) {
    int t = b_.variable(name, std::move(shape));
    rg_.params.push_back(t);
    return t;
  }

  // conv (no bias) -> batch norm. x: [N,H,W,C] -> [N,OH,OW,k].
  int convBn(int x, const std::string& conv, const std::string& bn, i64 k, i64 r, i64 stride,
             i64 pad) {
    const i64 ch = g_.tensor(x).shape[3];
    int w = param(conv + "_weight", {k, r, r, ch});
    int y = b_.conv2d(x, w, Conv2dOptions::make(stride, pad), conv);
    return batchNorm(y, bn);
  }

  int batchNorm(int x, const std::string& bn) {
    const Tensor& xt = g_.tensor(x);
    const i64 ch = xt.shape.back();
    const i64 rows = xt.elements() / ch;  // samples per channel: N*H*W
    int gamma = param(bn + "_gamma", {ch});
    int beta = param(bn + "_beta", {ch});
    int mean = b_.variable(bn + "_running_mean", {ch});
    int var = b_.variable(bn + "_running_var", {ch});
    rg_.runningStats.push_back(mean);
    rg_.runningStats.push_back(var);
    const double eps = rg_.config.bnEps;
    if (rg_.bnMode == BnMode::Inference)
      return b_.batchNormInference(x, gamma, beta, mean, var, eps, bn);
    const i64 span = rg_.config.bnSpanReplicas;
    BatchNormOutputs o = b_.batchNormTrainAcrossReplicas(x, gamma, beta, eps, span, bn);
    // The batch variance is biased; the running variance is unbiased (as PyTorch keeps it),
    // over every sample the statistics span.
    const double m = rg_.config.bnMomentum;
    const double samples = static_cast<double>(rows * span);
    const double unbias = samples > 1 ? samples / (samples - 1) : 1.0;
    g_.addOp(OpKind::EmaUpdate, {mean, o.mean}, Attrs{{"momentum", m}});
    g_.addOp(OpKind::EmaUpdate, {var, o.var}, Attrs{{"momentum", m}, {"scale", unbias}});
    return o.y;
  }

  // x: [N,H,W,Cin] -> [N,H/stride,W/stride,expansion*width].
  int bottleneck(int x, int stage, int unit, i64 width, i64 stride, bool project) {
    const std::string p = unitPrefix(stage, unit);
    const i64 out = width * rg_.config.expansion;
    int y = convBn(x, p + "conv1", p + "bn1", width, 1, 1, 0);
    y = b_.relu(y, p + "relu1");
    y = convBn(y, p + "conv2", p + "bn2", width, 3, stride, 1);  // v1.5: stride here
    y = b_.relu(y, p + "relu2");
    y = convBn(y, p + "conv3", p + "bn3", out, 1, 1, 0);
    // Declared after the main path: the canonical order lists the shortcut last.
    int sc = project ? convBn(x, p + "conv1sc", p + "bnsc", out, 1, stride, 0) : x;
    return b_.relu(b_.add(y, sc, p + "add"), p + "relu3");
  }

  ResNetGraph& rg_;
  Graph& g_;
  Builder b_;
};

}  // namespace

std::vector<std::string> ResNetGraph::paramNames() const {
  std::vector<std::string> names;
  names.reserve(params.size());
  for (int t : params) names.push_back(graph.tensor(t).name);
  return names;
}

i64 ResNetGraph::parameterCount() const {
  i64 n = 0;
  for (int t : params) n += graph.tensor(t).elements();
  return n;
}

std::vector<std::string> publishedRecomputationCheckpoints() {
  std::vector<std::string> names;
  for (auto [stage, unit] : {std::pair{1, 0}, {1, 2}, {2, 0}, {2, 2}, {3, 0}, {3, 3}})
    names.push_back(unitPrefix(stage, unit + 1) + "relu3");
  return names;
}

std::vector<std::string> resnetParameterNames(const ResNetConfig& c) {
  std::vector<std::string> names = {"conv0_weight", "bn0_gamma", "bn0_beta"};
  for (size_t s = 0; s < c.blocks.size(); ++s) {
    for (int u = 1; u <= c.blocks[s]; ++u) {
      const std::string p = unitPrefix(static_cast<int>(s) + 1, u);
      for (int i = 1; i <= 3; ++i) {
        names.push_back(fmt::format("{}conv{}_weight", p, i));
        names.push_back(fmt::format("{}bn{}_gamma", p, i));
        names.push_back(fmt::format("{}bn{}_beta", p, i));
      }
      if (u == 1) {
        names.push_back(p + "conv1sc_weight");
        names.push_back(p + "bnsc_gamma");
        names.push_back(p + "bnsc_beta");
      }
    }
  }
  names.push_back("fc1_weight");
  names.push_back("fc1_bias");
  return names;
}

ResNetGraph buildForward(const ResNetConfig& c, i64 batch, BnMode mode) {
  if (batch < 1) throw GraphError(fmt::format("resnet: batch must be >= 1, got {}", batch));
  if (c.blocks.empty()) throw GraphError("resnet: no stages");
  ResNetGraph rg;
  rg.config = c;
  rg.batch = batch;
  rg.bnMode = mode;
  rg.graph = Graph(mode == BnMode::Train ? "resnet_train" : "resnet_infer");
  ResNetBuilder(rg).build();
  return rg;
}

void appendGradients(ResNetGraph& rg) {
  GradientResult r = appendBackward(rg.graph, rg.loss, rg.params);
  requireGradients(rg.graph, r.grads, rg.params, "resnet");
  rg.grads = std::move(r.grads);
}

void appendSgd(ResNetGraph& rg, const SgdOptions& opts) {
  rg.lr = rg.graph.addInput("lr", {}, DType::F32);
  rg.optimizer = appendOptimizer(rg.graph, rg.grads, rg.lr, opts);
  rg.optimizerState = rg.optimizer.stateVariables;
}

ResNetGraph buildTraining(const ResNetConfig& c, i64 batch, const SgdOptions& opts) {
  ResNetGraph rg = buildForward(c, batch, BnMode::Train);
  appendGradients(rg);
  appendSgd(rg, opts);
  return rg;
}

ResNetGraph buildInference(const ResNetConfig& c, i64 batch) {
  return buildForward(c, batch, BnMode::Inference);
}

namespace {
// A forward ResNetGraph rewritten for a policy: the same struct over the rewritten graph.
ResNetGraph withPrecision(const ResNetGraph& fwd, const precision::PrecisionPolicy& policy) {
  PrecisionRewrite rw = applyPrecision(fwd.graph, policy);
  ResNetGraph rg;
  rg.config = fwd.config;
  rg.batch = fwd.batch;
  rg.bnMode = fwd.bnMode;
  rg.images = rw.map(fwd.images);
  rg.labels = rw.map(fwd.labels);
  rg.logits = rw.map(fwd.logits);
  rg.sampleLoss = rw.map(fwd.sampleLoss);
  rg.loss = rw.map(fwd.loss);
  for (int p : fwd.params) rg.params.push_back(rw.map(p));
  for (int s : fwd.runningStats) rg.runningStats.push_back(rw.map(s));
  rg.graph = std::move(rw.graph);
  return rg;
}
}  // namespace

ResNetGraph buildTraining(const ResNetConfig& c, i64 batch, const SgdOptions& opts,
                          const precision::PrecisionPolicy& policy) {
  if (!policy.isMixed() && policy.lossScaling.mode == precision::LossScalingMode::None)
    return buildTraining(c, batch, opts);
  ResNetGraph rg = withPrecision(buildForward(c, batch, BnMode::Train), policy);
  rg.lr = rg.graph.addInput("lr", {}, DType::F32);
  TrainingStepTensors step = appendTrainingStep(rg.graph, rg.loss, rg.params, rg.lr, opts, policy);
  requireGradients(rg.graph, step.grads, rg.params, "resnet");
  rg.grads = std::move(step.grads);
  rg.optimizer = step.optimizer;
  rg.optimizerState = rg.optimizer.stateVariables;
  rg.lossScale = step.lossScale;
  rg.lossScaleInverse = step.lossScaleInverse;
  rg.overflow = step.overflow;
  return rg;
}

ResNetGraph buildInference(const ResNetConfig& c, i64 batch,
                           const precision::PrecisionPolicy& policy) {
  if (!policy.isMixed()) return buildInference(c, batch);
  return withPrecision(buildForward(c, batch, BnMode::Inference), policy);
}

SgdOptions resnetSgdOptions(double momentum, double weightDecay) {
  SgdOptions o;
  o.momentum = momentum;
  o.weightDecay = weightDecay;
  o.decay = [](const Tensor& t) { return endsWith(t.name, "_weight"); };
  return o;
}

std::map<std::string, std::vector<float>> initWeights(const ResNetGraph& rg, std::uint64_t seed) {
  std::map<std::string, std::vector<float>> out;
  for (const Tensor& t : rg.graph.tensors()) {
    if (t.kind != TensorKind::Variable) continue;
    const std::string& name = t.name;
    const i64 n = t.elements();
    std::mt19937_64 rng(mix64(seed ^ fnv1a64(name)));
    std::vector<float> v;
    if (name == "fc1_weight" || name == "fc1_bias") {
      const i64 fanIn = rg.graph.tensor(rg.graph.get("fc1_weight")).shape[0];
      v = uniform(rng, n, 1.0 / std::sqrt(static_cast<double>(fanIn)));
    } else if (endsWith(name, "_weight")) {
      // [K,R,S,C]: fan_out = K*R*S (torchvision: kaiming_normal_, mode fan_out, relu).
      const i64 fanOut = t.shape[0] * t.shape[1] * t.shape[2];
      v = normal(rng, n, std::sqrt(2.0 / static_cast<double>(fanOut)));
    } else if (endsWith(name, "_gamma")) {
      const bool zero = rg.config.zeroInitLastBnGamma && endsWith(name, "_bn3_gamma");
      v.assign(n, zero ? 0.0f : 1.0f);
    } else if (endsWith(name, "_running_var")) {
      v.assign(n, 1.0f);
    } else {  // beta, running mean, momentum buffers
      v.assign(n, 0.0f);
    }
    out.emplace(name, std::move(v));
  }
  return out;
}

double forwardMacs(const Graph& g) {
  double macs = 0;
  for (const Op& op : g.ops()) {
    if (op.kind == OpKind::Conv2d) {
      const Shape& w = g.tensor(op.inputs[1]).shape;  // [K,R,S,C/G]
      macs += static_cast<double>(g.tensor(op.outputs[0]).elements()) *
              static_cast<double>(w[1] * w[2] * w[3]);
    } else if (op.kind == OpKind::MatMul) {
      const Shape& a = g.tensor(op.inputs[0]).shape;
      const bool ta = op.attrs.getBool("trans_a", false);
      const i64 k = ta ? a[a.size() - 2] : a.back();
      macs += static_cast<double>(g.tensor(op.outputs[0]).elements()) * static_cast<double>(k);
    }
  }
  return macs;
}

}  // namespace ipu::models
