#include "models/efficientnet_b4/efficientnet.h"

#include <cmath>

#include <fmt/format.h>

#include "ipu_backend/compiler/mixed_precision.h"
#include "ipu_backend/ir/builder.h"
#include "ipu_backend/ops/op_info.h"
#include "models/common/gradients.h"
#include "models/common/init_random.h"

namespace ipu::models::efficientnet {

namespace {

// B0's block table (tpu _DEFAULT_BLOCKS_ARGS; torchvision _efficientnet_conf).
std::vector<StageSpec> b0Stages() {
  return {{1, 3, 1, 32, 16, 1},  {6, 3, 2, 16, 24, 2},  {6, 5, 2, 24, 40, 2},
          {6, 3, 2, 40, 80, 3},  {6, 5, 1, 80, 112, 3}, {6, 5, 2, 112, 192, 4},
          {6, 3, 1, 192, 320, 1}};
}

[[noreturn]] void bad(const std::string& msg) {
  throw GraphError("efficientnet: " + msg);
}

void validate(const Config& c, i64 batch) {
  if (batch < 1) bad(fmt::format("batch must be >= 1, got {}", batch));
  if (c.stages.empty()) bad("config has no stages");
  if (c.widthMult <= 0 || c.depthMult <= 0)
    bad(fmt::format("widthMult {} and depthMult {} must be > 0", c.widthMult, c.depthMult));
  if (c.inputH < 1 || c.inputW < 1 || c.inputC < 1 || c.numClasses < 1)
    bad(fmt::format("input {}x{}x{} and numClasses {} must be >= 1", c.inputH, c.inputW, c.inputC,
                    c.numClasses));
  if (c.dropout < 0 || c.dropout >= 1) bad(fmt::format("dropout {} not in [0, 1)", c.dropout));
  if (c.stochasticDepth < 0 || c.stochasticDepth >= 1)
    bad(fmt::format("stochasticDepth {} not in [0, 1)", c.stochasticDepth));
  if (c.groupSize < 1) bad(fmt::format("groupSize must be >= 1, got {}", c.groupSize));
  for (size_t i = 0; i < c.stages.size(); ++i) {
    const StageSpec& s = c.stages[i];
    if (s.expandRatio < 1 || s.kernel < 1 || s.kernel % 2 == 0 || s.stride < 1 || s.stride > 2 ||
        s.inChannels < 1 || s.outChannels < 1 || s.layers < 1)
      bad(fmt::format(
          "stage {}: expandRatio {}, kernel {} (odd), stride {} (1 or 2), channels {}->{}, "
          "layers {} out of range",
          i + 1, s.expandRatio, s.kernel, s.stride, s.inChannels, s.outChannels, s.layers));
  }
}

}  // namespace

Config Config::b4() {
  Config c;
  c.stages = b0Stages();
  return c;
}

Config Config::b4G16() {
  Config c = b4();
  c.groupSize = 16;
  c.expandRatioOverride = 4;
  return c;
}

Config Config::small() {
  Config c;
  c.stages = {{1, 3, 1, 32, 16, 1}, {6, 5, 2, 16, 24, 2}, {6, 3, 2, 24, 40, 2}};
  c.widthMult = 0.5;
  c.depthMult = 1.0;
  c.inputH = c.inputW = 32;
  c.numClasses = 10;
  return c;
}

i64 makeDivisible(double v, i64 divisor) {
  i64 r = std::max<i64>(divisor, static_cast<i64>(v + divisor / 2.0) / divisor * divisor);
  if (static_cast<double>(r) < 0.9 * v) r += divisor;
  return r;
}

i64 stemChannels(const Config& c) {
  return makeDivisible(c.stages.front().inChannels * c.widthMult);
}

i64 headChannels(const Config& c) {
  // torchvision: 4x the last stage's output (= round_filters(1280) for B0..B7).
  return 4 * makeDivisible(c.stages.back().outChannels * c.widthMult);
}

std::vector<BlockSpec> blocks(const Config& c) {
  int total = 0;
  for (const StageSpec& s : c.stages) total += static_cast<int>(std::ceil(s.layers * c.depthMult));
  std::vector<BlockSpec> out;
  int global = 0;
  for (size_t si = 0; si < c.stages.size(); ++si) {
    const StageSpec& s = c.stages[si];
    const int layers = static_cast<int>(std::ceil(s.layers * c.depthMult));
    const int ratio =
        s.expandRatio != 1 && c.expandRatioOverride > 0 ? c.expandRatioOverride : s.expandRatio;
    for (int j = 0; j < layers; ++j, ++global) {
      BlockSpec b;
      b.stage = static_cast<int>(si) + 1;
      b.index = j;
      b.globalIndex = global;
      b.prefix = fmt::format("features.{}.{}.", b.stage, j);
      b.out = makeDivisible(s.outChannels * c.widthMult);
      b.in = j == 0 ? makeDivisible(s.inChannels * c.widthMult) : b.out;
      b.stride = j == 0 ? s.stride : 1;
      b.kernel = s.kernel;
      b.expanded = makeDivisible(static_cast<double>(b.in) * ratio);
      b.squeeze = std::max<i64>(1, b.in / 4);
      b.groups = c.groupSize == 1 ? b.expanded : std::max<i64>(1, b.expanded / c.groupSize);
      if (b.expanded % b.groups != 0)
        bad(fmt::format("{}: groupSize {} gives {} groups, which do not divide {} channels",
                        b.prefix, c.groupSize, b.groups, b.expanded));
      if (b.residual()) b.dropProb = c.stochasticDepth * global / total;
      out.push_back(b);
    }
  }
  return out;
}

namespace {

class NetBuilder {
 public:
  explicit NetBuilder(EfficientNetGraph& eg) : eg_(eg), g_(eg.graph), b_(eg.graph) {}

  void build() {
    const Config& c = eg_.config;
    const i64 n = eg_.batch;
    eg_.images = b_.input("images", {n, c.inputH, c.inputW, c.inputC});
    eg_.labels = b_.input("labels", {n}, DType::I32);

    int x = convNorm(eg_.images, "features.0.", stemChannels(c), 3, 2, 1, true);
    for (const BlockSpec& blk : blocks(c)) x = mbconv(x, blk);
    const std::string head = fmt::format("features.{}.", c.stages.size() + 1);
    x = convNorm(x, head, headChannels(c), 1, 1, 1, true);

    x = b_.globalAvgPool(x, "avgpool");  // [N,F]
    if (train() && c.dropout > 0) x = dropout(x, c.dropout, "element", "classifier.0");
    const i64 features = g_.tensor(x).shape[1];
    int w = param("classifier.1.weight", {c.numClasses, features});
    int bias = param("classifier.1.bias", {c.numClasses});
    eg_.logits = b_.add(b_.matmul(x, w, false, true, "classifier.1"), bias, "logits");
    eg_.sampleLoss =
        b_.softmaxCrossEntropy(eg_.logits, eg_.labels, c.labelSmoothing, "sample_loss");
    eg_.loss = b_.reduceMean(eg_.sampleLoss, {0}, false, "loss");
    g_.markOutput(eg_.logits);
    g_.markOutput(eg_.loss);
  }

 private:
  bool train() const { return eg_.mode == Mode::Train; }

  int param(const std::string& name, Shape shape) {
    int t = b_.variable(name, std::move(shape));
    eg_.params.push_back(t);
    return t;
  }

  // Sequential "<prefix>0" conv (no bias) + "<prefix>1" norm [+ swish], as torchvision's
  // Conv2dNormActivation. x: [N,H,W,C] -> [N,H/stride,W/stride,k].
  int convNorm(int x, const std::string& prefix, i64 k, i64 r, i64 stride, i64 groups, bool act) {
    const i64 ch = g_.tensor(x).shape[3];
    int w = param(prefix + "0.weight", {k, r, r, ch / groups});
    int y = b_.conv2d(x, w, Conv2dOptions::make(stride, (r - 1) / 2, groups), prefix + "0");
    y = norm(y, prefix + "1");
    return act ? b_.unary("swish", y, prefix + "2") : y;
  }

  int norm(int x, const std::string& p) {
    const Config& c = eg_.config;
    const Tensor& xt = g_.tensor(x);
    const i64 ch = xt.shape.back();
    const i64 rows = xt.elements() / ch;
    int gamma = param(p + ".weight", {ch});
    int beta = param(p + ".bias", {ch});
    if (c.norm == Norm::Group) {
      if (c.normGroups < 1 || ch % c.normGroups != 0)
        bad(fmt::format("'{}': normGroups {} must divide its {} channels", p, c.normGroups, ch));
      Attrs a;
      a.set("groups", i64{c.normGroups});
      a.set("eps", c.normEps);
      return ops::add(g_, "group_norm", {x, gamma, beta}, a,
                      {p + ".y", p + ".mean", p + ".rstd"})[0];
    }
    int mean = b_.variable(p + ".running_mean", {ch});
    int var = b_.variable(p + ".running_var", {ch});
    eg_.runningStats.push_back(mean);
    eg_.runningStats.push_back(var);
    if (!train()) return b_.batchNormInference(x, gamma, beta, mean, var, c.normEps, p);
    BatchNormOutputs o = b_.batchNormTrain(x, gamma, beta, c.normEps, p);
    const double unbias = rows > 1 ? static_cast<double>(rows) / static_cast<double>(rows - 1) : 1;
    g_.addOp(OpKind::EmaUpdate, {mean, o.mean}, Attrs{{"momentum", c.bnMomentum}});
    g_.addOp(OpKind::EmaUpdate, {var, o.var}, Attrs{{"momentum", c.bnMomentum}, {"scale", unbias}});
    return o.y;
  }

  // Per-element or per-sample dropout with its own seed, keyed by the graph's dropout_key.
  int dropout(int x, double rate, const char* mode, const std::string& name) {
    if (eg_.dropoutKey < 0) eg_.dropoutKey = b_.input("dropout_key", {2}, DType::I32);
    Attrs a;
    a.set("rate", rate);
    a.set("seed", static_cast<i64>((eg_.config.dropoutSeed + 0x9e3779b97f4a7c15ull * ++drops_) >>
                                   1));  // distinct, non-negative
    a.set("mode", std::string(mode));
    return ops::add(g_, "dropout", {x, eg_.dropoutKey}, a, {name})[0];
  }

  // x [N,H,W,C] * sigmoid(fc2(swish(fc1(mean_HW(x))))), fc1/fc2 1x1 convs with bias.
  int squeezeExcite(int x, const std::string& p, i64 squeeze) {
    const i64 ch = g_.tensor(x).shape[3];
    int s = b_.reduceMean(x, {1, 2}, true, p + "avgpool");  // [N,1,1,C]
    int w1 = param(p + "fc1.weight", {squeeze, 1, 1, ch});
    int b1 = param(p + "fc1.bias", {squeeze});
    s = b_.add(b_.conv2d(s, w1, Conv2dOptions::make(1, 0), p + "fc1"), b1, p + "fc1.add");
    s = b_.unary("swish", s, p + "activation");
    int w2 = param(p + "fc2.weight", {ch, 1, 1, squeeze});
    int b2 = param(p + "fc2.bias", {ch});
    s = b_.add(b_.conv2d(s, w2, Conv2dOptions::make(1, 0), p + "fc2"), b2, p + "fc2.add");
    s = b_.unary("sigmoid", s, p + "scale_activation");
    return b_.mul(x, s, p + "scale");  // broadcast over H, W
  }

  int mbconv(int x, const BlockSpec& blk) {
    const std::string p = blk.prefix + "block.";
    int y = x;
    int i = 0;
    if (blk.expanded != blk.in)
      y = convNorm(y, fmt::format("{}{}.", p, i++), blk.expanded, 1, 1, 1, true);
    y = convNorm(y, fmt::format("{}{}.", p, i++), blk.expanded, blk.kernel, blk.stride, blk.groups,
                 true);
    y = squeezeExcite(y, fmt::format("{}{}.", p, i++), blk.squeeze);
    y = convNorm(y, fmt::format("{}{}.", p, i++), blk.out, 1, 1, 1, false);
    if (!blk.residual()) return y;
    if (train() && blk.dropProb > 0)
      y = dropout(y, blk.dropProb, "sample", blk.prefix + "stochastic_depth");
    return b_.add(y, x, blk.prefix + "add");
  }

  EfficientNetGraph& eg_;
  Graph& g_;
  Builder b_;
  std::uint64_t drops_ = 0;
};

}  // namespace

std::vector<std::string> EfficientNetGraph::paramNames() const {
  std::vector<std::string> names;
  names.reserve(params.size());
  for (int t : params) names.push_back(graph.tensor(t).name);
  return names;
}

i64 EfficientNetGraph::parameterCount() const {
  i64 n = 0;
  for (int t : params) n += graph.tensor(t).elements();
  return n;
}

EfficientNetGraph buildForward(const Config& c, i64 batch, Mode mode) {
  validate(c, batch);
  EfficientNetGraph eg;
  eg.config = c;
  eg.batch = batch;
  eg.mode = mode;
  eg.graph = Graph(mode == Mode::Train ? "efficientnet_train" : "efficientnet_infer");
  NetBuilder(eg).build();
  return eg;
}

void appendGradients(EfficientNetGraph& eg) {
  GradientResult r = appendBackward(eg.graph, eg.loss, eg.params);
  requireGradients(eg.graph, r.grads, eg.params, "efficientnet");
  eg.grads = std::move(r.grads);
}

EfficientNetGraph withPrecision(const EfficientNetGraph& fwd,
                                const precision::PrecisionPolicy& policy) {
  if (!fwd.grads.empty())
    throw GraphError("efficientnet: withPrecision takes a forward graph (before appendGradients)");
  PrecisionRewrite rw = applyPrecision(fwd.graph, policy);
  EfficientNetGraph eg;
  eg.config = fwd.config;
  eg.batch = fwd.batch;
  eg.mode = fwd.mode;
  eg.images = rw.map(fwd.images);
  eg.labels = rw.map(fwd.labels);
  eg.dropoutKey = rw.map(fwd.dropoutKey);
  eg.logits = rw.map(fwd.logits);
  eg.sampleLoss = rw.map(fwd.sampleLoss);
  eg.loss = rw.map(fwd.loss);
  for (int p : fwd.params) eg.params.push_back(rw.map(p));
  for (int s : fwd.runningStats) eg.runningStats.push_back(rw.map(s));
  eg.graph = std::move(rw.graph);
  return eg;
}

}  // namespace ipu::models::efficientnet

namespace ipu::models::efficientnet {

bool isNormParameter(const Tensor& t) {
  const std::string& n = t.name;
  return t.shape.size() == 1 && n.find(".fc1.") == std::string::npos &&
         n.find(".fc2.") == std::string::npos && n.rfind("classifier.", 0) != 0;
}

EfficientNetGraph buildTraining(const Config& c, i64 batch, OptimizerOptions opts,
                                const precision::PrecisionPolicy& policy) {
  EfficientNetGraph eg = buildForward(c, batch, Mode::Train);
  if (policy.preset != "fp32") eg = withPrecision(eg, policy);
  eg.lr = eg.graph.addInput("lr", {}, DType::F32);
  opts.decay = [](const Tensor& t) { return !isNormParameter(t); };
  TrainingStepTensors step = appendTrainingStep(eg.graph, eg.loss, eg.params, eg.lr, opts, policy);
  requireGradients(eg.graph, step.grads, eg.params, "efficientnet");
  eg.grads = std::move(step.grads);
  eg.optimizer = step.optimizer;
  eg.lossScale = step.lossScale;
  eg.lossScaleInverse = step.lossScaleInverse;
  eg.overflow = step.overflow;
  return eg;
}

EfficientNetGraph buildInference(const Config& c, i64 batch,
                                 const precision::PrecisionPolicy& policy) {
  EfficientNetGraph eg = buildForward(c, batch, Mode::Inference);
  if (policy.preset != "fp32") eg = withPrecision(eg, policy);
  return eg;
}

std::map<std::string, std::vector<float>> initWeights(const EfficientNetGraph& eg,
                                                      std::uint64_t seed) {
  std::map<std::string, std::vector<float>> out;
  const auto endsWith = [](const std::string& s, std::string_view e) {
    return s.size() >= e.size() && s.compare(s.size() - e.size(), e.size(), e) == 0;
  };
  for (const Tensor& t : eg.graph.tensors()) {
    if (t.kind != TensorKind::Variable) continue;
    const std::string& name = t.name;
    const i64 n = t.elements();
    std::mt19937_64 rng = tensorRng(seed, name);
    std::vector<float> v;
    if (name == "classifier.1.weight") {
      const i64 fanOut =
          eg.config.classifierInitFanOut > 0 ? eg.config.classifierInitFanOut : t.shape[0];
      v = uniform(rng, n, 1.0 / std::sqrt(static_cast<double>(fanOut)));
    } else if (endsWith(name, ".weight") && t.shape.size() == 4) {
      // [K,R,S,C/G]: PyTorch's fan_out of a conv is K x R x S (groups do not divide it).
      v = normal(rng, n,
                 std::sqrt(2.0 / static_cast<double>(t.shape[0] * t.shape[1] * t.shape[2])));
    } else if ((endsWith(name, ".weight") && isNormParameter(t)) || endsWith(name, "running_var")) {
      v.assign(static_cast<size_t>(n), 1.0f);
    } else {  // biases, norm shifts, running means, optimizer state
      v.assign(static_cast<size_t>(n), 0.0f);
    }
    out.emplace(name, std::move(v));
  }
  return out;
}

TaskGraph taskGraph(const EfficientNetGraph& eg, const precision::LossScalingConfig& lossScaling) {
  TaskGraph t;
  t.graph = eg.graph;
  t.inputs = {eg.images, eg.labels};
  if (eg.dropoutKey >= 0) t.inputs.push_back(eg.dropoutKey);
  t.lr = eg.lr;
  t.loss = eg.loss;
  t.outputs = {{"logits", eg.logits}};
  t.parameters = eg.params;
  t.state = eg.runningStats;
  t.state.insert(t.state.end(), eg.optimizer.stateVariables.begin(),
                 eg.optimizer.stateVariables.end());
  t.optimizer = eg.optimizer;
  t.lossScale = eg.lossScale;
  t.lossScaleInverse = eg.lossScaleInverse;
  t.overflow = eg.overflow;
  t.lossScaling = lossScaling;
  return t;
}

}  // namespace ipu::models::efficientnet
