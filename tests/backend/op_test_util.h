// Harness for the per-op checks: builds a graph around one op, compiles it for a small target,
// runs it in both engine modes, and checks gradients against central finite differences.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ipu_backend/compiler/autodiff.h"
#include "ipu_backend/compiler/compiler.h"
#include "ipu_backend/engine/engine.h"
#include "ipu_backend/ir/builder.h"
#include "ipu_backend/optimizers/optimizer.h"

namespace ipu::testing {

inline std::vector<float> randomVec(size_t n, unsigned seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

inline Target testTarget() {
  return Target::small(16, 4 << 20);
}

// One op under test: `build` adds it to the builder given the variables (created from `inputs`)
// and returns the output tensor id. The probe loss is sum(out * R) for a fixed random R, so every
// output element's gradient is exercised.
struct OpCase {
  std::string name;
  std::vector<std::pair<std::string, Shape>> inputs;                         // f32 variables
  std::vector<std::pair<std::string, std::vector<std::int32_t>>> intInputs;  // i32 host inputs
  std::function<int(Builder&, const std::vector<int>& vars, const std::vector<int>& ints)> build;
  std::vector<bool> differentiable;  // per f32 input; empty = all
  // Per input: the dtype the op sees (the f32 variable cast to it); empty = all f32. The output
  // is cast back to f32, so the harness reads and probes f32 whatever the op computes in.
  std::vector<DType> dtypes;
  float inputLo = -1.f, inputHi = 1.f;
  // > 0: compile for a cramped target (16 tiles of this many bytes, memory not checked) so that
  // the planner takes the paths it uses for operands too large for one tile.
  i64 tileBytes = 0;
};

inline Target caseTarget(const OpCase& c) {
  return c.tileBytes > 0 ? Target::small(16, c.tileBytes) : testTarget();
}

struct OpRun {
  std::vector<float> output;
  std::vector<std::vector<float>> grads;  // per f32 input (empty if not differentiable)
  double loss = 0;
};

class OpHarness {
 public:
  explicit OpHarness(const OpCase& c, bool withGrads = true) : c_(c) {
    Graph g(c.name);
    Builder b(g);
    for (const auto& [n, s] : c.inputs) vars_.push_back(b.variable(n, s));
    for (const auto& [n, v] : c.intInputs)
      ints_.push_back(b.input(n, {static_cast<i64>(v.size())}, DType::I32));
    std::vector<int> opInputs = vars_;
    for (size_t i = 0; i < c.dtypes.size(); ++i)
      if (c.dtypes[i] != DType::F32) opInputs[i] = b.cast(vars_[i], c.dtypes[i]);
    out_ = c.build(b, opInputs, ints_);
    if (g.tensor(out_).dtype != DType::F32) out_ = b.cast(out_, DType::F32);
    g.markOutput(out_);  // keeps it live to the end of the step, so it can be read back
    const Shape outShape = g.tensor(out_).shape;  // copy: adding tensors reallocates
    probe_ = b.variable("probe", outShape);
    int prod = b.mul(out_, probe_);
    std::vector<i64> axes(outShape.size());
    for (size_t i = 0; i < axes.size(); ++i) axes[i] = static_cast<i64>(i);
    loss_ = b.reduceSum(prod, axes, false, "loss");
    g.markOutput(loss_);
    if (withGrads) {
      std::vector<int> wrt;
      for (size_t i = 0; i < vars_.size(); ++i)
        if (c.differentiable.empty() || c.differentiable[i]) wrt.push_back(vars_[i]);
      auto r = appendBackward(g, loss_, wrt);
      grads_ = r.grads;
      for (const auto& [v, gr] : grads_) g.markOutput(gr);
    }
    CompileOptions opts;
    opts.checkMemory = c.tileBytes == 0;
    exe_ = std::make_shared<Executable>(compile(std::move(g), caseTarget(c), opts));
    for (size_t i = 0; i < c.inputs.size(); ++i)
      values_.push_back(randomVec(static_cast<size_t>(numElements(c.inputs[i].second)),
                                  101 + static_cast<unsigned>(i), c.inputLo, c.inputHi));
    probeValues_ = randomVec(static_cast<size_t>(numElements(exe_->graph.tensor(out_).shape)), 7);
  }

  const Executable& exe() const { return *exe_; }
  std::vector<std::vector<float>>& values() { return values_; }

  OpRun run(EngineMode mode) const { return runWith(mode, values_); }

  OpRun runWith(EngineMode mode, const std::vector<std::vector<float>>& vals) const {
    Engine e(exe_, mode);
    for (size_t i = 0; i < vars_.size(); ++i)
      e.writeTensor(vars_[i], vals[i].data(), vals[i].size() * 4);
    e.writeTensor(probe_, probeValues_.data(), probeValues_.size() * 4);
    for (size_t i = 0; i < ints_.size(); ++i)
      e.connectInput(ints_[i], c_.intInputs[i].second.data());
    float loss = 0;
    e.connectOutput(loss_, &loss);
    e.run();
    OpRun r;
    r.loss = loss;
    r.output = e.readFloats(out_);
    for (int v : vars_) {
      auto it = grads_.find(v);
      r.grads.push_back(it == grads_.end() ? std::vector<float>{} : e.readFloats(it->second));
    }
    return r;
  }

  // Central finite difference of the probe loss w.r.t. element k of input i (double-sided,
  // evaluated with the fused engine; f32 so h must not be tiny).
  double finiteDifference(size_t i, size_t k, float h) const {
    auto plus = values_, minus = values_;
    plus[i][k] += h;
    minus[i][k] -= h;
    return (runWith(EngineMode::Fused, plus).loss - runWith(EngineMode::Fused, minus).loss) /
           (2.0 * h);
  }

 private:
  OpCase c_;
  std::vector<int> vars_, ints_;
  int out_ = -1, probe_ = -1, loss_ = -1;
  std::map<int, int> grads_;
  std::shared_ptr<Executable> exe_;
  std::vector<std::vector<float>> values_;
  std::vector<float> probeValues_;
};

inline double maxAbs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::abs(x)));
  return m;
}

}  // namespace ipu::testing
