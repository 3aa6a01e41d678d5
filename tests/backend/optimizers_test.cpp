// Optimizers as lowerings (ipu_backend/optimizers): every optimizer against a plain
// double-precision implementation of its reference (PyTorch's SGD and Adam, TensorFlow's
// LARSOptimizer and RMSProp, the MLPerf BERT LAMB and Graphcore's LambNoBias), over several
// steps, in both engine modes, with f32 weights and with f16 / bf16 master weights (the
// reference then rounds the weight and the 16-bit state the same way after every step).
// Also: the loss-scale wrapper's skip, the weight EMA, and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ipu_backend/compiler/compiler.h"
#include "ipu_backend/engine/engine.h"
#include "ipu_backend/ir/builder.h"
#include "ipu_backend/ir/op_defs.h"
#include "ipu_backend/optimizers/optimizer.h"
#include "ipu_backend/precision/half.h"
#include "op_test_util.h"

namespace ipu::testing {
namespace {

constexpr i64 kRows = 37, kCols = 5;  // "w" (decayed, trust ratio) and "b" [kCols] (neither)
constexpr int kSteps = 5;
const float kLr[kSteps] = {0.05f, 0.02f, 0.04f, 0.01f, 0.03f};

double roundTo(DType dt, double x) {
  if (dt == DType::F16) return precision::toFloat(precision::toF16(static_cast<float>(x)));
  if (dt == DType::BF16) return precision::toFloat(precision::toBF16(static_cast<float>(x)));
  return static_cast<float>(x);
}

// One tensor's reference state: the weight, slots 0 and 1, the step count, the EMA.
struct RefTensor {
  std::vector<double> w, s0, s1, ema;
  double t = 0;
  double emaUpdates = 0;
};

double norm(const std::vector<double>& x) {
  double s = 0;
  for (double v : x) s += v * v;
  return std::sqrt(s);
}

// One step of `o` on one tensor in double precision. `decays`: opts.decay of the tensor.
void referenceStep(const OptimizerOptions& o, bool decays, RefTensor& r,
                   const std::vector<double>& g, double lr) {
  const size_t n = r.w.size();
  const double wd = decays ? o.weightDecay : 0.0;
  const std::vector<double> w0 = r.w;
  std::string kind = o.kind;
  if (kind == "lars" && !decays) kind = "sgd";
  if (kind == "sgd" || kind == "lars") {
    double rate = lr;
    if (kind == "lars") {
      const double wn = norm(w0), gn = norm(g);
      if (wn > 0 && gn > 0) rate = lr * o.larsEta * wn / (gn + wd * wn + o.larsEpsilon);
    }
    for (size_t i = 0; i < n; ++i) {
      const double grad = g[i] + wd * w0[i];
      r.s0[i] = o.momentum * r.s0[i] + grad;
      r.w[i] -= rate * (o.nesterov ? grad + o.momentum * r.s0[i] : r.s0[i]);
    }
  } else if (kind == "rmsprop") {  // s0: mean square (starts at 1), s1: momentum
    for (size_t i = 0; i < n; ++i) {
      const double grad = g[i] + wd * w0[i];
      r.s0[i] = o.rho * r.s0[i] + (1 - o.rho) * grad * grad;
      r.s1[i] = o.momentum * r.s1[i] + lr * grad / std::sqrt(r.s0[i] + o.epsilon);
      r.w[i] -= r.s1[i];
    }
  } else {  // adam, lamb: s0 = m, s1 = v
    r.t += 1;
    const double c1 = o.biasCorrection ? 1 - std::pow(o.beta1, r.t) : 1.0;
    const double c2 = o.biasCorrection ? 1 - std::pow(o.beta2, r.t) : 1.0;
    std::vector<double> u(n);
    for (size_t i = 0; i < n; ++i) {
      const double grad = kind == "adam" ? g[i] + wd * w0[i] : g[i];
      r.s0[i] = o.beta1 * r.s0[i] + (1 - o.beta1) * grad;
      r.s1[i] = o.beta2 * r.s1[i] + (1 - o.beta2) * grad * grad;
      u[i] = (r.s0[i] / c1) / (std::sqrt(r.s1[i] / c2) + o.epsilon);
      if (kind == "lamb") u[i] += wd * w0[i];
    }
    double trust = 1.0;
    if (kind == "lamb" && decays) {
      const double wn = norm(w0), un = norm(u);
      if (wn > 0 && un > 0) trust = wn / un;
    }
    for (size_t i = 0; i < n; ++i) r.w[i] -= lr * trust * u[i];
  }
  if (o.emaDecay > 0) {
    // TensorFlow's ExponentialMovingAverage(decay, num_updates = the incremented global step).
    r.emaUpdates += 1;
    const double d =
        o.emaWarmup ? std::min(o.emaDecay, (1 + r.emaUpdates) / (10 + r.emaUpdates)) : o.emaDecay;
    for (size_t i = 0; i < n; ++i) r.ema[i] = d * r.ema[i] + (1 - d) * r.w[i];
  }
}

struct Case {
  std::string name;
  OptimizerOptions opts;
};

std::vector<Case> cases() {
  std::vector<Case> c;
  auto add = [&](std::string name, auto set) {
    OptimizerOptions o;
    o.decay = [](const Tensor& t) { return t.name == "w"; };  // "b": a bias, skip-listed
    set(o);
    c.push_back({std::move(name), o});
  };
  add("sgd", [](OptimizerOptions& o) { o.weightDecay = 0.01; });
  add("sgd_nesterov", [](OptimizerOptions& o) {
    o.nesterov = true;
    o.weightDecay = 0.01;
  });
  add("lars", [](OptimizerOptions& o) {
    o.kind = "lars";
    o.larsEta = 0.05;
    o.larsEpsilon = 1e-9;
    o.weightDecay = 5e-4;
  });
  add("lamb", [](OptimizerOptions& o) {
    o.kind = "lamb";
    o.weightDecay = 0.01;
  });
  add("lamb_no_bias_correction", [](OptimizerOptions& o) {
    o.kind = "lamb";
    o.weightDecay = 0.01;
    o.biasCorrection = false;
    o.beta1 = 0.62;
    o.beta2 = 0.996;
  });
  add("lamb_global_norm_clipping", [](OptimizerOptions& o) {
    o.kind = "lamb";
    o.weightDecay = 0.01;
    o.maxGradNorm = 1.0;  // the gradients' norm is ~8: every step is clipped
  });
  add("rmsprop", [](OptimizerOptions& o) {
    o.kind = "rmsprop";
    o.epsilon = 1e-3;
    o.weightDecay = 1e-5;
  });
  add("adam", [](OptimizerOptions& o) {
    o.kind = "adam";
    o.epsilon = 1e-8;
    o.weightDecay = 0.01;
  });
  add("adam_with_weight_ema", [](OptimizerOptions& o) {
    o.kind = "adam";
    o.epsilon = 1e-8;
    o.emaDecay = 0.9;
  });
  // EfficientNet's recipe: TensorFlow's RMSProp, the evaluation EMA at 0.9999 with warm-up.
  add("rmsprop_with_weight_ema_warmup", [](OptimizerOptions& o) {
    o.kind = "rmsprop";
    o.epsilon = 1e-3;
    o.weightDecay = 1e-5;
    o.emaDecay = 0.9999;
    o.emaWarmup = true;
  });
  return c;
}

// The gradients are variables the test writes before each step, so the optimizer sees exactly
// the values the reference does.
struct Built {
  std::shared_ptr<Executable> exe;
  OptimizerState state;
};

Built build(const OptimizerOptions& opts, DType dt, bool lossScaled = false) {
  Graph g("optimizer");
  Builder b(g);
  const int w = b.variable("w", {kRows, kCols}, dt), bias = b.variable("b", {kCols}, dt);
  const int gw = b.variable("grad_w", {kRows, kCols}, dt), gb = b.variable("grad_b", {kCols}, dt);
  const int lr = b.input("lr", {});
  OptimizerOptions o = opts;
  if (lossScaled) o.lossScaling = {b.input("loss_scale_inverse", {}), b.input("overflow", {})};
  Built s;
  s.state = appendOptimizer(g, {{w, gw}, {bias, gb}}, lr, o);
  s.exe = std::make_shared<Executable>(compile(std::move(g), testTarget()));
  return s;
}

std::vector<double> rounded(DType dt, const std::vector<float>& v) {
  std::vector<double> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = roundTo(dt, v[i]);
  return r;
}
std::vector<float> asFloats(const std::vector<double>& v) {
  return std::vector<float>(v.begin(), v.end());
}

void initialiseState(Engine& e, const Built& s,
                     const std::map<std::string, std::vector<double>>& w) {
  const Graph& g = s.exe->graph;
  for (size_t i = 0; i < s.state.stateVariables.size(); ++i) {
    const Tensor& t = g.tensor(s.state.stateVariables[i]);
    const std::string weight = g.tensor(s.state.weightOf[i]).name;
    std::vector<float> v(static_cast<size_t>(t.elements()),
                         s.state.init[i] == StateInit::One ? 1.0f : 0.0f);
    if (s.state.init[i] == StateInit::Weight) v = asFloats(w.at(weight));
    e.writeTensor(t.name, v);
  }
}

// Relative error with a floor: 16-bit runs round the weight every step, so a one-ulp difference
// in one step may persist.
double maxError(const std::vector<float>& got, const std::vector<double>& want) {
  double e = 0;
  for (size_t i = 0; i < got.size(); ++i)
    e = std::max(e, std::fabs(got[i] - want[i]) / std::max(1.0, std::fabs(want[i])));
  return e;
}

class OptimizerReference : public ::testing::TestWithParam<std::tuple<size_t, DType>> {};

TEST_P(OptimizerReference, MatchesOverSeveralStepsInBothModes) {
  const auto [index, dt] = GetParam();
  const Case c = cases()[index];
  const OptimizerOptions& o = c.opts;
  const Built s = build(o, dt);
  // f32: the device computes in f32, the reference in double. 16-bit: a rounding that lands
  // on the other side of a tie-break in one step moves the weight by one ulp (2^-10, 2^-7).
  const double tol = dt == DType::F32 ? 2e-5 : dt == DType::F16 ? 3e-3 : 2e-2;
  for (EngineMode mode : {EngineMode::Fused, EngineMode::Tile}) {
    Engine e(s.exe, mode);
    std::map<std::string, RefTensor> ref;
    ref["w"].w = rounded(dt, randomVec(kRows * kCols, 11));
    ref["b"].w = rounded(dt, randomVec(kCols, 12));
    for (auto& [name, r] : ref) {
      r.s0.assign(r.w.size(), o.kind == "rmsprop" ? 1.0 : 0.0);
      r.s1.assign(r.w.size(), 0.0);
      r.ema = r.w;
      e.writeTensor(name, asFloats(r.w));
    }
    initialiseState(e, s, {{"w", ref["w"].w}, {"b", ref["b"].w}});
    for (int step = 0; step < kSteps; ++step) {
      std::map<std::string, std::vector<double>> grads = {
          {"w", rounded(dt, randomVec(kRows * kCols, 100 + step))},
          {"b", rounded(dt, randomVec(kCols, 200 + step))}};
      e.writeTensor("grad_w", asFloats(grads["w"]));
      e.writeTensor("grad_b", asFloats(grads["b"]));
      float lr = kLr[step];
      e.connectInput(s.exe->graph.get("lr"), &lr);
      e.run();
      if (o.maxGradNorm > 0) {  // TensorFlow's clip_by_global_norm over both tensors
        const double gn = std::hypot(norm(grads["w"]), norm(grads["b"]));
        for (auto& [name, gr] : grads)
          for (double& x : gr) x *= o.maxGradNorm / std::max(gn, o.maxGradNorm);
      }
      for (auto& [name, r] : ref) {
        referenceStep(o, name == "w", r, grads[name], lr);
        // The device stores the weight, the EMA and the first slot in the weight's dtype,
        // second moments (rmsprop's mean square, adam's and lamb's v) in f32.
        const bool rms = o.kind == "rmsprop";
        for (double& x : r.w) x = roundTo(dt, x);
        for (double& x : r.ema) x = roundTo(dt, x);
        for (double& x : r.s0) x = roundTo(rms ? DType::F32 : dt, x);
        for (double& x : r.s1) x = roundTo(rms ? dt : DType::F32, x);
      }
    }
    const std::string where =
        c.name + " " + std::string(dtypeName(dt)) + " " + std::string(engineModeName(mode));
    for (const auto& [name, r] : ref) {
      EXPECT_LT(maxError(e.readFloats(name), r.w), tol) << where << " " << name;
      if (o.emaDecay > 0) {
        EXPECT_LT(maxError(e.readFloats(name + "/ema"), r.ema), tol) << where << " ema " << name;
      }
    }
    if (dt != DType::F32) continue;
    // The optimizer did something: the weights moved by far more than the tolerance.
    double moved = 0;
    const std::vector<double> w0 = rounded(dt, randomVec(kRows * kCols, 11));
    for (size_t i = 0; i < w0.size(); ++i)
      moved = std::max(moved, std::fabs(ref["w"].w[i] - w0[i]));
    EXPECT_GT(moved, 20 * tol) << where;
    if (o.emaWarmup) {  // at 0.9999 without the warm-up, five updates leave the EMA at w0
      double emaMoved = 0;
      for (size_t i = 0; i < w0.size(); ++i)
        emaMoved = std::max(emaMoved, std::fabs(ref["w"].ema[i] - w0[i]));
      EXPECT_GT(emaMoved, 20 * tol) << where;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllOptimizers, OptimizerReference,
                         ::testing::Combine(::testing::Range<size_t>(0, cases().size()),
                                            ::testing::Values(DType::F32, DType::F16, DType::BF16)),
                         [](const ::testing::TestParamInfo<std::tuple<size_t, DType>>& info) {
                           return cases()[std::get<0>(info.param)].name + "_" +
                                  std::string(dtypeName(std::get<1>(info.param)));
                         });

// torch.optim itself (tests/fixtures/optimizers, scripts/goldens/make_optimizer_goldens.py): SGD,
// SGD with Nesterov momentum and Adam on one weight over five steps, the weight after each.
TEST(Optimizers, MatchTorchOptimGoldens) {
  std::ifstream f(std::string(IPU_SOURCE_DIR) +
                  "/tests/fixtures/optimizers/optimizer_goldens.json");
  ASSERT_TRUE(f) << "missing tests/fixtures/optimizers/optimizer_goldens.json";
  const nlohmann::json j = nlohmann::json::parse(f);
  const auto w0 = j["w0"].get<std::vector<float>>();
  const auto grads = j["grads"].get<std::vector<std::vector<float>>>();
  const auto lrs = j["lr"].get<std::vector<float>>();
  for (const auto& [name, after] : j["cases"].items()) {
    OptimizerOptions o;
    o.weightDecay = 0.01;
    if (name == "sgd_nesterov") o.nesterov = true;
    if (name == "adam") o.kind = "adam", o.epsilon = 1e-8;
    Graph g("golden");
    Builder b(g);
    const int w = b.variable("w", {16}), gw = b.variable("grad_w", {16}), lr = b.input("lr", {});
    const OptimizerState st = appendOptimizer(g, {{w, gw}}, lr, o);
    auto exe = std::make_shared<Executable>(compile(std::move(g), testTarget()));
    for (EngineMode mode : {EngineMode::Fused, EngineMode::Tile}) {
      Engine e(exe, mode);
      e.writeTensor("w", w0);
      for (int v : st.stateVariables)
        e.writeTensor(
            exe->graph.tensor(v).name,
            std::vector<float>(static_cast<size_t>(exe->graph.tensor(v).elements()), 0.f));
      for (size_t step = 0; step < lrs.size(); ++step) {
        e.writeTensor("grad_w", grads[step]);
        float rate = lrs[step];
        e.connectInput(exe->graph.get("lr"), &rate);
        e.run();
        const auto want = after[step].get<std::vector<float>>();
        const auto got = e.readFloats("w");
        for (size_t i = 0; i < want.size(); ++i)
          EXPECT_NEAR(got[i], want[i], 2e-6 * std::max(1.0f, std::fabs(want[i])))
              << name << " " << engineModeName(mode) << " step " << step << " [" << i << "]";
      }
    }
  }
}

TEST(Optimizers, EveryOneLowersToOrdinaryOpsAndApplyUpdate) {
  for (const Case& c : cases()) {
    const Built s = build(c.opts, DType::F32);
    int writes = 0;
    for (const Op& op : s.exe->graph.ops()) {
      EXPECT_NE(op.kind, OpKind::OptimizerUpdate) << c.name;
      writes += op.kind == OpKind::ApplyUpdate;
    }
    // One write per weight and per state variable that changes (sgd: momentum; adam / lamb:
    // m, v, step; rmsprop: mean square, momentum; plus the EMA).
    EXPECT_EQ(writes, 2 + static_cast<int>(s.state.stateVariables.size())) << c.name;
  }
}

TEST(Optimizers, LossScaledStepIsUnscaledAndSkippedOnOverflow) {
  // Adam under loss scaling S = 1024: the gradients arrive multiplied by S; step 2 overflowed
  // (flag NaN) and must leave the weights and every state variable (the step count too) as
  // they were, so steps 1 and 3 equal two unscaled steps.
  OptimizerOptions o;
  o.kind = "adam";
  o.epsilon = 1e-8;
  o.weightDecay = 0.01;
  const Built scaled = build(o, DType::F32, true);
  const Built plain = build(o, DType::F32, false);
  for (EngineMode mode : {EngineMode::Fused, EngineMode::Tile}) {
    Engine es(scaled.exe, mode), ep(plain.exe, mode);
    for (Engine* e : {&es, &ep}) {
      e->writeTensor("w", randomVec(kRows * kCols, 21));
      e->writeTensor("b", randomVec(kCols, 22));
      initialiseState(*e, e == &es ? scaled : plain, {});
    }
    float inverse = 1.0f / 1024, ok = 0.0f, overflow = std::numeric_limits<float>::quiet_NaN();
    es.connectInput(scaled.exe->graph.get("loss_scale_inverse"), &inverse);
    for (int step = 0; step < 3; ++step) {
      std::vector<float> gw = randomVec(kRows * kCols, 300 + step),
                         gb = randomVec(kCols, 400 + step);
      float lr = kLr[step];
      std::vector<float> gwS = gw, gbS = gb;
      for (float& x : gwS) x *= 1024;
      for (float& x : gbS) x *= 1024;
      es.writeTensor("grad_w", gwS);
      es.writeTensor("grad_b", gbS);
      es.connectInput(scaled.exe->graph.get("lr"), &lr);
      es.connectInput(scaled.exe->graph.get("overflow"), step == 1 ? &overflow : &ok);
      const std::vector<float> before = es.readFloats("w"), mBefore = es.readFloats("w/m");
      es.run();
      if (step == 1) {
        EXPECT_EQ(es.readFloats("w"), before) << engineModeName(mode);
        EXPECT_EQ(es.readFloats("w/m"), mBefore) << engineModeName(mode);
        EXPECT_EQ(es.readFloats("w/step")[0], 1.0f) << engineModeName(mode);
        continue;
      }
      ep.writeTensor("grad_w", gw);
      ep.writeTensor("grad_b", gb);
      ep.connectInput(plain.exe->graph.get("lr"), &lr);
      ep.run();
    }
    EXPECT_EQ(es.readFloats("w/step")[0], 2.0f);
    // x 1024 then x 1/1024 is exact: the two runs agree to the bit.
    EXPECT_EQ(es.readFloats("w"), ep.readFloats("w")) << engineModeName(mode);
    EXPECT_EQ(es.readFloats("b/v"), ep.readFloats("b/v")) << engineModeName(mode);
  }
}

TEST(Optimizers, SecondMomentsStayF32WithSixteenBitWeights) {
  OptimizerOptions o;
  o.kind = "lamb";
  const Built s = build(o, DType::F16);
  const Graph& g = s.exe->graph;
  EXPECT_EQ(g.tensor(g.get("w/m")).dtype, DType::F16);
  EXPECT_EQ(g.tensor(g.get("w/v")).dtype, DType::F32);
  EXPECT_EQ(g.tensor(g.get("w/step")).shape, Shape{});
}

TEST(Optimizers, BadRequestsAreRefusedNamingTheWeight) {
  Graph g("bad");
  Builder b(g);
  const int w = b.variable("w", {4}), gw = b.variable("gw", {4}), lr = b.input("lr", {});
  OptimizerOptions o;
  o.kind = "adagrad";
  try {
    appendOptimizer(g, {{w, gw}}, lr, o);
    FAIL() << "unknown optimizer accepted";
  } catch (const GraphError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'adagrad'"), std::string::npos) << m;
    EXPECT_NE(m.find("sgd, lars, lamb, rmsprop, adam"), std::string::npos) << m;
  }
  // An optimizer_update written by hand with the wrong state: refused at compile, naming 'w'.
  g.addOp(OpKind::OptimizerUpdate, {w, gw, lr}, Attrs{{"optimizer", std::string("adam")}});
  try {
    compile(std::move(g), testTarget());
    FAIL() << "adam without its state accepted";
  } catch (const GraphError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("optimizer_update of 'w': adam takes 3 state variables"), std::string::npos)
        << m;
  }
}

}  // namespace
}  // namespace ipu::testing
