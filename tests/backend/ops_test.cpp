// Every op: forward against a plain reference (the readable kernels on whole tensors, which the
// kernel tests check against hand-computed values), backward against central finite
// differences, and tile mode equal to fused mode.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <set>

#include "ipu_backend/compiler/op_shapes.h"
#include "ipu_backend/ir/text.h"
#include "ipu_backend/kernels/fused.h"
#include "ipu_backend/kernels/reference.h"
#include "ipu_backend/ops/op_info.h"
#include "ipu_backend/precision/stochastic_rounding.h"
#include "tests/backend/op_test_util.h"

namespace ipu::testing {
namespace {

namespace ref = kernels::ref;
using Vals = std::vector<std::vector<float>>;
using FW = kernels::Window<float>;

FW whole(const std::vector<float>& v) {
  return FW::whole(v.data(), static_cast<i64>(v.size()));
}

struct Case {
  OpCase op;
  // Plain reference of the forward output from the input values.
  std::function<std::vector<float>(const Vals&)> reference;
  // The reference runs the tile engine's own kernels (ref::) on whole tensors: the tile-mode
  // forward is then checked through tile == fused and fused == reference, not against itself.
  bool referenceIsTileKernel = true;
  float fdStep = 1e-2f;
  // Tolerances relative to the largest expected magnitude (registered ops: their OpInfo's).
  double fwdTol = 1e-5, tileTol = 1e-5, tileGradTol = 1e-4, fdTol = 2e-2;
  // Registered op kinds this case exercises (forward op first, then what its gradient adds).
  std::vector<std::string> covers;
  // The fused convolutions' algorithm while the case's engines are built (Auto: the ISA's rule).
  kernels::fused::ConvAlgorithm convAlgorithm = kernels::fused::ConvAlgorithm::Auto;
  // The ISA whose kernel rule the fused kernels follow (nullopt: the host's).
  std::optional<kernels::fused::KernelIsa> ruleIsa;
};

// Sets a case's convolution algorithm and rule ISA for the kernels created in its scope.
struct ConvAlgorithmScope {
  explicit ConvAlgorithmScope(const Case& c) {
    kernels::fused::setConvAlgorithm(c.convAlgorithm);
    kernels::fused::setRuleIsa(c.ruleIsa);
  }
  ~ConvAlgorithmScope() {
    kernels::fused::setConvAlgorithm(kernels::fused::ConvAlgorithm::Auto);
    kernels::fused::setRuleIsa(std::nullopt);
  }
};

// A case of registered op kinds: tolerances from the first one's OpInfo for the op's dtype.
Case registeredCase(std::vector<std::string> covers, DType dt) {
  Case c;
  const ops::Tolerance& t = ops::find(covers.at(0))->tolerances.of(dt);
  c.fwdTol = t.forward;
  c.tileTol = t.tileVsFused;
  c.tileGradTol = std::max(t.tileVsFused, 1e-4);
  c.fdTol = t.gradient;
  c.referenceIsTileKernel = false;
  c.covers = std::move(covers);
  return c;
}

std::vector<float> call(i64 n, const std::function<void(float*, kernels::Range)>& f) {
  std::vector<float> y(static_cast<size_t>(n));
  f(y.data(), {0, n});
  return y;
}

Case convCase(std::string name, Shape x, Shape w, Conv2dOptions o) {
  Case c;
  c.op.name = name;
  c.op.inputs = {{"x", x}, {"w", w}};
  c.op.build = [o](Builder& b, const std::vector<int>& v, const std::vector<int>&) {
    return b.conv2d(v[0], v[1], o, "y");
  };
  c.covers = {"conv2d", "conv2d_backward_data", "conv2d_backward_filter"};
  c.reference = [x, w, o](const Vals& v) {
    kernels::Conv2dShape s{x[0],       x[1],      x[2],      x[3],     w[0],      w[1],
                           w[2],       o.strideH, o.strideW, o.padTop, o.padLeft, o.padBottom,
                           o.padRight, o.dilH,    o.dilW,    o.groups};
    return call(s.outputElems(), [&](float* y, kernels::Range r) {
      ref::conv2dForward(s, whole(v[0]), whole(v[1]), y, r);
    });
  };
  return c;
}

Case matmulCase(std::string name, Shape a, Shape bs, bool ta, bool tb) {
  Case c;
  c.op.name = name;
  c.op.inputs = {{"a", a}, {"b", bs}};
  c.op.build = [ta, tb](Builder& b, const std::vector<int>& v, const std::vector<int>&) {
    return b.matmul(v[0], v[1], ta, tb, "y");
  };
  c.covers = {"matmul"};
  c.reference = [a, bs, ta, tb](const Vals& v) {
    Graph g;
    Builder b(g);
    int y = b.matmul(b.variable("a", a), b.variable("b", bs), ta, tb);
    auto s = matMulShapeOf(g, g.op(g.tensor(y).producer));
    return call(s.cElems(), [&](float* o, kernels::Range r) {
      ref::matMul(s, whole(v[0]), whole(v[1]), o, r, {0, s.k});
    });
  };
  return c;
}

Case unaryCase(const std::string& fn, kernels::UnaryKind k, float lo = -1.f, float hi = 1.f) {
  Case c;
  c.op.name = "unary_" + fn;
  c.op.inputs = {{"x", {3, 4, 5}}};
  c.op.inputLo = lo;
  c.op.inputHi = hi;
  c.op.build = [fn](Builder& b, const std::vector<int>& v, const std::vector<int>&) {
    return b.unary(fn, v[0], "y", 0.5);
  };
  c.reference = [k](const Vals& v) {
    return call(60, [&](float* y, kernels::Range r) { ref::unary(k, 0.5f, whole(v[0]), y, r); });
  };
  c.covers = {"unary", "unary_grad"};
  return c;
}

Case binaryCase(const std::string& fn, kernels::BinaryKind k, Shape a, Shape bs) {
  Case c;
  c.op.name = "binary_" + fn + "_" + shapeStr(a) + shapeStr(bs);
  c.op.inputs = {{"a", a}, {"b", bs}};
  if (fn == "div") c.op.inputLo = 0.5f, c.op.inputHi = 1.5f;
  c.op.build = [fn](Builder& b, const std::vector<int>& v, const std::vector<int>&) {
    return b.binary(fn, v[0], v[1], "y");
  };
  c.reference = [k, a, bs](const Vals& v) {
    auto s = kernels::BroadcastShape::make(a, bs);
    return call(s.outElems(), [&](float* y, kernels::Range r) {
      ref::binary(k, s, whole(v[0]), whole(v[1]), y, r);
    });
  };
  c.covers = {"binary"};
  return c;
}

Case reduceCase(const std::string& fn, kernels::ReduceKind k, Shape x, std::vector<i64> axes,
                bool keep) {
  Case c;
  c.op.name = "reduce_" + fn + shapeStr(x) + shapeStr(axes);
  c.covers = {"reduce"};
  c.op.inputs = {{"x", x}};
  c.op.build = [fn, axes, keep](Builder& b, const std::vector<int>& v, const std::vector<int>&) {
    return b.reduce(fn, v[0], axes, keep, "y");
  };
  c.reference = [k, x, axes](const Vals& v) {
    kernels::ReduceShape s;
    s.inDims = x;
    s.reduced.assign(x.size(), false);
    for (i64 a : axes) s.reduced[a] = true;
    return call(s.outElems(), [&](float* y, kernels::Range r) {
      ref::reduce(k, s, whole(v[0]), y, r, {0, s.reducedCount()});
    });
  };
  return c;
}

Case poolCase(bool isMax, Shape x, Pool2dOptions o) {
  Case c;
  c.op.name = std::string(isMax ? "max" : "avg") + "_pool";
  c.covers = {isMax ? "max_pool" : "avg_pool", isMax ? "max_pool_grad" : "avg_pool_grad"};
  c.op.inputs = {{"x", x}};
  c.op.build = [isMax, o](Builder& b, const std::vector<int>& v, const std::vector<int>&) {
    return isMax ? b.maxPool(v[0], o, "y") : b.avgPool(v[0], o, "y");
  };
  c.reference = [isMax, x, o](const Vals& v) {
    kernels::Pool2dShape s{
        x[0],      x[1],     x[2],      x[3],        o.kernelH,  o.kernelW,        o.strideH,
        o.strideW, o.padTop, o.padLeft, o.padBottom, o.padRight, o.countIncludePad};
    return call(s.outputElems(), [&](float* y, kernels::Range r) {
      if (isMax)
        ref::maxPoolForward(s, whole(v[0]), y, r);
      else
        ref::avgPoolForward(s, whole(v[0]), y, r);
    });
  };
  if (isMax) c.fdStep = 2e-3f, c.fdTol = 5e-2;
  return c;
}

// ---- registered op kinds (ipu_backend/ops): plain references written here, in double ----------

Case layerNormCase(std::string name, i64 rows, i64 c, DType dt = DType::F32, i64 tileBytes = 0) {
  Case k = registeredCase({"layer_norm", "layer_norm_grad"}, dt);
  k.op.name = std::move(name);
  k.op.inputs = {{"x", {rows, c}}, {"gamma", {c}}, {"beta", {c}}};
  k.op.dtypes = {dt, DType::F32, DType::F32};
  k.op.tileBytes = tileBytes;
  k.op.build = [](Builder& b, const std::vector<int>& v, const std::vector<int>&) {
    Attrs a;
    a.set("eps", 1e-5);
    return ops::add(b.graph(), "layer_norm", {v[0], v[1], v[2]}, a, {"y", "mean", "rstd"})[0];
  };
  k.reference = [rows, c](const Vals& v) {
    std::vector<float> y(static_cast<size_t>(rows * c));
    for (i64 r = 0; r < rows; ++r) {
      double m = 0, var = 0;
      for (i64 j = 0; j < c; ++j) m += v[0][r * c + j];
      m /= static_cast<double>(c);
      for (i64 j = 0; j < c; ++j) var += (v[0][r * c + j] - m) * (v[0][r * c + j] - m);
      var /= static_cast<double>(c);
      for (i64 j = 0; j < c; ++j)
        y[r * c + j] =
            static_cast<float>((v[0][r * c + j] - m) / std::sqrt(var + 1e-5) * v[1][j] + v[2][j]);
    }
    return y;
  };
  return k;
}

Case gatherCase(std::string name, i64 v, i64 d, std::vector<std::int32_t> idx,
                DType dt = DType::F32, i64 tileBytes = 0) {
  Case k = registeredCase({"gather", "scatter_add"}, dt);
  k.op.name = std::move(name);
  k.op.inputs = {{"table", {v, d}}};
  k.op.dtypes = {dt};
  k.op.intInputs = {{"indices", idx}};
  k.op.tileBytes = tileBytes;
  k.op.build = [](Builder& b, const std::vector<int>& t, const std::vector<int>& i) {
    return ops::add(b.graph(), "gather", {t[0], i[0]}, {}, {"y"})[0];
  };
  k.reference = [d, idx](const Vals& t) {
    std::vector<float> y;
    for (std::int32_t r : idx)
      for (i64 j = 0; j < d; ++j) y.push_back(t[0][r * d + j]);
    return y;
  };
  return k;
}

Case scatterAddCase(std::string name, i64 v, i64 d, std::vector<std::int32_t> idx,
                    i64 tileBytes = 0, DType dt = DType::F32) {
  Case k = registeredCase({"scatter_add", "gather"}, dt);
  k.op.name = std::move(name);
  const i64 n = static_cast<i64>(idx.size());
  k.op.inputs = {{"updates", {n, d}}};
  k.op.dtypes = {dt};
  k.op.intInputs = {{"indices", idx}};
  k.op.tileBytes = tileBytes;
  k.op.build = [v](Builder& b, const std::vector<int>& u, const std::vector<int>& i) {
    Attrs a;
    a.set("rows", v);
    return ops::add(b.graph(), "scatter_add", {u[0], i[0]}, a, {"y"})[0];
  };
  k.reference = [v, d, idx](const Vals& u) {
    std::vector<double> y(static_cast<size_t>(v * d), 0.0);
    for (size_t k = 0; k < idx.size(); ++k)
      for (i64 j = 0; j < d; ++j) y[idx[k] * d + j] += u[0][k * d + j];
    return std::vector<float>(y.begin(), y.end());
  };
  return k;
}

Case groupNormCase(std::string name, Shape x, i64 groups, i64 tileBytes = 0) {
  Case k = registeredCase({"group_norm", "group_norm_grad"}, DType::F32);
  k.op.name = std::move(name);
  const i64 c = x.back(), n = x[0], p = numElements(x) / (n * c), cg = c / groups;
  k.op.inputs = {{"x", x}, {"gamma", {c}}, {"beta", {c}}};
  k.op.tileBytes = tileBytes;
  k.op.build = [groups](Builder& b, const std::vector<int>& v, const std::vector<int>&) {
    Attrs a;
    a.set("groups", groups);
    a.set("eps", 1e-5);
    return ops::add(b.graph(), "group_norm", {v[0], v[1], v[2]}, a, {"y", "mean", "rstd"})[0];
  };
  k.reference = [=](const Vals& v) {
    std::vector<float> y(v[0].size());
    for (i64 s = 0; s < n; ++s)
      for (i64 g = 0; g < groups; ++g) {
        auto at = [&](i64 q, i64 j) { return s * p * c + q * c + g * cg + j; };
        double m = 0, var = 0;
        for (i64 q = 0; q < p; ++q)
          for (i64 j = 0; j < cg; ++j) m += v[0][at(q, j)];
        m /= static_cast<double>(p * cg);
        for (i64 q = 0; q < p; ++q)
          for (i64 j = 0; j < cg; ++j) var += (v[0][at(q, j)] - m) * (v[0][at(q, j)] - m);
        var /= static_cast<double>(p * cg);
        for (i64 q = 0; q < p; ++q)
          for (i64 j = 0; j < cg; ++j)
            y[at(q, j)] = static_cast<float>(
                (v[0][at(q, j)] - m) / std::sqrt(var + 1e-5) * v[1][g * cg + j] + v[2][g * cg + j]);
      }
    return y;
  };
  return k;
}

Case geluCase(std::string name, const std::string& approximate, DType dt = DType::F32) {
  Case k = registeredCase({"gelu", "gelu_grad"}, dt);
  k.op.name = std::move(name);
  k.op.inputs = {{"x", {4, 9}}};
  k.op.dtypes = {dt};
  k.op.inputLo = -3.f, k.op.inputHi = 3.f;
  k.op.build = [approximate](Builder& b, const std::vector<int>& v, const std::vector<int>&) {
    Attrs a;
    a.set("approximate", approximate);
    return ops::add(b.graph(), "gelu", {v[0]}, a, {"y"})[0];
  };
  k.reference = [approximate](const Vals& v) {
    std::vector<float> y;
    for (double x : v[0])
      y.push_back(static_cast<float>(
          approximate == "tanh"
              ? 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)))
              : 0.5 * x * std::erfc(-x / std::sqrt(2.0))));
    return y;
  };
  return k;
}

// Scores x [B, heads, S, S] with an additive mask of `maskShape` (values 0 or -10000).
Case maskedSoftmaxCase(std::string name, Shape x, Shape maskShape, i64 tileBytes = 0,
                       DType dt = DType::F32) {
  Case k = registeredCase({"masked_softmax"}, dt);
  k.op.name = std::move(name);
  k.op.inputs = {{"x", x}, {"mask", maskShape}};
  k.op.dtypes = {dt, dt};
  k.op.differentiable = {true, false};
  k.op.tileBytes = tileBytes;
  k.op.inputLo = -2.f, k.op.inputHi = 2.f;
  k.op.build = [](Builder& b, const std::vector<int>& v, const std::vector<int>&) {
    // A mask of 0 and -10000 from the random values: drop where the value is below -0.5.
    const DType t = b.graph().tensor(v[1]).dtype;
    int drop = b.unary("relu", b.scale(b.binary("sub", b.constant({}, -0.5, t), v[1]), 1e6));
    int mask = b.scale(b.binary("min", drop, b.constant({}, 1.0, t)), -10000.0);
    return ops::add(b.graph(), "masked_softmax", {v[0], mask}, {}, {"y"})[0];
  };
  k.reference = [x, maskShape](const Vals& v) {
    const i64 c = x.back(), n = numElements(x);
    std::vector<float> y(static_cast<size_t>(n));
    // Broadcast by index arithmetic on the right-aligned shapes.
    auto maskAt = [&](i64 i) {
      i64 idx = 0, stride = 1;
      for (size_t k = 0; k < maskShape.size(); ++k) {
        const size_t dm = maskShape.size() - 1 - k, dx = x.size() - 1 - k;
        i64 outStride = 1;
        for (size_t d = dx + 1; d < x.size(); ++d) outStride *= x[d];
        if (maskShape[dm] != 1) idx += (i / outStride % x[dx]) * stride;
        stride *= maskShape[dm];
      }
      return v[1][idx] < -0.5f ? -10000.0 : 0.0;
    };
    for (i64 r = 0; r < n / c; ++r) {
      double mx = -1e300, s = 0;
      for (i64 j = 0; j < c; ++j) mx = std::max(mx, v[0][r * c + j] + maskAt(r * c + j));
      for (i64 j = 0; j < c; ++j) s += std::exp(v[0][r * c + j] + maskAt(r * c + j) - mx);
      for (i64 j = 0; j < c; ++j)
        y[r * c + j] = static_cast<float>(std::exp(v[0][r * c + j] + maskAt(r * c + j) - mx) / s);
    }
    return y;
  };
  return k;
}

Case maskedLmLossCase(std::string name, i64 v, std::vector<std::int32_t> labels,
                      i64 tileBytes = 0) {
  Case k = registeredCase({"masked_lm_loss", "masked_lm_loss_grad"}, DType::F32);
  k.op.name = std::move(name);
  const i64 np = static_cast<i64>(labels.size());
  k.op.inputs = {{"logits", {np, v}}, {"weights", {np}}};
  k.op.differentiable = {true, false};
  k.op.intInputs = {{"labels", labels}};
  k.op.inputLo = 0.f;
  k.op.tileBytes = tileBytes;
  k.op.build = [](Builder& b, const std::vector<int>& t, const std::vector<int>& i) {
    return ops::add(b.graph(), "masked_lm_loss", {t[0], i[0], t[1]}, {}, {"mlm_loss"})[0];
  };
  k.reference = [v, labels](const Vals& t) {
    double wsum = 1e-5;
    for (float w : t[1]) wsum += w;
    std::vector<float> y;
    for (size_t p = 0; p < labels.size(); ++p) {
      double s = 0;
      for (i64 j = 0; j < v; ++j) s += std::exp(static_cast<double>(t[0][p * v + j]));
      y.push_back(static_cast<float>(t[1][p] * (std::log(s) - t[0][p * v + labels[p]]) / wsum));
    }
    return y;
  };
  return k;
}

// The draw of global element (or sample) k at `step`: the op's documented generator.
bool dropped(std::uint64_t seed, std::int32_t step, i64 k, double rate) {
  const std::uint64_t bits =
      precision::srRandomBits(precision::deriveSeed(seed, static_cast<std::uint32_t>(step)), k);
  return (bits >> 40) < static_cast<std::uint64_t>(rate * (1u << 24));
}

Case dropoutCase(std::string name, Shape x, double rate, const std::string& mode,
                 std::vector<std::int32_t> key) {
  Case k = registeredCase({"dropout"}, DType::F32);
  k.op.name = std::move(name);
  k.op.inputs = {{"x", x}};
  k.op.intInputs = {{"key", key}};
  k.op.build = [rate, mode](Builder& b, const std::vector<int>& v, const std::vector<int>& i) {
    Attrs a;
    a.set("rate", rate);
    a.set("seed", i64{1234});
    a.set("mode", mode);
    return ops::add(b.graph(), "dropout", {v[0], i[0]}, a, {"y"})[0];
  };
  k.reference = [x, rate, mode, key](const Vals& v) {
    const i64 per = numElements(x) / x[0];
    std::vector<float> y;
    for (i64 i = 0; i < numElements(x); ++i) {
      const i64 g = key[1] * per + i;
      y.push_back(dropped(1234, key[0], mode == "sample" ? g / per : g, rate)
                      ? 0.f
                      : static_cast<float>(v[0][i] / (1 - rate)));
    }
    return y;
  };
  return k;
}

// x [O, L, I] -> x[:, b:e, :] (axis 1), or the concat of a and b along axis 1.
std::vector<float> sliceRef(const std::vector<float>& x, i64 o, i64 l, i64 in, i64 b, i64 e) {
  std::vector<float> y;
  for (i64 i = 0; i < o; ++i)
    for (i64 p = b; p < e; ++p)
      for (i64 j = 0; j < in; ++j) y.push_back(x[(i * l + p) * in + j]);
  return y;
}

Case sliceCase(std::string name, Shape x, i64 b, i64 e) {
  Case k = registeredCase({"slice", "concat"}, DType::F32);
  k.op.name = std::move(name);
  k.op.inputs = {{"x", x}};
  k.op.build = [b, e](Builder& bl, const std::vector<int>& v, const std::vector<int>&) {
    Attrs a;
    a.set("axis", i64{1});
    a.set("begin", b);
    a.set("end", e);
    return ops::add(bl.graph(), "slice", {v[0]}, a, {"y"})[0];
  };
  k.reference = [x, b, e](const Vals& v) { return sliceRef(v[0], x[0], x[1], x[2], b, e); };
  return k;
}

Case concatCase(std::string name, Shape a, Shape b) {
  Case k = registeredCase({"concat", "slice"}, DType::F32);
  k.op.name = std::move(name);
  k.op.inputs = {{"a", a}, {"b", b}};
  k.op.build = [](Builder& bl, const std::vector<int>& v, const std::vector<int>&) {
    Attrs at;
    at.set("axis", i64{-2});
    return ops::add(bl.graph(), "concat", {v[0], v[1]}, at, {"y"})[0];
  };
  k.reference = [a, b](const Vals& v) {
    std::vector<float> y;
    for (i64 i = 0; i < a[0]; ++i) {
      auto ra = sliceRef(v[0], a[0], a[1], a[2], 0, a[1]),
           rb = sliceRef(v[1], b[0], b[1], b[2], 0, b[1]);
      y.insert(y.end(), ra.begin() + i * a[1] * a[2], ra.begin() + (i + 1) * a[1] * a[2]);
      y.insert(y.end(), rb.begin() + i * b[1] * b[2], rb.begin() + (i + 1) * b[1] * b[2]);
    }
    return y;
  };
  return k;
}

Case selectCase() {
  Case k = registeredCase({"select", "constant"}, DType::F32);
  k.op.name = "select";
  k.op.inputs = {{"c", {4, 6}}, {"a", {4, 6}}, {"b", {4, 6}}};
  k.op.differentiable = {false, true, true};
  k.op.build = [](Builder& b, const std::vector<int>& v, const std::vector<int>&) {
    int cond = b.binary("min", b.relu(b.scale(v[0], 1e6)), b.constant({}, 1.0));
    return ops::add(b.graph(), "select", {cond, v[1], v[2]}, {}, {"y"})[0];
  };
  k.reference = [](const Vals& v) {
    std::vector<float> y;
    for (size_t i = 0; i < v[0].size(); ++i) y.push_back(v[0][i] > 0 ? v[1][i] : v[2][i]);
    return y;
  };
  return k;
}

void addRegisteredOpCases(std::vector<Case>& cs) {
  cs.push_back(sliceCase("slice_middle", {3, 5, 4}, 1, 4));
  cs.push_back(sliceCase("slice_first_row", {2, 6, 3}, 0, 1));
  cs.push_back(concatCase("concat", {3, 2, 4}, {3, 3, 4}));
  {  // 8 KiB tiles: outputs and inputs spread over tiles, windows from the sources' bounds
    Case k = sliceCase("slice_across_tiles", {4, 40, 16}, 5, 33);
    k.op.tileBytes = 8192;
    cs.push_back(k);
    k = concatCase("concat_across_tiles", {4, 20, 16}, {4, 30, 16});
    k.op.tileBytes = 8192;
    cs.push_back(k);
  }
  cs.push_back(selectCase());
  cs.push_back(dropoutCase("dropout", {6, 10}, 0.3, "element", {7, 0}));
  cs.push_back(dropoutCase("stochastic_depth", {8, 2, 2, 3}, 0.5, "sample", {3, 16}));
  // Samples of 2,500 elements: the fused kernel's 4,096-element chunks end inside samples.
  cs.push_back(dropoutCase("stochastic_depth_chunks", {4, 2500}, 0.5, "sample", {5, 2}));
  cs.push_back(maskedLmLossCase("masked_lm_loss", 7, {3, 0, 6, 2, 2, 5}));
  cs.push_back(maskedLmLossCase("masked_lm_loss_rows_across_tiles", 50, {3, 49, 0, 17}, 8192));
  cs.push_back(maskedSoftmaxCase("masked_softmax_bert_mask", {2, 3, 5, 5}, {2, 1, 1, 5}));
  cs.push_back(maskedSoftmaxCase("masked_softmax_per_query_mask", {3, 4, 6}, {1, 4, 6}, 8192));
  // The native 16-bit kernel (rows widened and rounded in cache), BERT's packed-sequence mask.
  cs.push_back(
      maskedSoftmaxCase("masked_softmax_bf16", {2, 3, 20, 20}, {2, 1, 20, 20}, 0, DType::BF16));
  cs.push_back(geluCase("gelu_tanh", "tanh"));
  cs.push_back(geluCase("gelu_erf", "none"));
  cs.push_back(geluCase("gelu_tanh_bf16", "tanh", DType::BF16));
  cs.push_back(geluCase("gelu_erf_f16", "none", DType::F16));
  cs.push_back(layerNormCase("layer_norm_f16", 6, 8, DType::F16));
  cs.push_back(gatherCase("gather_f16", 10, 6, {3, 0, 9, 3, 7}, DType::F16));
  cs.push_back(groupNormCase("group_norm", {2, 3, 3, 4}, 2));
  cs.push_back(groupNormCase("group_norm_split_positions", {4, 4, 4, 8}, 4, 8192));
  cs.push_back(gatherCase("gather", 10, 6, {3, 0, 9, 3, 7}));
  cs.push_back(gatherCase("gather_bf16", 10, 6, {3, 0, 9, 3, 7}, DType::BF16));
  // 8 KiB tiles: the 4 KiB table is looked up in row parts (multi-slice), never whole.
  cs.push_back(
      gatherCase("gather_multi_slice", 64, 16, {5, 63, 17, 40, 5, 0, 33, 22}, DType::F32, 8192));
  cs.push_back(scatterAddCase("scatter_add", 10, 6, {3, 0, 9, 3, 7}));
  // Native 16-bit kernel: repeated rows summed in f32 and rounded once; 20 columns: a block of
  // 16 and a partial one.
  cs.push_back(scatterAddCase("scatter_add_bf16", 10, 20, {3, 0, 9, 3, 7, 3}, 0, DType::BF16));
  cs.push_back(scatterAddCase("scatter_add_split", 12, 16,
                              {5, 11, 7, 3, 5, 0, 2, 2, 9, 1, 4, 6, 8, 10, 3, 5, 7, 1, 0, 11},
                              8192));
  // 8 KiB tiles, 32 columns: scattered in 4 column blocks (no partial tables), rows read back.
  cs.push_back(scatterAddCase("scatter_add_column_blocked", 24, 32,
                              {5, 23, 7, 3, 5, 0, 2, 2, 9, 1, 4, 6, 8, 10, 3, 5, 7, 1, 0, 11},
                              8192));
  cs.push_back(layerNormCase("layer_norm", 6, 8));
  cs.push_back(layerNormCase("layer_norm_bf16", 6, 8, DType::BF16));
  // 8 KiB tiles: dgamma / dbeta split over row parts with partials, rows cut across tiles.
  cs.push_back(layerNormCase("layer_norm_split_rows", 64, 24, DType::F32, 8192));
}

std::vector<Case> allCases() {
  using U = kernels::UnaryKind;
  using B = kernels::BinaryKind;
  using R = kernels::ReduceKind;
  std::vector<Case> cs;
  cs.push_back(convCase("conv_3x3_pad1", {2, 6, 6, 3}, {4, 3, 3, 3}, Conv2dOptions::make(1, 1)));
  {
    Conv2dOptions o = Conv2dOptions::make(2, 0, 2, 2);
    o.padTop = 1, o.padLeft = 0, o.padBottom = 1, o.padRight = 2;
    cs.push_back(convCase("conv_grouped_strided_dilated_asym", {2, 7, 7, 4}, {6, 3, 3, 2}, o));
  }
  cs.push_back(
      convCase("conv_depthwise", {2, 5, 5, 4}, {4, 3, 3, 1}, Conv2dOptions::make(1, 1, 4)));
  cs.push_back(convCase("conv_1x1_stride2", {2, 6, 6, 4}, {8, 1, 1, 4}, Conv2dOptions::make(2, 0)));
  // EfficientNet's spatial convs: depthwise 5x5 stride 2, and G16's groups of 16 channels.
  cs.push_back(convCase("conv_depthwise_5x5_stride2", {2, 9, 9, 8}, {8, 5, 5, 1},
                        Conv2dOptions::make(2, 2, 8)));
  cs.push_back(convCase("conv_g16", {2, 6, 6, 32}, {32, 3, 3, 16}, Conv2dOptions::make(1, 1, 2)));
  cs.push_back(
      convCase("conv_g16_stride2", {2, 7, 7, 48}, {48, 3, 3, 16}, Conv2dOptions::make(2, 1, 3)));
  {  // 8 KiB tiles: channel-blocked outputs and backward-data split over k, within groups
    Case c = convCase("conv_depthwise_large_weights", {2, 5, 5, 64}, {64, 3, 3, 1},
                      Conv2dOptions::make(1, 1, 64));
    c.op.tileBytes = 8192;
    cs.push_back(c);
    c = convCase("conv_g16_large_weights", {2, 5, 5, 32}, {32, 3, 3, 16},
                 Conv2dOptions::make(1, 1, 2));
    c.op.tileBytes = 8192;
    cs.push_back(c);
  }
  {  // 8 KiB tiles: the grouped plans in blocks of groups (x and dy copied into channel blocks,
     // conv2d / backward data / backward filter reading one block's rows), f16 operands too
    Case c = convCase("conv_depthwise_5x5_group_blocks", {1, 5, 5, 24}, {24, 5, 5, 1},
                      Conv2dOptions::make(1, 2, 24));
    c.op.tileBytes = 8192;
    cs.push_back(c);
    c.op.name = "conv_depthwise_5x5_group_blocks_f16";
    c.op.dtypes = {DType::F16, DType::F16};
    c.fwdTol = c.tileTol = 4e-3;
    c.tileGradTol = 4e-3;
    c.fdTol = 5e-2;
    cs.push_back(c);
    c = convCase("conv_g16_stride2_group_blocks", {1, 5, 5, 48}, {48, 3, 3, 16},
                 Conv2dOptions::make(2, 1, 3));
    c.op.tileBytes = 8192;
    cs.push_back(c);
  }
  {  // 8 KiB tiles: an ungrouped data gradient split over k with dy copied into k-blocks (each
     // part reading its channels' dy rows only), f16 operands too
    Case c =
        convCase("conv_1x1_dy_k_blocks", {2, 4, 4, 8}, {64, 1, 1, 8}, Conv2dOptions::make(1, 0));
    c.op.tileBytes = 8192;
    cs.push_back(c);
    c.op.name = "conv_1x1_dy_k_blocks_f16";
    c.op.dtypes = {DType::F16, DType::F16};
    c.fwdTol = c.tileTol = 4e-3;
    c.tileGradTol = 4e-3;
    c.fdTol = 5e-2;
    cs.push_back(c);
  }
  {  // ResNet's 3x3 stride-1 shape class (>= 64 channels, >= 7x7): Winograd F(4x4, 3x3), the
     // ISA's own (oneDNN's on AVX-512, ours on AVX2) and ours forced on any ISA.
    Case c =
        convCase("conv_3x3_winograd", {1, 9, 9, 64}, {64, 3, 3, 64}, Conv2dOptions::make(1, 1));
    c.fwdTol = c.tileTol = 1e-4;  // Winograd rounds differently from the direct sums
    cs.push_back(c);
    c.op.name = "conv_3x3_own_winograd";
    c.convAlgorithm = kernels::fused::ConvAlgorithm::OwnWinograd;
    cs.push_back(c);
  }
  {  // The AVX2 rule's matmul routes, on any host: a 3x3 stride-2 convolution as im2col + matmul
     // (forward, weight gradient), pointwise and strided pointwise weight gradients with C < K
     // as (x^T dy)^T.
    Case c = convCase("conv_3x3_stride2_avx2_im2col", {2, 9, 9, 16}, {16, 3, 3, 16},
                      Conv2dOptions::make(2, 1));
    c.ruleIsa = kernels::fused::KernelIsa::Avx2;
    cs.push_back(c);
    c = convCase("conv_1x1_avx2_wide_weight_grad", {2, 6, 6, 8}, {24, 1, 1, 8},
                 Conv2dOptions::make(1, 0));
    c.ruleIsa = kernels::fused::KernelIsa::Avx2;
    cs.push_back(c);
    c = convCase("conv_1x1_stride2_avx2_wide_weight_grad", {2, 6, 6, 4}, {8, 1, 1, 4},
                 Conv2dOptions::make(2, 0));
    c.ruleIsa = kernels::fused::KernelIsa::Avx2;
    cs.push_back(c);
  }
  cs.push_back(matmulCase("matmul", {5, 7}, {7, 3}, false, false));
  cs.push_back(matmulCase("matmul_ta", {7, 5}, {7, 3}, true, false));
  cs.push_back(matmulCase("matmul_tb", {5, 7}, {3, 7}, false, true));
  cs.push_back(matmulCase("matmul_ta_tb", {7, 5}, {3, 7}, true, true));
  cs.push_back(matmulCase("matmul_batched_broadcast", {2, 4, 5}, {5, 3}, false, false));
  // Operands larger than a vertex's window budget (8 KiB tiles: 1 KiB): channel-blocked conv
  // outputs, conv backward-data and matmul split over k with partials, matmul cut at row ends.
  {
    Case c = convCase("conv_large_weights", {2, 5, 5, 8}, {12, 3, 3, 8}, Conv2dOptions::make(1, 1));
    c.op.tileBytes = 8192;
    cs.push_back(c);
    c = matmulCase("matmul_large_b_split_over_k", {6, 40}, {40, 30}, false, false);
    c.op.tileBytes = 8192;
    cs.push_back(c);
    c = matmulCase("matmul_large_b_transposed", {6, 40}, {30, 40}, false, true);
    c.op.tileBytes = 8192;
    cs.push_back(c);
  }
  cs.push_back(matmulCase("matmul_batched", {2, 4, 5}, {2, 5, 3}, false, false));
  {  // bf16 operands: oneDNN's bf16 matmul in fused mode, against a plain double reference
    Case c = matmulCase("matmul_bf16", {5, 7}, {7, 3}, false, false);
    c.op.dtypes = {DType::BF16, DType::BF16};
    c.referenceIsTileKernel = false;
    c.reference = [](const Vals& v) {
      std::vector<float> y;
      for (int i = 0; i < 5; ++i)
        for (int j = 0; j < 3; ++j) {
          double acc = 0;
          for (int k = 0; k < 7; ++k) acc += static_cast<double>(v[0][i * 7 + k]) * v[1][k * 3 + j];
          y.push_back(static_cast<float>(acc));
        }
      return y;
    };
    c.fwdTol = 2e-2, c.tileTol = 1e-2, c.tileGradTol = 2e-2;
    cs.push_back(c);
  }
  cs.push_back(matmulCase("matmul_batched_tb", {2, 4, 5}, {2, 3, 5}, false, true));
  cs.push_back(unaryCase("relu", U::Relu));
  cs.push_back(unaryCase("sigmoid", U::Sigmoid));
  cs.push_back(unaryCase("tanh", U::Tanh));
  cs.push_back(unaryCase("gelu", U::Gelu));
  cs.push_back(unaryCase("swish", U::Swish));
  cs.push_back(unaryCase("exp", U::Exp));
  cs.push_back(unaryCase("square", U::Square));
  cs.push_back(unaryCase("log", U::Log, 0.5f, 2.f));
  cs.push_back(unaryCase("sqrt", U::Sqrt, 0.5f, 2.f));
  cs.push_back(unaryCase("rsqrt", U::Rsqrt, 0.5f, 2.f));
  cs.push_back(unaryCase("scale", U::Scale));
  cs.push_back(binaryCase("add", B::Add, {4, 5}, {5}));
  cs.push_back(binaryCase("sub", B::Sub, {4, 5}, {4, 1}));
  cs.push_back(binaryCase("mul", B::Mul, {3, 1, 4}, {1, 2, 4}));
  cs.push_back(binaryCase("div", B::Div, {3, 4}, {3, 4}));
  cs.push_back(binaryCase("add", B::Add, {2, 3, 3, 4}, {2, 3, 3, 4}));
  cs.push_back(reduceCase("sum", R::Sum, {3, 4, 5}, {0, 1}, false));
  cs.push_back(reduceCase("mean", R::Mean, {2, 3, 4, 5}, {1, 2}, false));
  cs.push_back(reduceCase("sum", R::Sum, {3, 4, 5}, {2}, true));
  cs.push_back(reduceCase("mean", R::Mean, {6, 4}, {0, 1}, false));
  // Squeeze-excite: the per-image channel mean [N,1,1,C] and the gate broadcast over H, W.
  cs.push_back(reduceCase("mean", R::Mean, {2, 3, 3, 8}, {1, 2}, true));
  {
    // bf16 x (EfficientNet's squeeze-excitation pooling): the native loop widens as it reads.
    Case k = reduceCase("mean", R::Mean, {2, 5, 5, 40}, {1, 2}, true);
    const Case bf16 = registeredCase({"reduce"}, DType::BF16);
    k.op.name += "_bf16";
    k.op.dtypes = {DType::BF16};
    k.fwdTol = bf16.fwdTol, k.tileTol = bf16.tileTol, k.tileGradTol = bf16.tileGradTol;
    k.fdTol = bf16.fdTol;
    cs.push_back(k);
  }
  cs.push_back(binaryCase("mul", B::Mul, {2, 3, 3, 8}, {2, 1, 1, 8}));
  {
    // bf16 with a broadcast operand (EfficientNet's squeeze-excitation scale): the native loop
    // widens and rounds a block at a time, the same bits as tile mode's vertices.
    Case k = binaryCase("mul", B::Mul, {2, 5, 5, 40}, {2, 1, 1, 40});
    const Case bf16 = registeredCase({"binary"}, DType::BF16);
    k.op.name += "_bf16";
    k.op.dtypes = {DType::BF16, DType::BF16};
    k.fwdTol = bf16.fwdTol, k.tileTol = 0.0, k.tileGradTol = bf16.tileGradTol;
    k.fdTol = bf16.fdTol;
    cs.push_back(k);
  }
  cs.push_back(poolCase(true, {2, 7, 7, 3}, Pool2dOptions::make(3, 2, 1)));
  cs.push_back(poolCase(false, {2, 6, 6, 3}, Pool2dOptions::make(2, 2, 0)));
  {
    Pool2dOptions o = Pool2dOptions::make(3, 1, 1);
    o.countIncludePad = true;
    cs.push_back(poolCase(false, {1, 5, 5, 2}, o));
  }
  {
    Case c = registeredCase({"reshape"}, DType::F32);
    c.op.name = "reshape";
    c.op.inputs = {{"x", {2, 3, 4}}};
    c.op.build = [](Builder& b, const std::vector<int>& v, const std::vector<int>&) {
      return b.reshape(v[0], {6, 4}, "y");
    };
    c.reference = [](const Vals& v) { return v[0]; };
    cs.push_back(c);
  }
  {
    Case c = registeredCase({"transpose"}, DType::F32);
    c.op.name = "transpose";
    c.op.inputs = {{"x", {2, 3, 4}}};
    c.op.build = [](Builder& b, const std::vector<int>& v, const std::vector<int>&) {
      return b.transpose(v[0], {2, 0, 1}, "y");
    };
    c.reference = [](const Vals& v) {  // y[k, i, j] = x[i, j, k]
      std::vector<float> y;
      for (int k = 0; k < 4; ++k)
        for (int i = 0; i < 2; ++i)
          for (int j = 0; j < 3; ++j) y.push_back(v[0][(i * 3 + j) * 4 + k]);
      return y;
    };
    cs.push_back(c);
  }
  {
    Case c;
    c.op.name = "broadcast";
    c.covers = {"broadcast"};
    c.referenceIsTileKernel = false;  // the reference below is a plain loop
    c.op.inputs = {{"x", {1, 5}}};
    c.op.build = [](Builder& b, const std::vector<int>& v, const std::vector<int>&) {
      return b.broadcast(v[0], {3, 5}, "y");
    };
    c.reference = [](const Vals& v) {
      std::vector<float> y;
      for (int i = 0; i < 3; ++i) y.insert(y.end(), v[0].begin(), v[0].end());
      return y;
    };
    cs.push_back(c);
  }
  {
    Case c = registeredCase({"softmax", "softmax_grad"}, DType::F32);
    c.op.name = "softmax";
    c.op.inputs = {{"x", {4, 6}}};
    c.op.build = [](Builder& b, const std::vector<int>& v, const std::vector<int>&) {
      return b.softmax(v[0], "y");
    };
    c.reference = [](const Vals& v) {
      std::vector<float> y;
      for (int r = 0; r < 4; ++r) {
        double s = 0;
        for (int j = 0; j < 6; ++j) s += std::exp(static_cast<double>(v[0][r * 6 + j]));
        for (int j = 0; j < 6; ++j) y.push_back(static_cast<float>(std::exp(v[0][r * 6 + j]) / s));
      }
      return y;
    };
    cs.push_back(c);
  }
  {
    Case c = registeredCase({"softmax_cross_entropy", "softmax_cross_entropy_grad"}, DType::F32);
    c.op.name = "softmax_cross_entropy_smoothed";
    c.op.inputs = {{"logits", {4, 5}}};
    c.op.intInputs = {{"labels", {0, 3, 4, 1}}};
    c.op.build = [](Builder& b, const std::vector<int>& v, const std::vector<int>& ints) {
      return b.softmaxCrossEntropy(v[0], ints[0], 0.1, "y");
    };
    c.reference = [](const Vals& v) {  // -sum_j target_j log softmax_j, in double
      const std::vector<int> lb = {0, 3, 4, 1};
      std::vector<float> y;
      for (int n = 0; n < 4; ++n) {
        double mx = -1e300, s = 0, loss = 0;
        for (int j = 0; j < 5; ++j) mx = std::max(mx, static_cast<double>(v[0][n * 5 + j]));
        for (int j = 0; j < 5; ++j) s += std::exp(v[0][n * 5 + j] - mx);
        for (int j = 0; j < 5; ++j)
          loss -= ((j == lb[n] ? 0.9 : 0.0) + 0.1 / 5) * (v[0][n * 5 + j] - mx - std::log(s));
        y.push_back(static_cast<float>(loss));
      }
      return y;
    };
    cs.push_back(c);
  }
  {
    Case c;
    c.op.name = "batch_norm_train";
    c.op.inputs = {{"x", {4, 3, 3, 5}}, {"gamma", {5}}, {"beta", {5}}};
    c.op.build = [](Builder& b, const std::vector<int>& v, const std::vector<int>&) {
      return b.batchNormTrain(v[0], v[1], v[2], 1e-5, "y").y;
    };
    c.covers = {"batch_norm_train", "batch_norm_backward"};
    c.reference = [](const Vals& v) {
      // Plain two-pass statistics, then the normalisation kernel.
      i64 rows = 36, ch = 5;
      std::vector<float> mean(5, 0.f), var(5, 0.f);
      for (i64 r = 0; r < rows; ++r)
        for (i64 k = 0; k < ch; ++k) mean[k] += v[0][r * ch + k] / rows;
      for (i64 r = 0; r < rows; ++r)
        for (i64 k = 0; k < ch; ++k) {
          float d = v[0][r * ch + k] - mean[k];
          var[k] += d * d / rows;
        }
      return call(rows * ch, [&](float* y, kernels::Range r) {
        ref::batchNormNormalize(rows, ch, 1e-5f, whole(v[0]), whole(mean), whole(var), whole(v[1]),
                                whole(v[2]), y, r);
      });
    };
    cs.push_back(c);
    // bf16 activations, f32 parameters: oneDNN's bf16 batch norm (nativeFused) in fused mode
    // where the CPU has it, widened f32 kernels in tile mode.
    c.op.name = "batch_norm_train_bf16";
    c.op.dtypes = {DType::BF16, DType::F32, DType::F32};
    c.referenceIsTileKernel = false;
    c.fwdTol = 2e-2, c.tileTol = 1e-2, c.tileGradTol = 2e-2;
    cs.push_back(c);
  }
  {
    Case c;
    c.op.name = "batch_norm_inference";
    c.op.inputs = {{"x", {3, 2, 2, 4}}, {"gamma", {4}}, {"beta", {4}}, {"mean", {4}}, {"var", {4}}};
    c.op.differentiable = {false, false, false, false, false};
    c.op.inputLo = 0.2f;
    c.op.build = [](Builder& b, const std::vector<int>& v, const std::vector<int>&) {
      return b.batchNormInference(v[0], v[1], v[2], v[3], v[4], 1e-5, "y");
    };
    c.covers = {"batch_norm_inference"};
    c.reference = [](const Vals& v) {
      return call(48, [&](float* y, kernels::Range r) {
        ref::batchNormNormalize(12, 4, 1e-5f, whole(v[0]), whole(v[3]), whole(v[4]), whole(v[1]),
                                whole(v[2]), y, r);
      });
    };
    cs.push_back(c);
  }
  addRegisteredOpCases(cs);
  return cs;
}

// Every registered op kind has every facet and is exercised by a case of the table above; every
// built-in kind is registered or still handled by the per-layer switches (the list below, which
// shrinks as kinds move into ipu_backend/ops).
TEST(OpRegistry, EveryOpKindHasEveryFacetAndACase) {
  const std::vector<Case> cases = allCases();
  for (const ops::OpInfo* info : ops::all()) {
    const std::string n(info->def.name);
    EXPECT_TRUE(info->infer) << n << ": no type inference";
    EXPECT_TRUE(info->grad) << n << ": no gradient rule (use ops::noGradient to say why)";
    if (info->lowered) {  // replaced by ordinary ops in compile(): nothing to plan or run
      EXPECT_FALSE(info->plan || info->vertex || info->fused || info->cost || info->replica) << n;
    } else {
      EXPECT_TRUE(info->plan) << n << ": no tile plan";
      EXPECT_TRUE(info->cost) << n << ": no cost rule";
      if (info->replica) {  // runs off the tiles in both modes
        EXPECT_TRUE(info->linkTraffic) << n << ": a replica op without its link traffic";
        EXPECT_FALSE(info->vertex || info->fused) << n << ": replica ops run through `replica`";
      } else {
        EXPECT_TRUE(info->vertex) << n << ": no reference (tile) kernel";
        EXPECT_TRUE(info->fused) << n << ": no fused kernel";
      }
    }
    EXPECT_FALSE(info->doc.empty()) << n << ": no doc line";
    EXPECT_EQ(info->inputDTypes.size(),
              info->def.numInputs < 0 ? 1 : static_cast<size_t>(info->def.numInputs))
        << n;
    for (const ops::DTypes& d : info->inputDTypes) EXPECT_FALSE(d.empty()) << n;
    EXPECT_EQ(&opDef(info->def.kind), &info->def) << n << ": the IR does not see the registration";
    bool covered = std::any_of(cases.begin(), cases.end(), [&](const Case& c) {
      return std::find(c.covers.begin(), c.covers.end(), n) != c.covers.end();
    });
    // In-place ops have no output for the table's probe loss: dedicated tests check them.
    const std::map<std::string, std::string> coveredByTests = {
        {"assign", "InPlaceOps.AssignAndAccumulateInBothModes"},
        {"accumulate", "InPlaceOps.AssignAndAccumulateInBothModes"},
        {"lars_learning_rate", "Lars.MatchesTensorFlowsLarsOptimizerInBothModes"},
        {"ema_update", "InPlaceOps.EmaUpdateInBothModes"},
        {"cast", "Cast.RoundsToNearestEvenAndStoresSixteenBitsInBothModes"},
        // Every optimizer lowers its optimizer_update to ordinary ops and apply_updates, checked
        // against plain references over several steps in both modes.
        {"apply_update", "AllOptimizers/OptimizerReference.MatchesOverSeveralStepsInBothModes"},
        {"optimizer_update", "Optimizers.EveryOneLowersToOrdinaryOpsAndApplyUpdate"},
        // Replica ops run through the engine's collective: the replication tests check them
        // against one replica of the global batch, in both modes and over processes.
        {"cross_replica_reduce_scatter",
         "Replication.ReplicasOfMicroBatchEqualOneReplicaOfGlobalBatch"},
        {"cross_replica_all_gather",
         "Replication.ReplicasOfMicroBatchEqualOneReplicaOfGlobalBatch"},
        {"replica_chunk", "Replication.ShardedOptimizerStateMatchesAndSavesMemory"},
        {"cross_replica_sum", "BnSpan.TileModeAgreesWithFusedMode"}};
    covered = covered || coveredByTests.count(n) != 0;
    EXPECT_TRUE(covered) << n << ": no case in ops_test's table exercises it";
  }
  // No op kind is handled outside the registry: every built-in enum value has its OpInfo.
  for (int k = 0; k < ops::kindCount(); ++k)
    EXPECT_NE(ops::find(static_cast<OpKind>(k)), nullptr)
        << "op kind " << k << " is not registered (ipu_backend/ops)";
}

class OpCheck : public ::testing::TestWithParam<size_t> {};

void expectNear(const std::vector<float>& got, const std::vector<float>& want, double rel,
                const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = std::max(1e-3, maxAbs(want));
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], rel * scale) << what << " element " << i;
}

TEST_P(OpCheck, ForwardMatchesReference) {
  Case c = allCases()[GetParam()];
  ConvAlgorithmScope algorithm(c);
  OpHarness h(c.op, /*withGrads=*/false);
  auto want = c.reference(h.values());
  expectNear(h.run(EngineMode::Fused).output, want, c.fwdTol, c.op.name + " fused forward");
  if (!c.referenceIsTileKernel)
    expectNear(h.run(EngineMode::Tile).output, want, c.fwdTol, c.op.name + " tile forward");
}

TEST_P(OpCheck, TileModeEqualsFusedMode) {
  Case c = allCases()[GetParam()];
  ConvAlgorithmScope algorithm(c);
  OpHarness h(c.op);
  OpRun f = h.run(EngineMode::Fused), t = h.run(EngineMode::Tile);
  expectNear(t.output, f.output, c.tileTol, c.op.name + " output");
  for (size_t i = 0; i < f.grads.size(); ++i)
    expectNear(t.grads[i], f.grads[i], c.tileGradTol,
               c.op.name + " grad of input " + std::to_string(i));
}

TEST_P(OpCheck, BackwardMatchesFiniteDifferences) {
  Case c = allCases()[GetParam()];
  ConvAlgorithmScope algorithm(c);
  // Central differences of a 16-bit op are rounding noise: those cases check the gradient
  // through tile == fused and their f32 twin's finite differences.
  if (std::any_of(c.op.dtypes.begin(), c.op.dtypes.end(), [](DType t) { return t != DType::F32; }))
    GTEST_SKIP() << c.op.name << ": 16-bit case; its f32 twin checks the finite differences";
  OpHarness h(c.op);
  OpRun f = h.run(EngineMode::Fused);
  for (size_t i = 0; i < f.grads.size(); ++i) {
    if (f.grads[i].empty()) continue;
    double scale = std::max(1e-2, maxAbs(f.grads[i]));
    size_t n = f.grads[i].size(), step = std::max<size_t>(1, n / 12);
    for (size_t k = 0; k < n; k += step) {
      if (std::abs(h.values()[i][k]) < 2 * c.fdStep) continue;  // stay off ReLU-style kinks
      double fd = h.finiteDifference(i, k, c.fdStep);
      EXPECT_NEAR(f.grads[i][k], fd, c.fdTol * scale)
          << c.op.name << ": d loss / d input" << i << "[" << k << "]";
    }
  }
}

// PERF mode over the same cases (ggml's test-backend-ops has one): OPS_PERF=<repetitions> prints
// the median time of one step (forward and backward) of each case in both engine modes.
class OpPerf : public ::testing::TestWithParam<size_t> {};
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(OpPerf);

TEST_P(OpPerf, StepTime) {
  const char* reps = std::getenv("OPS_PERF");
  Case c = allCases()[GetParam()];
  OpHarness h(c.op);
  for (EngineMode mode : {EngineMode::Fused, EngineMode::Tile}) {
    std::vector<double> ms;
    for (int r = 0; r < std::max(1, std::atoi(reps)); ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      h.run(mode);
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::nth_element(ms.begin(), ms.begin() + static_cast<long>(ms.size() / 2), ms.end());
    std::printf("PERF %-40s %-5s %9.3f ms (median of %zu, engine built per run)\n",
                c.op.name.c_str(), std::string(engineModeName(mode)).c_str(), ms[ms.size() / 2],
                ms.size());
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, OpPerf,
                         ::testing::Range<size_t>(0,
                                                  std::getenv("OPS_PERF") ? allCases().size() : 0));
INSTANTIATE_TEST_SUITE_P(AllOps, OpCheck, ::testing::Range<size_t>(0, allCases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           std::string n = allCases()[info.param].op.name;
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n + "_" + std::to_string(info.param);
                         });

TEST(SgdUpdate, MatchesPyTorchSemanticsInBothModes) {
  // w -= lr * v with v = m v + (g + wd w); two steps with the host-fed learning rate.
  Graph g("sgd");
  Builder b(g);
  int w = b.variable("w", {7});
  int x = b.input("x", {7});
  int lr = b.input("lr", {});
  int loss = b.reduceSum(b.mul(w, x), {0}, false, "loss");
  auto grads = appendBackward(g, loss, {w}).grads;
  SgdOptions o;
  o.momentum = 0.9;
  o.weightDecay = 0.01;
  appendSgdUpdate(g, grads, lr, o);
  auto exe = std::make_shared<Executable>(compile(std::move(g), testTarget()));
  for (EngineMode mode : {EngineMode::Fused, EngineMode::Tile}) {
    Engine e(exe, mode);
    std::vector<float> w0 = randomVec(7, 1), xs = randomVec(7, 2);
    e.writeTensor("w", w0);
    e.writeTensor("w/momentum", std::vector<float>(7, 0.f));
    e.connectInput(exe->graph.get("x"), xs.data());
    std::vector<double> wr(w0.begin(), w0.end()), v(7, 0.0);
    for (float step_lr : {0.1f, 0.05f}) {
      e.connectInput(exe->graph.get("lr"), &step_lr);
      e.run();
      for (int i = 0; i < 7; ++i) {
        double gi = xs[i] + 0.01 * wr[i];
        v[i] = 0.9 * v[i] + gi;
        wr[i] -= step_lr * v[i];
      }
    }
    auto got = e.readFloats("w");
    for (int i = 0; i < 7; ++i) EXPECT_NEAR(got[i], wr[i], 1e-5) << engineModeName(mode);
  }
}

}  // namespace
}  // namespace ipu::testing

namespace ipu::testing {
namespace {

// The multi-slice plan: with a table four times a vertex's window budget no vertex reads the
// whole table, and the lookups are split over several row parts.
TEST(Gather, LooksUpATableLargerThanTheWindowBudgetInRowParts) {
  OpCase c = gatherCase("g", 64, 16, {5, 63, 17, 40}, DType::F32, 8192).op;
  OpHarness h(c, /*withGrads=*/false);
  const Executable& exe = h.exe();
  const int table = exe.graph.get("table");
  std::set<std::pair<i64, i64>> parts;
  for (const ComputeSet& cs : exe.computeSets)
    for (const Vertex& v : cs.vertices)
      for (const Window& w : v.inputs)
        if (w.buffer == table) {
          EXPECT_LT(w.end - w.begin, 64 * 16) << cs.name << " reads the whole table";
          parts.insert({w.begin, w.end});
        }
  EXPECT_GE(parts.size(), 4u);
}

TEST(Gather, AnIndexOutsideTheTableIsAnErrorNamingIt) {
  OpCase c = gatherCase("g", 10, 4, {3, 10, 1}).op;
  OpHarness h(c, /*withGrads=*/false);
  try {
    h.run(EngineMode::Fused);
    FAIL() << "no error for index 10 of a 10-row table";
  } catch (const std::out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("index 10 at position 1 of 'indices'"), std::string::npos)
        << e.what();
  }
  // Tile vertices cannot throw: the row they cannot look up is NaN, not a silent number.
  OpRun t = h.run(EngineMode::Tile);
  EXPECT_TRUE(std::isnan(t.output[4]));
  EXPECT_FALSE(std::isnan(t.output[0]));
}

}  // namespace
}  // namespace ipu::testing

namespace ipu::testing {
namespace {

// Golden values from PyTorch 2 (torch.nn.functional.gelu in float64, both forms).
TEST(Gelu, MatchesPyTorch) {
  const std::vector<float> x = {-3.0f, -1.5f, -0.5f, 0.0f, 0.25f, 1.0f, 2.5f};
  const std::map<std::string, std::vector<double>> want = {
      {"tanh",
       {-0.00363739208177, -0.10042842302, -0.154285990175, 0, 0.149675350702, 0.841191990608,
        2.48491573391}},
      {"none",
       {-0.00404969409489, -0.100210801903, -0.154268769363, 0, 0.149676581421, 0.841344746069,
        2.48447583669}}};
  for (const auto& [form, values] : want) {
    Graph g("gelu");
    Builder b(g);
    int in = b.input("x", {7});
    Attrs a;
    a.set("approximate", form);
    int y = ops::add(g, "gelu", {in}, a, {"y"})[0];
    g.markOutput(y);
    auto exe = std::make_shared<Executable>(compile(std::move(g), testTarget()));
    for (EngineMode mode : {EngineMode::Fused, EngineMode::Tile}) {
      Engine e(exe, mode);
      std::vector<float> got(7);
      e.connectInput(exe->graph.get("x"), x.data());
      e.connectOutput(exe->graph.get("y"), got.data());
      e.run();
      for (size_t i = 0; i < x.size(); ++i)
        EXPECT_NEAR(got[i], values[i], 1e-6)
            << form << " " << engineModeName(mode) << " x=" << x[i];
    }
  }
}

}  // namespace
}  // namespace ipu::testing

namespace ipu::testing {
namespace {

std::vector<float> runDropout(const std::vector<float>& x, i64 rows, std::vector<std::int32_t> key,
                              EngineMode mode, double rate = 0.25) {
  Graph g("dropout");
  Builder b(g);
  const i64 cols = static_cast<i64>(x.size()) / rows;
  int in = b.input("x", {rows, cols}), k = b.input("key", {2}, DType::I32);
  Attrs a;
  a.set("rate", rate);
  a.set("seed", i64{99});
  int y = ops::add(g, "dropout", {in, k}, a, {"y"})[0];
  g.markOutput(y);
  auto exe = std::make_shared<Executable>(compile(std::move(g), testTarget()));
  Engine e(exe, mode);
  std::vector<float> out(x.size());
  e.connectInput(exe->graph.get("x"), x.data());
  e.connectInput(exe->graph.get("key"), key.data());
  e.connectOutput(exe->graph.get("y"), out.data());
  e.run();
  return out;
}

// A batch split over two replicas (each fed the global index of its first sample) draws the
// bits of the whole batch, in both modes; another step draws other bits.
TEST(Dropout, ReplicaSplitsAndModesDrawTheSameBits) {
  const std::vector<float> x = randomVec(8 * 300, 5, 0.5f, 1.5f);
  const auto whole = runDropout(x, 8, {11, 0}, EngineMode::Fused);
  std::vector<float> lo(x.begin(), x.begin() + 4 * 300), hi(x.begin() + 4 * 300, x.end());
  for (EngineMode mode : {EngineMode::Fused, EngineMode::Tile}) {
    auto a = runDropout(lo, 4, {11, 0}, mode), b = runDropout(hi, 4, {11, 4}, mode);
    a.insert(a.end(), b.begin(), b.end());
    EXPECT_EQ(a, whole) << engineModeName(mode);
  }
  EXPECT_NE(runDropout(x, 8, {12, 0}, EngineMode::Fused), whole);
  const auto zeros = std::count(whole.begin(), whole.end(), 0.0f);
  // 2,400 draws at rate 0.25: 600 expected, standard deviation 21.
  EXPECT_NEAR(static_cast<double>(zeros), 600.0, 4 * 21.2);
}

}  // namespace
}  // namespace ipu::testing

namespace ipu::testing {
namespace {

TEST(InPlaceOps, AssignAndAccumulateInBothModes) {
  Graph g("in_place");
  Builder b(g);
  int acc = b.variable("acc", {40}), w = b.variable("w", {40});
  int x = b.input("x", {40});
  g.addOp(OpKind::Accumulate, {acc, x}, {});
  g.addOp(OpKind::Assign, {w, x}, {});
  auto exe = std::make_shared<Executable>(compile(std::move(g), Target::small(16, 8192)));
  const std::vector<float> a0 = randomVec(40, 1), w0 = randomVec(40, 2), xs = randomVec(40, 3);
  for (EngineMode mode : {EngineMode::Fused, EngineMode::Tile}) {
    Engine e(exe, mode);
    e.writeTensor("acc", a0);
    e.writeTensor("w", w0);
    e.connectInput(exe->graph.get("x"), xs.data());
    e.run();
    e.run();
    auto acc1 = e.readFloats("acc"), w1 = e.readFloats("w");
    for (int i = 0; i < 40; ++i) {
      EXPECT_FLOAT_EQ(acc1[i], a0[i] + xs[i] + xs[i]) << engineModeName(mode) << " " << i;
      EXPECT_EQ(w1[i], xs[i]) << engineModeName(mode) << " " << i;
    }
  }
}

// running = m running + (1 - m) scale value, against a plain loop in double.
TEST(InPlaceOps, EmaUpdateInBothModes) {
  Graph g("ema");
  Builder b(g);
  int running = b.variable("running", {300});
  int x = b.input("x", {300});
  g.addOp(OpKind::EmaUpdate, {running, x}, Attrs{{"momentum", 0.9}, {"scale", 1.25}});
  auto exe = std::make_shared<Executable>(compile(std::move(g), Target::small(16, 8192)));
  const std::vector<float> r0 = randomVec(300, 4), xs = randomVec(300, 5);
  for (EngineMode mode : {EngineMode::Fused, EngineMode::Tile}) {
    Engine e(exe, mode);
    e.writeTensor("running", r0);
    e.connectInput(exe->graph.get("x"), xs.data());
    e.run();
    e.run();
    auto r = e.readFloats("running");
    for (int i = 0; i < 300; ++i) {
      double want = r0[i];
      for (int step = 0; step < 2; ++step) want = 0.9 * want + 0.1 * 1.25 * double(xs[i]);
      EXPECT_NEAR(r[i], want, 1e-6) << engineModeName(mode) << " " << i;
    }
  }
}

}  // namespace
}  // namespace ipu::testing

namespace ipu::testing {
namespace {

// Registered kinds need nothing in the text form: it reads their names, arity and attribute
// schema from the registry like any other op's, and their dtype rules apply when parsing.
TEST(OpRegistry, TextFormReadsAndPrintsRegisteredKinds) {
  const std::string text = R"(graph bert_bits {
  variable %table: f32[10, 4]
  input %ids: i32[3]
  %h: f32[3, 4] = gather(%table, %ids)
  %t: f32[3, 4] = gelu(%h) {approximate="tanh"}
})";
  Graph g = parseGraph(text);
  EXPECT_EQ(g.op(0).kind, ops::kindNamed("gather"));
  EXPECT_EQ(printGraph(parseGraph(printGraph(g))), printGraph(g));
  try {
    parseGraph(R"(graph bad {
  variable %table: f32[10, 4]
  variable %ids: f32[3]
  %h: f32[3, 4] = gather(%table, %ids)
})");
    FAIL() << "f32 indices accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("input 1 'ids' is f32; expected one of i32"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace ipu::testing
