// masked_softmax: softmax over the innermost axis of x plus an additive mask (attention).
//   masked_softmax(x [..., C], mask broadcastable to x) -> y [..., C] = softmax(x + mask)
//   e.g. BERT's scores [B, heads, S, S] with mask [B, 1, 1, S] (0 keep, -10000 drop).
// The gradient with respect to x is softmax's (softmax_grad of y); the mask is not trained.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "ipu_backend/kernels/elementwise_math.h"
#include "ipu_backend/ops/op_info.h"
#include "ipu_backend/precision/half.h"

namespace ipu::ops {
namespace {

// Flat mask index of each output element: numpy broadcasting, as strides over the output dims.
struct MaskMap {
  std::vector<i64> outDims, maskStrides;
  i64 at(i64 i) const {
    i64 idx = 0;
    for (size_t d = outDims.size(); d-- > 0;) {
      idx += (i % outDims[d]) * maskStrides[d];
      i /= outDims[d];
    }
    return idx;
  }
};

MaskMap maskMap(const Shape& x, const Shape& m) {
  MaskMap mm{x, std::vector<i64>(x.size(), 0)};
  i64 stride = 1;
  for (size_t k = 0; k < m.size(); ++k) {
    const size_t dm = m.size() - 1 - k, dx = x.size() - 1 - k;
    if (m[dm] != 1) mm.maskStrides[dx] = stride;
    stride *= m[dm];
  }
  return mm;
}

std::vector<TensorType> infer(const std::vector<const Tensor*>& in, const Attrs&,
                              const std::string& label) {
  const Tensor &x = *in[0], &m = *in[1];
  if (x.shape.empty()) fail(label, "input must have rank >= 1");
  if (m.shape.size() > x.shape.size() || broadcastShapes(x.shape, m.shape, label) != x.shape)
    fail(label, fmt::format("mask '{}' {} must broadcast to the scores '{}' {}", m.name,
                            shapeStr(m.shape), x.name, shapeStr(x.shape)));
  return {{x.shape, x.dtype}};
}

// y of the rows [r0, r1) (x rows and the output relative to row r0).
void rows(const MaskMap& mm, i64 c, i64 r0, i64 r1, const std::function<float(i64)>& x,
          const std::function<float(i64)>& mask, float* y) {
  std::vector<double> e(static_cast<size_t>(c));
  for (i64 r = r0; r < r1; ++r) {
    double mx = -INFINITY;
    for (i64 j = 0; j < c; ++j) {
      const i64 i = r * c + j;
      e[j] = static_cast<double>(x(i)) + mask(mm.at(i));
      mx = std::max(mx, e[j]);
    }
    double s = 0;
    for (i64 j = 0; j < c; ++j) s += (e[j] = std::exp(e[j] - mx));
    for (i64 j = 0; j < c; ++j) y[(r - r0) * c + j] = static_cast<float>(e[j] / s);
  }
}

// A vertex per slice of y cut at row ends: it reads its rows of x and the span of mask elements
// they broadcast from (within a row the map grows with the column; across rows it need not, as
// for a [1, S, S] mask over [B, S, S] scores, so every row's ends are looked at).
void plan(PlanApi& p, const Op& op) {
  const Graph& g = p.graph();
  const Shape xs = g.tensor(op.inputs[0]).shape;
  const i64 c = xs.back();
  const MaskMap mm = maskMap(xs, g.tensor(op.inputs[1]).shape);
  p.perSlice(
      op, 0, {op.outputs[0]},
      [op, c, mm](Range r) {
        i64 lo = mm.at(r.begin), hi = mm.at(r.end - 1);
        for (i64 row = r.begin / c; row * c < r.end; ++row) {
          lo = std::min(lo, mm.at(row * c));
          hi = std::max(hi, mm.at(row * c + c - 1));
        }
        const i64 r0 = r.begin / c, r1 = (r.end - 1) / c + 1;
        return Windows{{op.inputs[0], r0 * c, r1 * c}, {op.inputs[1], lo, hi + 1}};
      },
      c);
}

std::function<void()> vertex(const VertexArgs& a) {
  const Shape xs = a.g.tensor(a.op.inputs[0]).shape;
  const i64 c = xs.back();
  return [W = a.in, y = a.out[0], work = a.work, c,
          mm = maskMap(xs, a.g.tensor(a.op.inputs[1]).shape)] {
    // Slices are cut at row ends, but a tile's slice may begin inside a row: compute each row
    // the work touches whole (its x row is in the window) and keep the part in `work`.
    std::vector<float> row(static_cast<size_t>(c));
    for (i64 r = work.begin / c; r * c < work.end; ++r) {
      rows(
          mm, c, r, r + 1, [&](i64 i) { return W[0][i]; }, [&](i64 i) { return W[1][i]; },
          row.data());
      for (i64 i = std::max(work.begin, r * c); i < std::min(work.end, (r + 1) * c); ++i)
        y[i - work.begin] = row[i - r * c];
    }
  };
}

// One row of the fused kernels: y = softmax(x + mask) in float (the exps vectorised:
// kernels::detail::vectorExp; their sum in double); e: c floats of scratch.
void softmaxRow(const float* xr, const float* mr, i64 maskStep, i64 c, float* e, float* yr) {
  float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
  for (i64 j = 0; j < c; ++j) {
    e[j] = xr[j] + mr[j * maskStep];
    mx = std::max(mx, e[j]);
  }
#pragma omp simd
  for (i64 j = 0; j < c; ++j) e[j] = kernels::detail::vectorExp(e[j] - mx);
  double s = 0;  // a loop of its own: GCC's vectorised exp + double sum is 6x slower
#pragma omp simd reduction(+ : s)
  for (i64 j = 0; j < c; ++j) s += e[j];
  const double inv = 1.0 / s;
#pragma omp simd
  for (i64 j = 0; j < c; ++j) yr[j] = static_cast<float>(e[j] * inv);
}

// Where each row's mask starts, and its step along C (1, or 0: one value per row).
struct MaskRows {
  std::vector<i64> start;
  i64 step;
};
MaskRows maskRows(const Graph& g, const Op& op) {
  const Shape xs = g.tensor(op.inputs[0]).shape;
  const i64 c = xs.back(), n = numElements(xs) / c;
  const MaskMap mm = maskMap(xs, g.tensor(op.inputs[1]).shape);
  MaskRows m{std::vector<i64>(static_cast<size_t>(n)), mm.maskStrides.back()};
  for (i64 r = 0; r < n; ++r) m.start[static_cast<size_t>(r)] = mm.at(r * c);
  return m;
}

// Fused mode: a row at a time in float, the mask row found once per row (along C it is
// contiguous or one value); the tile vertex above keeps the element-wise double form.
std::function<void()> fused(const FusedArgs& a) {
  const i64 c = a.g.tensor(a.op.inputs[0]).shape.back();
  return [x = a.in[0], m = a.in[1], y = a.out[0], c, rows = maskRows(a.g, a.op)] {
    const i64 n = static_cast<i64>(rows.start.size());
#pragma omp parallel
    {
      std::vector<float> e(static_cast<size_t>(c));
#pragma omp for schedule(static)
      for (i64 r = 0; r < n; ++r)
        softmaxRow(x + r * c, m + rows.start[static_cast<size_t>(r)], rows.step, c, e.data(),
                   y + r * c);
    }
  };
}

// Fused mode on 16-bit scores, mask and probabilities: each row widened, computed as above and
// rounded back in cache (the widening path's bits, without converting whole tensors through
// scratch: [B, heads, S, S] at sequence 512 is 8M values per layer).
std::function<void()> nativeFused(const NativeFusedArgs& a) {
  const DType t = a.g.tensor(a.op.inputs[0]).dtype;
  if ((t != DType::BF16 && t != DType::F16) || !allOperandsAre(a.g, a.op, t)) return {};
  const i64 c = a.g.tensor(a.op.inputs[0]).shape.back();
  auto widen = [t](const void* p, i64 at, float* out, i64 count) {
    if (t == DType::BF16)
      precision::toFloat(static_cast<const precision::bf16*>(p) + at, out, count);
    else
      precision::toFloat(static_cast<const precision::f16*>(p) + at, out, count);
  };
  auto narrow = [t](const float* in, void* p, i64 at, i64 count) {
    if (t == DType::BF16)
      precision::toBF16(in, static_cast<precision::bf16*>(p) + at, count);
    else
      precision::toF16(in, static_cast<precision::f16*>(p) + at, count);
  };
  return [x = a.in[0], m = a.in[1], y = a.out[0], c, rows = maskRows(a.g, a.op), widen, narrow] {
    const i64 n = static_cast<i64>(rows.start.size());
#pragma omp parallel
    {
      std::vector<float> xf(static_cast<size_t>(c)), mf(static_cast<size_t>(c)),
          yf(static_cast<size_t>(c)), e(static_cast<size_t>(c));
#pragma omp for schedule(static)
      for (i64 r = 0; r < n; ++r) {
        widen(x, r * c, xf.data(), c);
        widen(m, rows.start[static_cast<size_t>(r)], mf.data(), rows.step == 0 ? 1 : c);
        softmaxRow(xf.data(), mf.data(), rows.step, c, e.data(), yf.data());
        narrow(yf.data(), y, r * c, c);
      }
    }
  };
}

}  // namespace

IPU_REGISTER_OPS(masked_softmax) {
  OpInfo f;
  f.def = {kUnassignedKind, "masked_softmax", 2, 1, {}, {}};
  f.doc = "x [..., C], additive mask broadcastable to x -> softmax(x + mask) over C";
  f.inputDTypes = {floatTypes(), floatTypes()};
  f.infer = infer;
  f.grad = [](const GradArgs& a) {
    if (a.needs[1]) fail(a.label, "autodiff: the attention mask is not differentiable here");
    if (a.needs[0])
      a.accumulate(a.op.inputs[0], a.g.addOp1(OpKind::SoftmaxGrad, {a.op.outputs[0], a.dy[0]}, {}));
  };
  f.plan = plan;
  f.vertex = vertex;
  f.fused = fused;
  f.nativeFused = nativeFused;
  f.cost = [](const Op&, int) { return 12.0; };  // add mask, max, subtract, exp, sum, scale
  registerOp(std::move(f));
}

}  // namespace ipu::ops
