// masked_lm_loss: cross-entropy over gathered positions with per-position weights (BERT's
// masked-LM loss; the positions are gathered upstream with `gather`).
//   masked_lm_loss(logits [P, V], labels i32 [P], weights [P]) -> loss [P], the terms of the
//     MLPerf reference's normalised loss (their sum is it):
//     loss_p = w_p * (logsumexp(logits_p) - logits_p[label_p]) / (sum_q w_q + 1e-5)
//   masked_lm_loss_grad(logits, labels, weights, dloss [P]) -> dlogits [P, V]
//     = dloss_p * w_p / (sum_q w_q + 1e-5) * (softmax(logits_p) - onehot(label_p))
// A label outside [0, V) is an error: the fused kernels throw naming it; tile vertices, which
// cannot throw, write NaN.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

#include "ipu_backend/kernels/elementwise_math.h"
#include "ipu_backend/ops/op_info.h"

namespace ipu::ops {
namespace {

constexpr double kNormEpsilon = 1e-5;  // the reference's denominator guard

double normaliser(const std::function<float(i64)>& w, i64 p) {
  double s = 0;
  for (i64 q = 0; q < p; ++q) s += w(q);
  return s + kNormEpsilon;
}

// logsumexp of one row and the row's softmax (into sm when given).
double logSumExp(const float* x, i64 v, double* sm) {
  double mx = -INFINITY, s = 0;
  for (i64 j = 0; j < v; ++j) mx = std::max(mx, static_cast<double>(x[j]));
  for (i64 j = 0; j < v; ++j) {
    const double e = std::exp(x[j] - mx);
    if (sm) sm[j] = e;
    s += e;
  }
  if (sm)
    for (i64 j = 0; j < v; ++j) sm[j] /= s;
  return mx + std::log(s);
}

std::vector<TensorType> infer(const std::vector<const Tensor*>& in, const Attrs&,
                              const std::string& label) {
  const Tensor &lg = *in[0], &lb = *in[1], &w = *in[2];
  expectRank(lg, 2, label, "logits [P,V]");
  const Shape p{lg.shape[0]};
  for (const Tensor* t : {&lb, &w})
    if (t->shape != p)
      fail(label, fmt::format("'{}' {} must be [{}], one per position of logits '{}' {}", t->name,
                              shapeStr(t->shape), p[0], lg.name, shapeStr(lg.shape)));
  if (in.size() == 4) {
    if (in[3]->shape != p)
      fail(label, fmt::format("loss gradient '{}' {} must be [{}]", in[3]->name,
                              shapeStr(in[3]->shape), p[0]));
    return {{lg.shape, lg.dtype}};
  }
  return {{p, lg.dtype}};
}

void throwBadLabel(const Graph& g, const Op& op, i64 pos, i64 v, const std::int32_t* lb) {
  throw std::out_of_range(fmt::format("{} '{}': label {} at position {} of '{}' is outside [0, {})",
                                      opName(op.kind), g.tensor(op.outputs[0]).name, lb[pos], pos,
                                      g.tensor(op.inputs[1]).name, v));
}

// The rows are split into parts (a splitReduction over the rows, as gather's multi-slice): each
// part's vertices compute the terms of its rows and write 0 for the others, and a second phase
// sums the parts. So no tile gathers more logits rows than its window budget holds (at least
// one row), where one vertex per slice of the small [P] output would gather all of them.
void planForward(PlanApi& p, const Op& op) {
  const Shape& s = p.graph().tensor(op.inputs[0]).shape;
  const i64 rows = s[0], v = s[1];
  p.splitReduction(op, 0, op.outputs[0], rows, v * 4, [&p, op, v](Range r, Range red) {
    // The part's rows within this output slice (none: a one-element window).
    const i64 lo = std::max(r.begin, red.begin), hi = std::max(lo, std::min(r.end, red.end));
    const i64 first = lo < hi ? lo : red.begin;
    return Windows{{op.inputs[0], first * v, (lo < hi ? hi : first) * v},
                   {op.inputs[1], r.begin, r.end},
                   p.whole(op.inputs[2])};
  });
}

std::function<void()> vertexForward(const VertexArgs& a) {
  if (a.phase == 1) return sumPartials(a);
  const Shape s = a.g.tensor(a.op.inputs[0]).shape;
  const i64 np = s[0], v = s[1];
  return [W = a.in, lb = a.ints[1], y = a.out[0], work = a.work, red = a.red, np, v] {
    const double norm = normaliser([&](i64 q) { return W[2][q]; }, np);
    for (i64 p = work.begin; p < work.end; ++p) {
      const i64 l = lb[p];
      float& out = y[p - work.begin];
      if (p < red.begin || p >= red.end)
        out = 0.0f;  // another part's row
      else if (l < 0 || l >= v)
        out = std::numeric_limits<float>::quiet_NaN();
      else
        out = static_cast<float>(W[2][p] * (logSumExp(&W[0][p * v], v, nullptr) - W[0][p * v + l]) /
                                 norm);
    }
  };
}

// Fused mode, one row: exp(x - max) in float (vectorised: kernels::detail::vectorExp) into e
// (when given), the sum in double; returns
// logsumexp. The tile vertices keep logSumExp's double form.
double rowExpSum(const float* x, i64 v, float* e, double* sum) {
  float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
  for (i64 j = 0; j < v; ++j) mx = std::max(mx, x[j]);
  // The exps a block at a time, then their sum in double in a loop of its own (GCC's vectorised
  // exp + double sum in one loop is 6x slower).
  constexpr i64 kBlock = 1024;
  float block[kBlock];
  double s = 0;
  for (i64 b = 0; b < v; b += kBlock) {
    const i64 len = std::min(kBlock, v - b);
    float* t = e ? e + b : block;
#pragma omp simd
    for (i64 j = 0; j < len; ++j) t[j] = kernels::detail::vectorExp(x[b + j] - mx);
    double part = 0;
#pragma omp simd reduction(+ : part)
    for (i64 j = 0; j < len; ++j) part += t[j];
    s += part;
  }
  *sum = s;
  return mx + std::log(s);
}

std::function<void()> fusedForward(const FusedArgs& a) {
  const Shape s = a.g.tensor(a.op.inputs[0]).shape;
  const i64 np = s[0], v = s[1];
  return [&g = a.g, &op = a.op, lg = a.in[0], lb = a.ints[1], w = a.in[2], y = a.out[0], np, v] {
    for (i64 p = 0; p < np; ++p)
      if (lb[p] < 0 || lb[p] >= v) throwBadLabel(g, op, p, v, lb);
    const double norm = normaliser([&](i64 q) { return w[q]; }, np);
#pragma omp parallel for schedule(static)
    for (i64 p = 0; p < np; ++p) {
      double sum = 0;
      const double lse = rowExpSum(lg + p * v, v, nullptr, &sum);
      y[p] = static_cast<float>(w[p] * (lse - lg[p * v + lb[p]]) / norm);
    }
  };
}

// dlogits of elements [e0, e1) (global) of row p; sm: scratch of v doubles.
void rowGrad(const float* row, i64 label, double scale, i64 p, i64 v, i64 e0, i64 e1, double* sm,
             float* out) {
  logSumExp(row, v, sm);
  for (i64 e = e0; e < e1; ++e) {
    const i64 j = e - p * v;
    out[e - e0] = static_cast<float>(scale * (sm[j] - (j == label ? 1.0 : 0.0)));
  }
}

void planBackward(PlanApi& p, const Op& op) {
  const i64 v = p.graph().tensor(op.inputs[0]).shape[1];
  p.perSlice(
      op, 0, {op.outputs[0]},
      [&p, op, v](Range r) {
        const i64 p0 = r.begin / v, p1 = (r.end - 1) / v + 1;
        return Windows{{op.inputs[0], p0 * v, p1 * v},
                       {op.inputs[1], p0, p1},
                       p.whole(op.inputs[2]),
                       {op.inputs[3], p0, p1}};
      },
      v);
}

std::function<void()> vertexBackward(const VertexArgs& a) {
  const Shape s = a.g.tensor(a.op.inputs[0]).shape;
  const i64 np = s[0], v = s[1];
  return [W = a.in, lb = a.ints[1], y = a.out[0], work = a.work, np, v] {
    const double norm = normaliser([&](i64 q) { return W[2][q]; }, np);
    std::vector<double> sm(static_cast<size_t>(v));
    for (i64 p = work.begin / v; p * v < work.end; ++p) {
      const i64 e0 = std::max(work.begin, p * v), e1 = std::min(work.end, (p + 1) * v);
      const i64 l = lb[p];
      if (l < 0 || l >= v) {
        std::fill(y + (e0 - work.begin), y + (e1 - work.begin),
                  std::numeric_limits<float>::quiet_NaN());
        continue;
      }
      rowGrad(&W[0][p * v], l, W[3][p] * W[2][p] / norm, p, v, e0, e1, sm.data(),
              y + (e0 - work.begin));
    }
  };
}

std::function<void()> fusedBackward(const FusedArgs& a) {
  const Shape s = a.g.tensor(a.op.inputs[0]).shape;
  const i64 np = s[0], v = s[1];
  return [&g = a.g, &op = a.op, lg = a.in[0], lb = a.ints[1], w = a.in[2], dl = a.in[3],
          y = a.out[0], np, v] {
    for (i64 p = 0; p < np; ++p)
      if (lb[p] < 0 || lb[p] >= v) throwBadLabel(g, op, p, v, lb);
    const double norm = normaliser([&](i64 q) { return w[q]; }, np);
#pragma omp parallel for schedule(static)
    for (i64 p = 0; p < np; ++p) {  // scale * (softmax - onehot(label)), the exps in y's row
      float* out = y + p * v;
      double sum = 0;
      rowExpSum(lg + p * v, v, out, &sum);
      const double scale = dl[p] * w[p] / norm;
      const float f = static_cast<float>(scale / sum), eLabel = out[lb[p]];
#pragma omp simd
      for (i64 j = 0; j < v; ++j) out[j] *= f;
      out[lb[p]] = static_cast<float>(scale * (eLabel / sum - 1.0));
    }
  };
}

}  // namespace

IPU_REGISTER_OPS(masked_lm_loss) {
  OpInfo f;
  f.def = {kUnassignedKind, "masked_lm_loss", 3, 1, {}, {}};
  f.doc = "logits [P,V], labels i32 [P], weights [P] -> weighted, normalised CE terms [P]";
  f.inputDTypes = {floatTypes(), indexTypes(), {DType::F32}};
  f.infer = infer;
  f.grad = [](const GradArgs& a) {
    if (a.needs[2]) fail(a.label, "autodiff: the per-position weights are not differentiable");
    if (a.needs[0])
      a.accumulate(a.op.inputs[0],
                   add(a.g, "masked_lm_loss_grad",
                       {a.op.inputs[0], a.op.inputs[1], a.op.inputs[2], a.dy[0]})[0]);
  };
  f.plan = planForward;
  f.vertex = vertexForward;
  f.fused = fusedForward;
  // max, subtract, exp, sum, log per logit; then the sum of the parts
  f.cost = [](const Op&, int phase) { return phase == 0 ? 11.0 : 1.0; };
  registerOp(std::move(f));

  OpInfo b;
  b.def = {kUnassignedKind, "masked_lm_loss_grad", 4, 1, {}, {}};
  b.doc = "logits [P,V], labels i32 [P], weights [P], dloss [P] -> dlogits [P,V]";
  b.inputDTypes = {floatTypes(), indexTypes(), {DType::F32}, floatTypes()};
  b.infer = infer;
  b.grad = noGradient("it is a backward op");
  b.plan = planBackward;
  b.vertex = vertexBackward;
  b.fused = fusedBackward;
  b.cost = [](const Op&, int) { return 12.0; };
  registerOp(std::move(b));
}

}  // namespace ipu::ops
