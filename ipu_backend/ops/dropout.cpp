// dropout: zero elements (mode "element") or whole samples (mode "sample": stochastic depth /
// drop-connect) with probability `rate`, scaling the kept ones by 1 / (1 - rate).
//   dropout(x [N, ...], key i32 [2]) -> y [N, ...], attributes rate in [0, 1), seed, mode
//   key = (step, offset): the training step and the global index of this replica's first sample
//   (replica r of R with B samples each: r * B). Draw k (the global element, or the global
//   sample in "sample" mode) keeps x iff its 24 random bits >= rate * 2^24, with the bits
//   srRandomBits(deriveSeed(seed, step), k) of the counter-based generator stochastic rounding
//   uses (precision/stochastic_rounding.h). Tile and fused modes, any tile split, any replica
//   split and any process count therefore draw identical bits, and a resumed run draws the
//   bits of its step.
// The gradient is the same op on dy (same key, same mask, same scale).
#include <fmt/format.h>

#include <algorithm>

#include "ipu_backend/ops/op_info.h"
#include "ipu_backend/precision/stochastic_rounding.h"

namespace ipu::ops {
namespace {

struct Params {
  std::uint64_t seed;
  std::uint32_t threshold;  // drop iff bits < threshold (24-bit)
  float scale;
  i64 perSample;  // elements of one sample; the draw is per sample when bySample
  bool bySample;
};

Params paramsOf(const Graph& g, const Op& op) {
  const double rate = op.attrs.getFloat("rate");
  const Shape& s = g.tensor(op.inputs[0]).shape;
  const bool bySample = op.attrs.has("mode") && op.attrs.getString("mode") == "sample";
  return {static_cast<std::uint64_t>(op.attrs.getInt("seed")),
          static_cast<std::uint32_t>(rate * (1u << 24)), static_cast<float>(1.0 / (1.0 - rate)),
          s.empty() ? 1 : numElements(s) / s[0], bySample};
}

// y of elements [b, e) (x indexed from b) under key (step, offset).
void apply(const Params& p, const std::int32_t* key, const float* x, float* y, i64 b, i64 e) {
  const std::uint64_t seed =
      precision::deriveSeed(p.seed, static_cast<std::uint64_t>(static_cast<std::uint32_t>(key[0])));
  const i64 first = static_cast<i64>(key[1]) * p.perSample;  // this replica's first element
  if (p.bySample) {
    // One draw per sample, then a plain (vectorised) loop over the sample's elements in
    // [b, e): the values of the per-element loop below, without a draw per element.
    for (i64 i = b; i < e;) {
      const i64 end = std::min(e, (i / p.perSample + 1) * p.perSample);
      const i64 k = (first + i) / p.perSample;
      float* out = y + (i - b);
      const float* in = x + (i - b);
      if (static_cast<std::uint32_t>(precision::srRandomBits(seed, k) >> 40) < p.threshold) {
        std::fill(out, out + (end - i), 0.0f);
      } else {
        const float scale = p.scale;
#pragma omp simd
        for (i64 j = 0; j < end - i; ++j) out[j] = in[j] * scale;
      }
      i = end;
    }
    return;
  }
  for (i64 i = b; i < e; ++i) {
    const auto bits = static_cast<std::uint32_t>(precision::srRandomBits(seed, first + i) >> 40);
    y[i - b] = bits < p.threshold ? 0.0f : x[i - b] * p.scale;
  }
}

std::vector<TensorType> infer(const std::vector<const Tensor*>& in, const Attrs& a,
                              const std::string& label) {
  const double rate = a.getFloat("rate");
  if (rate < 0 || rate >= 1) fail(label, fmt::format("rate must be in [0, 1), got {}", rate));
  if (a.has("mode") && a.getString("mode") != "element" && a.getString("mode") != "sample")
    fail(label, fmt::format("mode=\"{}\" (valid: element, sample)", a.getString("mode")));
  if (in[1]->shape != Shape{2})
    fail(label, fmt::format("key '{}' {} must be [2]: (step, global index of the first sample)",
                            in[1]->name, shapeStr(in[1]->shape)));
  return {{in[0]->shape, in[0]->dtype}};
}

}  // namespace

IPU_REGISTER_OPS(dropout) {
  OpInfo f;
  f.def = {kUnassignedKind,
           "dropout",
           2,
           1,
           {},
           {{"rate", AttrType::Float, true},
            {"seed", AttrType::Int, true},
            {"mode", AttrType::String, false}}};
  f.doc = "x [N,...], key i32 [2] (step, first sample) -> x masked and scaled by 1/(1-rate)";
  f.inputDTypes = {floatTypes(), indexTypes()};
  f.infer = infer;
  f.grad = [](const GradArgs& a) {
    if (a.needs[0])
      a.accumulate(a.op.inputs[0], add(a.g, "dropout", {a.dy[0], a.op.inputs[1]}, a.op.attrs)[0]);
  };
  f.plan = [](PlanApi& p, const Op& op) {
    p.perSlice(op, 0, {op.outputs[0]}, [&p, op](Range r) {
      return Windows{{op.inputs[0], r.begin, r.end}, p.whole(op.inputs[1])};
    });
  };
  f.vertex = [](const VertexArgs& a) -> std::function<void()> {
    return [p = paramsOf(a.g, a.op), x = a.in[0], key = a.ints[1], y = a.out[0], w = a.work] {
      apply(p, &key[0], &x[w.begin], y, w.begin, w.end);
    };
  };
  f.fused = [](const FusedArgs& a) -> std::function<void()> {
    const i64 n = a.g.tensor(a.op.outputs[0]).elements();
    return [p = paramsOf(a.g, a.op), x = a.in[0], key = a.ints[1], y = a.out[0], n] {
      constexpr i64 kChunk = 4096;
#pragma omp parallel for schedule(static)
      for (i64 b = 0; b < n; b += kChunk) apply(p, key, x + b, y + b, b, std::min(n, b + kChunk));
    };
  };
  f.cost = [](const Op&, int) { return 10.0; };  // two 64-bit mixes, compare, select, scale
  // Tile and fused draw the same bits and form the same products: equal exactly.
  f.tolerances.f32 = {1e-6, 0, 1e-2};
  registerOp(std::move(f));
}

}  // namespace ipu::ops
