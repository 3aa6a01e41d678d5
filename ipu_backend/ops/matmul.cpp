// matmul: C = op(A) x op(B), op = transpose where trans_a / trans_b.
//   a [..., M, K] (or [..., K, M]), b [..., K, N] (or [..., N, K]) with the same batch
//   dimensions, or b of rank 2 (broadcast over a's batch) -> c [..., M, N];
//   optional attribute partials ("f32" / "f16": the tile partial sums' type).
// Fused mode runs oneDNN (fused.h): f32 on f32 data, bf16 on bf16 data where the CPU has bf16
// primitives (nativeFused), otherwise f32 with 16-bit operands converted around it.
#include <algorithm>
#include <limits>
#include <memory>
#include <numeric>

#include <fmt/format.h>

#include "ipu_backend/compiler/executable.h"
#include "ipu_backend/compiler/op_shapes.h"
#include "ipu_backend/ir/builder.h"
#include "ipu_backend/kernels/fused.h"
#include "ipu_backend/kernels/reference.h"
#include "ipu_backend/ops/op_info.h"

namespace ipu::ops {
namespace {

namespace ref = kernels::ref;
namespace fz = kernels::fused;

std::vector<TensorType> infer(const std::vector<const Tensor*>& in, const Attrs& a,
                              const std::string& label) {
  expectPartials(a, label);
  const Tensor &x = *in[0], &y = *in[1];
  if (x.shape.size() < 2 || y.shape.size() < 2)
    fail(label, fmt::format("operands must have rank >= 2, got '{}' {} and '{}' {}", x.name,
                            shapeStr(x.shape), y.name, shapeStr(y.shape)));
  bool ta = a.getBool("trans_a", false), tb = a.getBool("trans_b", false);
  size_t ra = x.shape.size(), rb = y.shape.size();
  i64 m = ta ? x.shape[ra - 1] : x.shape[ra - 2];
  i64 k = ta ? x.shape[ra - 2] : x.shape[ra - 1];
  i64 kb = tb ? y.shape[rb - 1] : y.shape[rb - 2];
  i64 n = tb ? y.shape[rb - 2] : y.shape[rb - 1];
  if (k != kb)
    fail(label, fmt::format("contraction dimensions differ: '{}' {} gives K={}, '{}' {} gives "
                            "K={} (trans_a={}, trans_b={})",
                            x.name, shapeStr(x.shape), k, y.name, shapeStr(y.shape), kb, ta, tb));
  Shape batch(x.shape.begin(), x.shape.end() - 2);
  if (rb > 2 && Shape(y.shape.begin(), y.shape.end() - 2) != batch)
    fail(label, fmt::format("batch dimensions of '{}' {} and '{}' {} must match (or the "
                            "second operand must be rank 2)",
                            x.name, shapeStr(x.shape), y.name, shapeStr(y.shape)));
  Shape out = batch;
  out.push_back(m);
  out.push_back(n);
  return {{out, x.dtype}};
}

void grad(const GradArgs& g) {
  Builder& b = g.b;
  const Op& op = g.op;
  const bool ta = op.attrs.getBool("trans_a", false), tb = op.attrs.getBool("trans_b", false);
  const int A = op.inputs[0], B = op.inputs[1], dy = g.dy[0];
  const Shape as = g.g.tensor(A).shape, bs = g.g.tensor(B).shape;
  const bool bcast = bs.size() == 2 && as.size() > 2;
  // The gradient matmuls keep the forward's partials type: the precision pass runs before
  // autodiff, and the IPU's "16.16" (Graphcore's enable_half_partials) is f16 partials in the
  // forward and the backward matmuls alike.
  auto matmul = [&](int x, int y, bool transX, bool transY) {
    Attrs at;
    if (transX) at.set("trans_a", true);
    if (transY) at.set("trans_b", true);
    if (op.attrs.has("partials")) at.set("partials", op.attrs.getString("partials"));
    return g.g.addOp1(OpKind::MatMul, {x, y}, at);
  };
  if (g.needs[0]) {
    int da = -1;
    if (!ta)
      da = tb ? matmul(dy, B, false, false) : matmul(dy, B, false, true);
    else
      da = tb ? matmul(B, dy, true, true) : matmul(B, dy, false, true);
    g.accumulate(A, da);
  }
  if (g.needs[1]) {
    int db = -1;
    if (bcast && !ta) {
      // Fold the batch into M: [batch*M, K]^T x [batch*M, N] (dense layers over sequences).
      i64 k = as.back(), m = numElements(as) / k;
      int a2 = b.reshape(A, {m, k});
      int d2 = b.reshape(dy, {m, g.g.tensor(dy).shape.back()});
      db = tb ? matmul(d2, a2, true, false) : matmul(a2, d2, true, false);
    } else {
      if (!ta)
        db = tb ? matmul(dy, A, true, false) : matmul(A, dy, true, false);
      else
        db = tb ? matmul(dy, A, true, true) : matmul(A, dy, false, false);
      if (bcast) {
        std::vector<i64> axes(as.size() - 2);
        std::iota(axes.begin(), axes.end(), 0);
        db = b.reduceSum(db, axes);
      }
    }
    g.accumulate(B, db);
  }
}

// A x B^T with B [N, K] too large for one tile (a dense layer's weights read transposed: BERT's
// backward through an FFN kernel, a classifier stored [classes, features]): a vertex of output
// columns [j0, j1) reads B rows j0..j1 whole. A linear output mapping gives a tile hundreds of
// columns of one row (5.9 MB of an FFN kernel). Blocked like a convolution's output channels,
// a tile holds ng columns of a block of rows: it gathers ng B rows, shared by its vertices, and
// one A row per output row. Returns the ng that minimises those bytes, or 0 to keep the
// linear mapping (its windows fit the budget, or B is batched).
i64 columnsPerTile(const PlanApi& p, const Op& op, const kernels::MatMulShape& s) {
  if (!s.transB || s.transA || (s.batch > 1 && !s.broadcastB)) return 0;
  const Graph& g = p.graph();
  const i64 aBytes = sizeOf(g.tensor(op.inputs[0]).dtype),
            bBytes = sizeOf(g.tensor(op.inputs[1]).dtype);
  const i64 rows = s.batch * s.m, tiles = p.numTiles();
  i64 linearSlice = 1;  // the largest slice of the linear mapping the output has now
  for (const TileSlice& sl : p.mapping(op.outputs[0]))
    linearSlice = std::max(linearSlice, sl.end - sl.begin);
  if (std::min(linearSlice, s.n) * s.k * bBytes <= p.windowBudgetBytes()) return 0;
  i64 best = 0;
  double bestBytes = std::numeric_limits<double>::infinity();
  for (i64 ng = 1; ng <= s.n; ++ng) {
    const i64 groups = ceilDiv(s.n, ng);
    if (ng > 1 && ceilDiv(s.n, ng - 1) == groups) continue;  // same groups, more columns
    // More groups than tiles: a tile holds several groups' columns of every row.
    const i64 blocks = std::clamp<i64>(tiles / groups, 1, rows);
    const i64 columns = ng * ceilDiv(groups, tiles);
    const double bytes =
        static_cast<double>(columns * s.k * bBytes + ceilDiv(rows, blocks) * s.k * aBytes);
    if (bytes < bestBytes) bestBytes = bytes, best = ng;
  }
  return best < s.n ? best : 0;
}

// Rows of the output are (batch * M + i). Small B: a vertex per output slice reading its A
// rows and B whole (its batches); B [N, K] too large: slices cut at row ends, output columns
// [j0, j1) reading B rows j0..j1 (the output column-blocked: columnsPerTile); B [K, N] too
// large: the sum split over k, each part reading B rows k0..k1.
void plan(PlanApi& p, const Op& op) {
  const auto s = matMulShapeOf(p.graph(), op);
  const int a = op.inputs[0], b = op.inputs[1], out = op.outputs[0];
  if (const i64 ng = columnsPerTile(p, op, s); ng > 0)
    p.mapChannelBlocked(out, s.batch * s.m, s.n, ng);
  // Batches [b0, b1) of B that output rows [rows) read.
  auto bBatches = [s](Range rows) {
    return s.broadcastB ? Range{0, 1} : Range{rows.begin / s.m, (rows.end - 1) / s.m + 1};
  };
  // A's windows, where one bounding window would gather more than twice what the vertex reads:
  // A [M, K] with the sum split over k, one window per row of its run ks (8 or more columns;
  // BERT's decoder input gradient dy x E, 78 rows of 30522, gathered 4.7 MB per tile); A read
  // transposed (A [K, M]), one window per k of the rows' i range (8 or more rows; attention's
  // dV = probs^T x dcontext, 786 KB per tile), neighbours merged while the merged window stays
  // at most twice what it holds. Ascending and disjoint (the vertex gathers them into their
  // span).
  auto aWindow = [s, a](Range rows, Range ks) {
    if (!s.transA) {
      const NeedWindow bound{a, rows.begin * s.k + ks.begin, (rows.end - 1) * s.k + ks.end};
      if (bound.end - bound.begin <= 2 * rows.size() * ks.size() || ks.size() < 8)
        return Windows{bound};
      Windows w;
      for (i64 i = rows.begin; i < rows.end; ++i)
        w.push_back({a, i * s.k + ks.begin, i * s.k + ks.end});
      return w;
    }
    i64 b0 = rows.begin / s.m, b1 = (rows.end - 1) / s.m + 1;
    const NeedWindow bound{a, b0 * s.k * s.m + ks.begin * s.m, (b1 - 1) * s.k * s.m + ks.end * s.m};
    // Runs of a few elements (a vertex of one output row: a weight gradient's x^T) stay one
    // bounding window: a window per element would cost more to plan than it saves.
    if (bound.end - bound.begin <= 2 * rows.size() * ks.size() || rows.size() < 8 * (b1 - b0))
      return Windows{bound};
    Windows w;
    i64 held = 0;
    for (i64 bt = b0; bt < b1; ++bt) {
      const i64 i0 = std::max(rows.begin, bt * s.m) - bt * s.m;
      const i64 i1 = std::min(rows.end, (bt + 1) * s.m) - bt * s.m;
      for (i64 kk = ks.begin; kk < ks.end; ++kk) {
        const i64 begin = bt * s.k * s.m + kk * s.m + i0, end = begin + (i1 - i0);
        if (!w.empty() && end - w.back().begin <= 2 * (held + end - begin)) {
          w.back().end = end;
          held += end - begin;
        } else {
          w.push_back({a, begin, end});
          held = end - begin;
        }
      }
    }
    return w;
  };
  auto with = [](Windows w, NeedWindow last) {
    w.push_back(last);
    return w;
  };
  if (s.k * s.n * 4 <= p.windowBudgetBytes()) {
    p.perSlice(op, 0, {out}, [s, b, bBatches, aWindow, with](Range r) {
      Range rows = rowsOf(r, s.n), bb = bBatches(rows);
      return with(aWindow(rows, {0, s.k}), {b, bb.begin * s.k * s.n, bb.end * s.k * s.n});
    });
  } else if (s.transB) {
    p.perSlice(
        op, 0, {out},
        [s, b, bBatches, aWindow, with](Range r) {
          Range rows = rowsOf(r, s.n), bb = bBatches(rows), js = channelsOf(r, s.n);
          return with(aWindow(rows, {0, s.k}), {b, bb.begin * s.n * s.k + js.begin * s.k,
                                                (bb.end - 1) * s.n * s.k + js.end * s.k});
        },
        s.n);
  } else {
    p.splitReduction(op, 0, out, s.k, s.n * 4, [s, b, bBatches, aWindow, with](Range r, Range ks) {
      Range rows = rowsOf(r, s.n), bb = bBatches(rows);
      return with(aWindow(rows, ks), {b, bb.begin * s.k * s.n + ks.begin * s.n,
                                      (bb.end - 1) * s.k * s.n + ks.end * s.n});
    });
  }
}

std::function<void()> vertex(const VertexArgs& a) {
  if (a.phase == 1) return sumPartials(a);
  const auto s = matMulShapeOf(a.g, a.op);
  const Range ks = a.red.size() > 0 ? a.red : Range{0, s.k};  // split over k: partials
  if (a.in.size() == 2)
    return
        [s, W = a.in, y = a.out[0], work = a.work, ks] { ref::matMul(s, W[0], W[1], y, work, ks); };
  // A read transposed through several windows (plan's aWindow): gathered into one window over
  // their span first (vertex-local scratch, not tile memory: the plan counted the windows).
  return [s, W = a.in, y = a.out[0], work = a.work, ks] {
    const FW& first = W.front();
    const FW& last = W[W.size() - 2];
    std::vector<float> span(static_cast<size_t>(last.base + last.size - first.base), 0.f);
    for (size_t w = 0; w + 1 < W.size(); ++w)
      std::copy(W[w].data, W[w].data + W[w].size, span.begin() + (W[w].base - first.base));
    ref::matMul(s, FW{span.data(), first.base, static_cast<i64>(span.size())}, W.back(), y, work,
                ks);
  };
}

// One oneDNN primitive per op, built here, owned by the step.
std::function<void()> fused(const FusedArgs& a) {
  auto k = std::make_shared<fz::MatMul>(matMulShapeOf(a.g, a.op));
  return [k, x = a.in[0], w = a.in[1], y = a.out[0]] { k->run(x, w, y); };
}

// Every operand bf16 and oneDNN has bf16 primitives: the bf16 matmul on the stored data.
std::function<void()> nativeFused(const NativeFusedArgs& a) {
  if (!a.bf16Primitives || !allOperandsAre(a.g, a.op, DType::BF16)) return {};
  auto k = std::make_shared<fz::MatMul>(matMulShapeOf(a.g, a.op), kernels::ElementType::BF16);
  return [k, x = a.in[0], w = a.in[1], y = a.out[0]] { k->run(x, w, y); };
}

// The contraction length (the AMP's efficiency), the sum split over k, A and B planned.
CostTraits::MacWork macWork(const Graph& g, const Op& op) {
  const auto s = matMulShapeOf(g, op);
  CostTraits::MacWork m;
  m.macs = static_cast<double>(s.macs());
  m.contraction = static_cast<double>(s.k);
  m.outElems = static_cast<double>(s.cElems());
  m.redExtent = static_cast<double>(s.k);
  m.planA = {op.inputs[0]};
  m.planW = {op.inputs[1]};
  return m;
}

}  // namespace

IPU_REGISTER_OPS(matmul) {
  OpInfo f;
  f.def = {OpKind::MatMul,
           "matmul",
           2,
           1,
           {},
           {{"trans_a", AttrType::Bool, false},
            {"trans_b", AttrType::Bool, false},
            {"partials", AttrType::String, false}},
           PrecisionRule::Compute,
           /*usesPartials=*/true};
  f.doc = "a [..., M, K], b [..., K, N] or [K, N] -> c [..., M, N] (trans_a, trans_b)";
  f.inputDTypes = {floatTypes(), floatTypes()};
  f.infer = infer;
  f.grad = grad;
  f.plan = plan;
  f.vertex = vertex;
  f.fused = fused;
  f.nativeFused = nativeFused;
  // Phase 0 is priced as MACs (macWork); phase 1 sums partial rows, an add per vector.
  f.cost = [](const Op&, int) { return 1.0; };
  f.costTraits.macWork = macWork;
  registerOp(std::move(f));
}

}  // namespace ipu::ops
