// Mixed precision through the backend: the cast op and 16-bit storage in both engines, the
// precision pass, stochastic rounding of 16-bit weight updates, static and dynamic loss scaling.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "ipu_backend/compiler/mixed_precision.h"
#include "ipu_backend/ir/builder.h"
#include "ipu_backend/ir/op_defs.h"
#include "ipu_backend/kernels/fused_bf16.h"
#include "ipu_backend/ops/op_info.h"
#include "ipu_backend/precision/half.h"
#include "op_test_util.h"

namespace ipu {
namespace {

using precision::PrecisionPolicy;
using testing::randomVec;
using testing::testTarget;

const EngineMode kModes[] = {EngineMode::Fused, EngineMode::Tile};

// The buffer "<tensor>/partials" in which a split sum producing `tensor` keeps its parts, or null.
const Buffer* partialsBufferOf(const Executable& exe, int tensor) {
  for (const Buffer& buf : exe.buffers)
    if (buf.name == exe.buffers[static_cast<size_t>(tensor)].name + "/partials") return &buf;
  return nullptr;
}

TEST(Cast, RoundsToNearestEvenAndStoresSixteenBitsInBothModes) {
  for (DType dt : {DType::F16, DType::BF16}) {
    Graph g("cast");
    Builder b(g);
    int x = b.input("x", {6});
    int h = b.cast(x, dt, "h");
    int y = b.cast(h, DType::F32, "y");
    g.markOutput(h);
    g.markOutput(y);
    auto exe = std::make_shared<Executable>(compile(g, testTarget()));
    EXPECT_EQ(exe->buffers[h].bytes(), 6 * 2) << "16-bit tensors take 2 bytes per element";
    // 1 + 2^-11 is the f16 tie between 1 and 1 + 2^-10 (rounds to even: 1); 65520 overflows.
    std::vector<float> in = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65520.0f, -0.1f, 1e-8f, 3.0f};
    for (EngineMode m : kModes) {
      Engine e(exe, m);
      e.connectInput(x, in.data());
      std::vector<float> out(6);
      e.connectOutput(y, out.data());
      e.run();
      for (size_t i = 0; i < in.size(); ++i) {
        float want = dt == DType::F16 ? precision::toFloat(precision::toF16(in[i]))
                                      : precision::toFloat(precision::toBF16(in[i]));
        EXPECT_EQ(std::memcmp(&out[i], &want, 4), 0)
            << engineModeName(m) << " " << dtypeName(dt) << " element " << i << ": " << out[i]
            << " vs " << want;
        EXPECT_EQ(e.readFloats(h)[i], want);
      }
    }
  }
}

TEST(Cast, BadDtypeIsAClearError) {
  Graph g("cast");
  Builder b(g);
  int x = b.input("x", {2});
  try {
    g.addOp(OpKind::Cast, {x}, Attrs{{"dtype", std::string("f8")}}, {"y"});
    FAIL() << "expected a GraphError";
  } catch (const GraphError& e) {
    EXPECT_NE(std::string(e.what()).find("'x'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("f8"), std::string::npos) << e.what();
  }
}

TEST(Cast, GradientIsCastBackToTheInputDtype) {
  Graph g("cast_grad");
  Builder b(g);
  int w = b.variable("w", {4});
  int h = b.cast(w, DType::F16);
  int sq = b.unary("square", h);
  int loss = b.cast(b.reduceSum(sq, {0}), DType::F32, "loss");
  auto r = appendBackward(g, loss, {w});
  ASSERT_TRUE(r.grads.count(w));
  EXPECT_EQ(g.tensor(r.grads[w]).dtype, DType::F32);
  g.markOutput(r.grads[w]);
  auto exe = std::make_shared<Executable>(compile(g, testTarget()));
  for (EngineMode m : kModes) {
    Engine e(exe, m);
    e.writeTensor("w", std::vector<float>{0.5f, -1.0f, 2.0f, 0.1f});
    e.run();
    auto dw = e.readFloats(r.grads[w]);
    EXPECT_FLOAT_EQ(dw[0], 1.0f);
    EXPECT_FLOAT_EQ(dw[1], -2.0f);
    EXPECT_FLOAT_EQ(dw[2], 4.0f);
    EXPECT_NEAR(dw[3], 0.2f, 1e-3f);  // 0.1 is not an f16 value
  }
}

// A small conv net: conv -> BN -> relu -> dense -> softmax cross-entropy.
struct Net {
  Graph graph{"net"};
  int images = -1, labels = -1, loss = -1, logits = -1;
  std::vector<int> params;
};

Net buildNet(i64 n) {
  Net net;
  Graph& g = net.graph;
  Builder b(g);
  net.images = b.input("images", {n, 6, 6, 2});
  net.labels = b.input("labels", {n}, DType::I32);
  int w = b.variable("conv_weight", {4, 3, 3, 2});
  int gamma = b.variable("bn_gamma", {4}), beta = b.variable("bn_beta", {4});
  int y = b.conv2d(net.images, w, Conv2dOptions::make(1, 1), "conv");
  y = b.relu(b.batchNormTrain(y, gamma, beta, 1e-5, "bn").y, "relu");
  int flat = b.reshape(y, {n, 6 * 6 * 4});
  int fw = b.variable("fc_weight", {6 * 6 * 4, 3}), fb = b.variable("fc_bias", {3});
  net.logits = b.dense(flat, fw, fb, "logits");
  net.loss = b.reduceMean(b.softmaxCrossEntropy(net.logits, net.labels), {0}, false, "loss");
  g.markOutput(net.loss);
  g.markOutput(net.logits);
  net.params = {w, gamma, beta, fw, fb};
  return net;
}

TEST(PrecisionPass, StoresWeightsAndActivationsPerPolicyAndKeepsTheLossInF32) {
  Net net = buildNet(4);
  auto p1616 = applyPrecision(net.graph, PrecisionPolicy::parse("16.16"));
  const Graph& g = p1616.graph;
  EXPECT_EQ(g.tensor(g.get("conv_weight")).dtype, DType::F16) << "16.16: f16 weights";
  EXPECT_EQ(g.tensor(g.get("bn_gamma")).dtype, DType::F32) << "BN parameters stay f32";
  EXPECT_EQ(g.tensor(g.get("conv")).dtype, DType::F16);
  EXPECT_EQ(g.op(g.tensor(g.get("conv")).producer).attrs.getString("partials"), "f16");
  EXPECT_EQ(g.tensor(p1616.map(net.loss)).dtype, DType::F32) << "softmax/loss kept in f32";
  EXPECT_EQ(g.tensor(p1616.map(net.logits)).dtype, DType::F32) << "outputs read back as f32";

  auto p1632 = applyPrecision(net.graph, PrecisionPolicy::parse("16.32"));
  const Graph& h = p1632.graph;
  EXPECT_EQ(h.tensor(h.get("conv_weight")).dtype, DType::F32) << "16.32: f32 master weights";
  EXPECT_EQ(h.tensor(h.get("conv")).dtype, DType::F16);
  EXPECT_EQ(h.op(h.tensor(h.get("conv")).producer).attrs.getString("partials"), "f32");

  auto f32 = applyPrecision(net.graph, PrecisionPolicy::parse("fp32"));
  EXPECT_EQ(f32.graph.ops().size(), net.graph.ops().size()) << "fp32 adds no casts";
}

// Registered ops declare their inputs' dtypes: layer_norm's gamma / beta and masked_lm_loss's
// weights take f32 only, so under 16.16 those variables stay f32 and a 16-bit host input is
// left f32, while the data inputs follow the compute dtype.
TEST(PrecisionPass, RegisteredOpsGetTheirF32OnlyInputsInF32) {
  Graph g("ln");
  Builder b(g);
  const int x = b.input("x", {4, 8});
  const int w = b.input("w", {4});
  const int labels = b.input("labels", {4}, DType::I32);
  const int gamma = b.variable("gamma", {8}), beta = b.variable("beta", {8});
  const int kernel = b.variable("kernel", {8, 8});
  const int y = ops::add(g, "layer_norm", {x, gamma, beta}, Attrs{{"eps", 1e-12}})[0];
  const int logits = b.matmul(y, kernel);
  const int loss = b.reduceSum(ops::add(g, "masked_lm_loss", {logits, labels, w})[0], {0});
  g.markOutput(loss);
  auto r = applyPrecision(g, PrecisionPolicy::parse("16.16"));
  const Graph& h = r.graph;
  EXPECT_EQ(h.tensor(h.get("gamma")).dtype, DType::F32);
  EXPECT_EQ(h.tensor(h.get("beta")).dtype, DType::F32);
  EXPECT_EQ(h.tensor(h.get("kernel")).dtype, DType::F16);
  const Op& ln = h.op(h.tensor(r.map(y)).producer);
  EXPECT_EQ(h.tensor(ln.inputs[0]).dtype, DType::F16) << "data follows the compute dtype";
  EXPECT_EQ(h.tensor(ln.inputs[1]).dtype, DType::F32);
  // Found by kind: the pass may put casts between the loss and the op that computes it.
  const Op* terms = nullptr;
  for (const Op& op : h.ops())
    if (op.kind == ops::kindNamed("masked_lm_loss")) terms = &op;
  ASSERT_NE(terms, nullptr);
  ASSERT_EQ(terms->inputs.size(), 3u);
  EXPECT_EQ(h.tensor(terms->inputs[2]).dtype, DType::F32) << "weights f32";
  EXPECT_EQ(h.tensor(terms->inputs[0]).dtype, DType::F16);
  // And it compiles (the ops' dtype checks accept every input).
  Graph step = h;
  appendTrainingStep(step, r.map(loss), {r.map(gamma), r.map(beta), r.map(kernel)},
                     step.addInput("lr", {}), SgdOptions{}, PrecisionPolicy::parse("16.16"));
  EXPECT_NO_THROW(compile(step, testTarget()));
}

// What stays f32 is a fact of the op kind (OpDef::precision), for built-in and registered kinds.
TEST(PrecisionPass, ReadsEachOpKindsPrecisionRule) {
  EXPECT_EQ(opDef(OpKind::SoftmaxCrossEntropy).precision, PrecisionRule::KeepF32);
  EXPECT_EQ(opDef(OpKind::BatchNormTrain).precision, PrecisionRule::DataInCompute);
  EXPECT_EQ(opDef(OpKind::BatchNormInference).precision, PrecisionRule::DataInCompute);
  EXPECT_EQ(opDef(OpKind::EmaUpdate).precision, PrecisionRule::FollowState);
  EXPECT_EQ(opDef(OpKind::Conv2d).precision, PrecisionRule::Compute);
  EXPECT_TRUE(opDef(OpKind::Conv2d).usesPartials);
  EXPECT_TRUE(opDef(OpKind::MatMul).usesPartials);
  EXPECT_FALSE(opDef(OpKind::Binary).usesPartials);
}

TEST(PrecisionPass, RefusesAGraphWithUpdates) {
  Net net = buildNet(2);
  int lr = net.graph.addInput("lr", {});
  auto grads = appendBackward(net.graph, net.loss, net.params).grads;
  appendSgdUpdate(net.graph, grads, lr, {});
  EXPECT_THROW(applyPrecision(net.graph, PrecisionPolicy::parse("fp16")), GraphError);
}

// Graphcore's "16.16" (enable_half_partials) is f16 partials in the backward matmuls too. A dense
// layer's weight gradient x^T dy sums over the tokens; too large for a tile, the sum is split
// into parts whose partial rows are f16: half the bytes of f32 ones (BERT-Large: 441 KB of f32
// partials on a tile). Tile mode rounds every part's sum to f16, so it is checked against an
// exact sum within f16's tolerance; fused mode sums in f32 and rounds once.
TEST(PrecisionPass, GradientMatMulsKeepTheForwardsPartials) {
  const i64 tokens = 512, in = 32, out = 32;
  Graph g("dense");
  Builder b(g);
  const int x = b.input("x", {tokens, in});
  const int c = b.input("c", {tokens, out});
  const int w = b.variable("w", {in, out});
  const int loss = b.reduceSum(b.mul(b.matmul(x, w, false, false, "y"), c), {0, 1}, false, "loss");
  g.markOutput(loss);
  auto r = applyPrecision(g, PrecisionPolicy::parse("16.16"));
  Graph& h = r.graph;
  const int dw = appendBackward(h, r.map(loss), {r.map(w)}).grads.at(r.map(w));
  h.markOutput(dw);
  const Op& grad = h.op(h.tensor(dw).producer);
  ASSERT_EQ(grad.kind, OpKind::MatMul) << "dw = x^T dy";
  ASSERT_TRUE(grad.attrs.has("partials")) << "the gradient matmul lost the forward's partials";
  EXPECT_EQ(grad.attrs.getString("partials"), "f16");

  CompileOptions opts;
  opts.checkMemory = false;
  auto exe = std::make_shared<Executable>(compile(h, Target::small(16, 64 << 10), opts));
  const Buffer* partials = partialsBufferOf(*exe, dw);
  ASSERT_NE(partials, nullptr) << "the sum over " << tokens << " tokens should be split";
  EXPECT_EQ(partials->dtype, DType::F16);
  EXPECT_EQ(partials->bytes(), partials->elements * 2) << partials->elements << " partials";

  const std::vector<float> xv = randomVec(static_cast<size_t>(tokens * in), 5);
  const std::vector<float> cv = randomVec(static_cast<size_t>(tokens * out), 6);
  auto half = [](float v) { return precision::toFloat(precision::toF16(v)); };
  std::vector<float> got[2];
  for (int m = 0; m < 2; ++m) {
    Engine e(exe, kModes[m]);
    e.writeTensor("w", std::vector<float>(static_cast<size_t>(in * out), 0.5f));
    e.connectInput(r.map(x), xv.data());
    e.connectInput(r.map(c), cv.data());
    e.run();
    got[m] = e.readFloats(dw);
  }
  for (i64 i = 0; i < in; ++i)
    for (i64 j = 0; j < out; ++j) {
      double exact = 0, magnitude = 0;  // the operands as the f16 casts store them
      for (i64 t = 0; t < tokens; ++t) {
        const double term = double(half(xv[static_cast<size_t>(t * in + i)])) *
                            half(cv[static_cast<size_t>(t * out + j)]);
        exact += term, magnitude += std::abs(term);
      }
      // Each part's sum and the result rounded to f16 (2^-11 relative each): a few ulps of
      // the sum of magnitudes.
      const double tol = 4 * 0x1p-11 * magnitude;
      const size_t o = static_cast<size_t>(i * out + j);
      ASSERT_NEAR(got[1][o], exact, tol) << "tile dw[" << i << "][" << j << "]";
      ASSERT_NEAR(got[0][o], exact, tol) << "fused dw[" << i << "][" << j << "]";
    }
}

// The embedding gradient (gather's scatter_add) sums each index part's updates into a partial
// [V, D] table: under "16.16" those are f16 like popops' multiUpdateAdd on a 16-bit table (BERT-
// Large's word-embedding gradient held 679 KB of f32 partials on one Mk2 tile). Tile mode rounds
// each part's sums to f16, so it is checked against the exact sums within f16's tolerance.
TEST(PrecisionPass, EmbeddingGradientPartialsFollowThePolicy) {
  const i64 rows = 64, width = 32, lookups = 512;
  Graph g("embedding");
  Builder b(g);
  const int table = b.variable("table", {rows, width});
  const int idx = b.input("idx", {lookups}, DType::I32);
  const int c = b.input("c", {lookups, width});
  const int looked = ops::add(g, "gather", {table, idx})[0];
  const int loss = b.reduceSum(b.mul(looked, c), {0, 1}, false, "loss");
  g.markOutput(loss);
  auto r = applyPrecision(g, PrecisionPolicy::parse("16.16"));
  Graph& h = r.graph;
  const int dt = appendBackward(h, r.map(loss), {r.map(table)}).grads.at(r.map(table));
  h.markOutput(dt);
  const Op& grad = h.op(h.tensor(dt).producer);
  ASSERT_EQ(grad.kind, ops::kindNamed("scatter_add"));
  ASSERT_TRUE(grad.attrs.has("partials")) << "scatter_add did not get gather's partials type";
  EXPECT_EQ(grad.attrs.getString("partials"), "f16");

  CompileOptions opts;
  opts.checkMemory = false;
  auto exe = std::make_shared<Executable>(compile(h, Target::small(16, 64 << 10), opts));
  const Buffer* partials = partialsBufferOf(*exe, dt);
  ASSERT_NE(partials, nullptr) << "the " << lookups << " updates should be split into parts";
  EXPECT_EQ(partials->dtype, DType::F16);
  EXPECT_EQ(partials->bytes(), partials->elements * 2) << partials->elements << " partials";

  std::vector<std::int32_t> iv(static_cast<size_t>(lookups));
  for (i64 k = 0; k < lookups; ++k)
    iv[static_cast<size_t>(k)] = static_cast<std::int32_t>((k * 37) % rows);
  const std::vector<float> cv = randomVec(static_cast<size_t>(lookups * width), 8);
  auto half = [](float v) { return precision::toFloat(precision::toF16(v)); };
  for (EngineMode m : kModes) {
    Engine e(exe, m);
    e.connectInput(r.map(idx), iv.data());
    e.connectInput(r.map(c), cv.data());
    e.run();
    const std::vector<float> got = e.readFloats(dt);
    for (i64 row = 0; row < rows; ++row)
      for (i64 j = 0; j < width; ++j) {
        double exact = 0, magnitude = 0;
        for (i64 k = 0; k < lookups; ++k)
          if (iv[static_cast<size_t>(k)] == row) {
            const double u = half(cv[static_cast<size_t>(k * width + j)]);
            exact += u, magnitude += std::abs(u);
          }
        ASSERT_NEAR(got[static_cast<size_t>(row * width + j)], exact, 4 * 0x1p-11 * magnitude)
            << engineModeName(m) << " row " << row << " column " << j;
      }
  }
}

// One compiled training step of the net under a policy, with a host-side loss scaler.
struct Step {
  std::shared_ptr<Executable> exe;
  TrainingStepTensors t;
  int images, labels, lr, loss;
  std::vector<int> params;
};

Step compileStep(const PrecisionPolicy& policy, i64 n, const SgdOptions& sgd = {}) {
  Net net = buildNet(n);
  auto rw = applyPrecision(net.graph, policy);
  Step s;
  s.lr = rw.graph.addInput("lr", {});
  for (int p : net.params) s.params.push_back(rw.map(p));
  s.t = appendTrainingStep(rw.graph, rw.map(net.loss), s.params, s.lr, sgd, policy);
  s.images = rw.map(net.images), s.labels = rw.map(net.labels), s.loss = rw.map(net.loss);
  s.exe = std::make_shared<Executable>(compile(std::move(rw.graph), testTarget()));
  return s;
}

struct Data {
  std::vector<float> images;
  std::vector<std::int32_t> labels;
};
Data makeData(i64 n) {
  Data d{randomVec(static_cast<size_t>(n * 6 * 6 * 2), 3), {}};
  for (i64 i = 0; i < n; ++i) d.labels.push_back(static_cast<std::int32_t>(i % 3));
  return d;
}

void initialise(Engine& e) {
  const Graph& g = e.executable().graph;
  for (const Tensor& t : g.tensors()) {
    if (t.kind != TensorKind::Variable) continue;
    std::vector<float> v = randomVec(static_cast<size_t>(t.elements()), 11 + t.id, -0.3f, 0.3f);
    if (t.name.find("momentum") != std::string::npos) std::fill(v.begin(), v.end(), 0.f);
    if (t.name == "bn_gamma") std::fill(v.begin(), v.end(), 1.f);
    e.writeTensor(t.name, v);
  }
}

TEST(MixedPrecision, TileModeAndFusedModeAgreeWithinTheDtypeTolerance) {
  for (const char* preset : {"16.16", "16.32", "bf16"}) {
    auto policy = PrecisionPolicy::parse(preset);
    SgdOptions sgd;
    sgd.weightDecay = 1e-4;
    Step s = compileStep(policy, 4, sgd);
    Data d = makeData(4);
    std::vector<std::vector<float>> weights[2];
    float loss[2] = {0, 0};
    for (int m = 0; m < 2; ++m) {
      Engine e(s.exe, kModes[m]);
      e.setRoundingSeed(42);
      initialise(e);
      // Fused mode runs batch norm + relu (and its backward) as one kernel in f32, and in bf16
      // where oneDNN has bf16 batch norm; tile mode runs every op on its own.
      if (kModes[m] == EngineMode::Fused && policy.compute == DType::BF16 &&
          kernels::fused::bf16PrimitivesAvailable()) {
        EXPECT_EQ(e.hostFusedOps(), 2) << preset;
      }
      float lr = 0.1f, scale = policy.lossScaling.scale, inv = 1.0f / scale, ovf = 0;
      e.connectInput(s.images, d.images.data());
      e.connectInput(s.labels, d.labels.data());
      e.connectInput(s.lr, &lr);
      if (s.t.lossScale >= 0) {
        e.connectInput(s.t.lossScale, &scale);
        e.connectInput(s.t.lossScaleInverse, &inv);
        e.connectOutput(s.t.overflow, &ovf);
      }
      e.connectOutput(s.loss, &loss[m]);
      for (int step = 0; step < 3; ++step) e.run();
      EXPECT_EQ(ovf, 0.0f) << preset;
      for (int p : s.params) weights[m].push_back(e.readFloats(p));
    }
    // Both modes round every 16-bit write with the same rule (and the same stochastic bits):
    // they differ only by f32 summation order inside kernels, then by at most an ulp or two.
    const float tol = policy.compute == DType::BF16 ? 2e-2f : 4e-3f;
    EXPECT_NEAR(loss[0], loss[1], tol * std::abs(loss[0]) + 1e-3f) << preset;
    for (size_t p = 0; p < weights[0].size(); ++p)
      for (size_t i = 0; i < weights[0][p].size(); ++i)
        ASSERT_NEAR(weights[0][p][i], weights[1][p][i], tol * (1 + std::abs(weights[0][p][i])))
            << preset << " param " << p << " element " << i;
  }
}

TEST(MixedPrecision, StochasticRoundingOfWeightUpdatesIsDeterministicForASeed) {
  auto policy = PrecisionPolicy::parse("16.16");
  Step s = compileStep(policy, 4);
  Data d = makeData(4);
  auto runWithSeed = [&](std::uint64_t seed) {
    Engine e(s.exe, EngineMode::Fused);
    e.setRoundingSeed(seed);
    initialise(e);
    float lr = 0.05f, scale = 128, inv = 1.0f / 128;
    e.connectInput(s.images, d.images.data());
    e.connectInput(s.labels, d.labels.data());
    e.connectInput(s.lr, &lr);
    e.connectInput(s.t.lossScale, &scale);
    e.connectInput(s.t.lossScaleInverse, &inv);
    for (int i = 0; i < 2; ++i) e.run();
    return e.readFloats(s.exe->graph.get("fc_weight"));
  };
  EXPECT_EQ(runWithSeed(7), runWithSeed(7));
  EXPECT_NE(runWithSeed(7), runWithSeed(8)) << "the seed drives the rounding";
}

// Regression whose gradients are far below f16's smallest subnormal (2^-24 ~ 6e-8): without
// loss scaling they flush to zero in f16 and nothing trains; a static scale keeps them.
struct TinyRegression {
  std::shared_ptr<Executable> exe;
  TrainingStepTensors t;
  int x, target, lr, loss, w;
};

TinyRegression buildTinyRegression(const PrecisionPolicy& policy, double momentum = 0.0) {
  Graph g("tiny");
  Builder b(g);
  int x = b.input("x", {64, 8}), target = b.input("target", {64, 1});
  int w = b.variable("w", {8, 1});
  int err = b.sub(b.matmul(x, w), target);
  // The loss is deliberately tiny (1e-6 x MSE): its gradients underflow f16.
  int loss = b.reduceMean(b.scale(b.unary("square", err), 1e-6), {0, 1}, false, "loss");
  g.markOutput(loss);
  auto rw = applyPrecision(g, policy);
  TinyRegression r;
  r.lr = rw.graph.addInput("lr", {});
  r.w = rw.map(w);
  SgdOptions sgd;
  sgd.momentum = momentum;
  r.t = appendTrainingStep(rw.graph, rw.map(loss), {r.w}, r.lr, sgd, policy);
  r.x = rw.map(x), r.target = rw.map(target), r.loss = rw.map(loss);
  r.exe = std::make_shared<Executable>(compile(std::move(rw.graph), testTarget()));
  return r;
}

struct Trace {
  std::vector<float> losses;
  std::vector<std::vector<float>> weights, momenta;  // after each step
  std::vector<precision::LossScaleStepReport> reports;
  precision::LossScaler scaler;
};

// Trains the regression towards target = x . w*, applying the policy's loss scaling on the
// host side exactly as the harness does.
Trace trainTiny(const TinyRegression& r, const precision::LossScalingConfig& ls, int steps,
                EngineMode mode = EngineMode::Fused, float lrValue = 1e6f) {
  Engine e(r.exe, mode);
  std::vector<float> x = randomVec(64 * 8, 5), wStar = randomVec(8, 6), target(64);
  for (int i = 0; i < 64; ++i)
    for (int k = 0; k < 8; ++k) target[i] += x[i * 8 + k] * wStar[k];
  e.writeTensor("w", std::vector<float>(8, 0.f));
  e.connectInput(r.x, x.data());
  e.connectInput(r.target, target.data());
  float lr = lrValue, scale = 1, inv = 1, ovf = 0, loss = 0;
  e.connectInput(r.lr, &lr);
  e.connectOutput(r.loss, &loss);
  if (r.t.lossScale >= 0) {
    e.connectInput(r.t.lossScale, &scale);
    e.connectInput(r.t.lossScaleInverse, &inv);
    e.connectOutput(r.t.overflow, &ovf);
  }
  Trace tr{{}, {}, {}, {}, precision::LossScaler(ls)};
  const Graph& g = r.exe->graph;
  int mom = g.find("w/momentum");
  for (int s = 0; s < steps; ++s) {
    scale = tr.scaler.scale();
    inv = tr.scaler.inverseScale();
    e.run();
    tr.scaler.update(ovf != 0.0f);
    tr.reports.push_back(tr.scaler.lastReport());
    tr.losses.push_back(loss);
    tr.weights.push_back(e.readFloats(r.w));
    if (mom >= 0) tr.momenta.push_back(e.readFloats(mom));
  }
  return tr;
}

TEST(LossScaling, FlushesToZeroInF16WithoutScalingAndTrainsWithAStaticScale) {
  auto unscaled = PrecisionPolicy::parse("16.32,loss=none,sr=off");
  auto scaled = PrecisionPolicy::parse("16.32,loss=static:32768,sr=off");
  Trace a = trainTiny(buildTinyRegression(unscaled), unscaled.lossScaling, 20);
  TinyRegression rs = buildTinyRegression(scaled);
  for (EngineMode m : kModes) {
    Trace b = trainTiny(rs, scaled.lossScaling, 20, m);
    EXPECT_EQ(a.weights.back(), std::vector<float>(8, 0.f))
        << "f16 gradients of the tiny loss underflow: w never moves";
    EXPECT_LT(b.losses.back(), 0.1f * b.losses.front())
        << engineModeName(m) << ": with S = 32768 the same graph trains";
    EXPECT_EQ(b.scaler.skippedSteps(), 0);
  }
}

TEST(LossScaling, DynamicScalingSkipsTheOverflowingStepWithoutTouchingTheWeights) {
  // Initial S = 2^24 overflows f16 (max 65504) at once; S halves per skipped step until the
  // scaled gradients fit, then training proceeds; a growth interval of 5 doubles S again.
  auto policy = PrecisionPolicy::parse("16.16,loss=dynamic:16777216:5,sr=on");
  TinyRegression r = buildTinyRegression(policy, 0.9);
  for (EngineMode m : kModes) {
    Trace tr = trainTiny(r, policy.lossScaling, 40, m, 1e5f);
    ASSERT_TRUE(tr.reports.front().overflow) << "the first step must overflow";
    EXPECT_FALSE(tr.reports.front().applied);
    int skipped = 0;
    size_t firstApplied = tr.reports.size();
    std::vector<float> before(8, 0.f), momentumBefore(8, 0.f);
    ASSERT_EQ(tr.momenta.size(), tr.reports.size());
    for (size_t s = 0; s < tr.reports.size(); ++s) {
      const auto& rep = tr.reports[s];
      if (!rep.applied) {
        ++skipped;
        EXPECT_EQ(tr.weights[s], before) << "step " << s << " was skipped: weights unchanged";
        EXPECT_EQ(tr.momenta[s], momentumBefore) << "step " << s << ": momentum unchanged";
        EXPECT_LT(rep.nextScale, rep.scaleUsed) << "the scale backs off on overflow";
      }
      if (rep.applied) firstApplied = std::min(firstApplied, s);
      before = tr.weights[s];
      momentumBefore = tr.momenta[s];
    }
    ASSERT_LT(firstApplied, tr.reports.size());
    EXPECT_GE(skipped, 1);
    EXPECT_EQ(tr.scaler.skippedSteps(), skipped);
    EXPECT_EQ(tr.scaler.overflowEvents(), skipped);
    EXPECT_LT(tr.losses.back(), 0.1f * tr.losses[firstApplied])
        << engineModeName(m) << ": training recovers after the overflow";
    bool grew = false;
    for (const auto& rep : tr.reports) grew = grew || (rep.applied && rep.scaleChanged);
    EXPECT_TRUE(grew) << "after 5 clean steps the scale grows";
  }
}

}  // namespace
}  // namespace ipu
