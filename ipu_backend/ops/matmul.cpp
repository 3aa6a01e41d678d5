// matmul: C = op(A) x op(B), op = transpose where trans_a / trans_b.
//   a [..., M, K] (or [..., K, M]), b [..., K, N] (or [..., N, K]) with the same batch
//   dimensions, or b of rank 2 (broadcast over a's batch) -> c [..., M, N];
//   optional attribute partials ("f32" / "f16": the tile partial sums' type).
// Fused mode runs oneDNN (fused.h): f32 on f32 data, bf16 on bf16 data where the CPU has bf16
// primitives (nativeFused), otherwise f32 with 16-bit operands converted around it.
#include <algorithm>
#include <array>
#include <limits>
#include <memory>
#include <numeric>

#include <fmt/format.h>

#include "ipu_backend/compiler/conv_plan.h"
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
struct ColumnBlocks {
  i64 ng = 0;        // 0: keep the linear mapping
  double bytes = 0;  // what a tile gathers
};
ColumnBlocks columnsPerTile(const PlanApi& p, const Op& op, const kernels::MatMulShape& s) {
  if (!s.transB || s.transA || (s.batch > 1 && !s.broadcastB)) return {};
  const Graph& g = p.graph();
  const i64 aBytes = sizeOf(g.tensor(op.inputs[0]).dtype),
            bBytes = sizeOf(g.tensor(op.inputs[1]).dtype);
  const i64 rows = s.batch * s.m, tiles = p.numTiles();
  i64 linearSlice = 1;  // the largest slice of the linear mapping the output has now
  for (const TileSlice& sl : p.mapping(op.outputs[0]))
    linearSlice = std::max(linearSlice, sl.end - sl.begin);
  if (std::min(linearSlice, s.n) * s.k * bBytes <= p.windowBudgetBytes()) return {};
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
  return best < s.n ? ColumnBlocks{best, bestBytes} : ColumnBlocks{};
}

// ---- the blocked plan ----------------------------------------------------------------------
// Large matmuls with both output dimensions wide (BERT's dense layers forward and backward:
// 1,024 tokens x 1,024 features x 4,096) planned in three dimensions, as Poplar's matmul planner
// does: the sum over k split into P parts, part p on its own group of T/P tiles, each tile of the
// group one block of rb output rows x cb output columns over the part's ks. A tile then gathers
// rb + cb operand rows of |ks| elements and holds rb x cb partials, where the linear and
// column-blocked plans gather whole rows (442 KB of f16 rows for BERT-Large's FFN input
// gradient on one Mk2 tile). Phases:
//   kBlockAPhase  A's rows copied k-part-major, Ap [P][rows][|ks_p|] (part p at rows x ks_p.begin),
//   kBlockBPhase  B's columns likewise, Bp [P][N][|ks_p|]: a block's operand is one window;
//   kBlockProductsPhase  the block products, partials in block order ([P][row block][column block]
//                 [rows of the block][columns of the block]), one vertex per block;
//   kBlockSumsPhase      the sum of the P partials of each output slice (out mapped in column
//   blocks of
//                 cb, so a slice lies in one block of every part).
constexpr int kBlockAPhase = 2, kBlockBPhase = 3, kBlockProductsPhase = 4, kBlockSumsPhase = 5;

struct BlockPlan {
  i64 parts = 0, rows = 0, cols = 0;  // P; the output's rows (batch * M) and columns (N)
  i64 rb = 0, cb = 0, rowBlocks = 0, colBlocks = 0, groupTiles = 0;
  double bytes = std::numeric_limits<double>::infinity();  // gathered + partials, per tile
  Range ks(i64 p, i64 k) const { return {k * p / parts, k * (p + 1) / parts}; }
  i64 blockRows(i64 bi) const { return std::min(rb, rows - bi * rb); }
  i64 blockCols(i64 bj) const { return std::min(cb, cols - bj * cb); }
  // First partial element of block (bi, bj) of part p.
  i64 blockBegin(i64 p, i64 bi, i64 bj) const {
    return p * rows * cols + bi * rb * cols + blockRows(bi) * bj * cb;
  }
};

// A's rows fold into one [batch * M, K] matrix (or A is one matrix read transposed), B is one
// matrix, and both output dimensions span many blocks.
bool blockable(const kernels::MatMulShape& s) {
  constexpr i64 kMinWidth = 256;  // narrower outputs: the row or column plans gather little
  const bool foldable = s.batch == 1 || (s.broadcastB && !s.transA);
  return foldable && s.batch * s.m >= kMinWidth && s.n >= kMinWidth && s.k >= 2;
}

// The P, rb and cb that minimise a tile's gathered operands and partials (P >= 2).
BlockPlan bestBlockPlan(const kernels::MatMulShape& s, i64 aBytes, i64 bBytes, i64 partialBytes,
                        i64 tiles) {
  BlockPlan best;
  const i64 rows = s.batch * s.m;
  for (i64 parts = 2; parts <= std::min(s.k, tiles); ++parts) {
    const i64 group = tiles / parts, kp = ceilDiv(s.k, parts);
    for (i64 br = 1; br <= std::min(rows, group); ++br) {
      const i64 rb = ceilDiv(rows, br), cb = ceilDiv(s.n, std::min(s.n, group / br));
      const double bytes =
          static_cast<double>((rb * aBytes + cb * bBytes) * kp + rb * cb * partialBytes);
      if (bytes < best.bytes) {
        best.parts = parts, best.rb = rb, best.cb = cb, best.bytes = bytes;
        best.rowBlocks = ceilDiv(rows, rb), best.colBlocks = ceilDiv(s.n, cb);
        best.groupTiles = group;
      }
    }
  }
  best.rows = rows, best.cols = s.n;
  return best;
}

// The plan of an op (the planner and every vertex of the op derive it from the same arguments;
// the last one is kept, as consecutive vertices belong to one op).
BlockPlan blockPlanOf(const Graph& g, const Op& op, const kernels::MatMulShape& s, i64 tiles) {
  const i64 aBytes = sizeOf(g.tensor(op.inputs[0]).dtype),
            bBytes = sizeOf(g.tensor(op.inputs[1]).dtype), pBytes = sizeOf(partialsOf(op));
  thread_local std::array<i64, 11> key{};
  thread_local BlockPlan plan;
  const std::array<i64, 11> k{s.batch,      s.m,    s.k,    s.n,    s.transA, s.transB,
                              s.broadcastB, aBytes, bBytes, pBytes, tiles};
  if (k != key || plan.parts == 0) {
    plan = bestBlockPlan(s, aBytes, bBytes, pBytes, tiles);
    key = k;
  }
  return plan;
}

// An operand as rows x k (A: its rows, B: its columns) stored row-major in k or k-major.
struct OperandView {
  int buffer;
  i64 rows, k;
  bool kInner;
  i64 at(i64 row, i64 kk) const { return kInner ? row * k + kk : kk * rows + row; }
};

// The windows of rows [r0, r1) x ks of an operand: one per row (k inner) or per k (rows inner),
// neighbours merged while the merged window stays at most twice what it holds.
Windows operandWindows(const OperandView& v, Range rows, Range ks) {
  Windows w;
  i64 held = 0;
  auto add = [&](i64 begin, i64 end) {
    if (!w.empty() && end - w.back().begin <= 2 * (held + end - begin)) {
      w.back().end = end;
      held += end - begin;
    } else {
      w.push_back({v.buffer, begin, end});
      held = end - begin;
    }
  };
  if (v.kInner)
    for (i64 r = rows.begin; r < rows.end; ++r) add(v.at(r, ks.begin), v.at(r, ks.end - 1) + 1);
  else
    for (i64 kk = ks.begin; kk < ks.end; ++kk)
      add(v.at(rows.begin, kk), v.at(rows.end - 1, kk) + 1);
  return w;
}

// The part of element e of a k-part-major copy ([P][rows][|ks_p|], part p at rows x ks_p.begin).
i64 copyPartOf(const BlockPlan& bp, i64 rows, i64 k, i64 e) {
  i64 part = 0;
  while (part + 1 < bp.parts && rows * bp.ks(part + 1, k).begin <= e) ++part;
  return part;
}

void planBlocked(PlanApi& p, const Op& op, const kernels::MatMulShape& s, const BlockPlan& bp) {
  const Graph& g = p.graph();
  const int a = op.inputs[0], b = op.inputs[1], out = op.outputs[0];
  const OperandView av{a, bp.rows, s.k, !s.transA}, bv{b, bp.cols, s.k, s.transB};
  const i64 T = p.numTiles();
  auto tileOf = [&](i64 part, i64 bi, i64 bj) {
    return static_cast<int>((part * bp.groupTiles + bi * bp.colBlocks + bj) % T);
  };
  // The copies: a block's rows of one part on a tile of the group that reads them.
  auto copy = [&](const OperandView& v, i64 blockSize, i64 blocks, bool isA, int phase,
                  const char* what) {
    std::vector<TileSlice> m;
    for (i64 part = 0; part < bp.parts; ++part) {
      const Range ks = bp.ks(part, s.k);
      for (i64 q = 0; q < blocks; ++q) {
        const i64 r0 = q * blockSize, r1 = std::min(v.rows, r0 + blockSize);
        const int tile =
            isA ? tileOf(part, q, q % bp.colBlocks) : tileOf(part, q % bp.rowBlocks, q);
        m.push_back(
            {tile, v.rows * ks.begin + r0 * ks.size(), v.rows * ks.begin + r1 * ks.size(), 0});
      }
    }
    const int buf = p.temporary(op, what, v.rows * s.k, g.tensor(v.buffer).dtype, std::move(m));
    p.perSlice(
        op, phase, {buf},
        [v, bp, s](Range r) {  // a slice is a block of rows of one part
          const Range ks = bp.ks(copyPartOf(bp, v.rows, s.k, r.begin), s.k);
          const i64 base = v.rows * ks.begin;
          return operandWindows(
              v, {(r.begin - base) / ks.size(), (r.end - 1 - base) / ks.size() + 1}, ks);
        },
        0, what);
    return buf;
  };
  const int ap = copy(av, bp.rb, bp.rowBlocks, true, kBlockAPhase, "a_k_parts");
  const int bpBuf = copy(bv, bp.cb, bp.colBlocks, false, kBlockBPhase, "b_k_parts");
  // The block products: one slice (one vertex) per block.
  std::vector<TileSlice> m;
  for (i64 part = 0; part < bp.parts; ++part)
    for (i64 bi = 0; bi < bp.rowBlocks; ++bi)
      for (i64 bj = 0; bj < bp.colBlocks; ++bj) {
        const i64 begin = bp.blockBegin(part, bi, bj);
        m.push_back({tileOf(part, bi, bj), begin, begin + bp.blockRows(bi) * bp.blockCols(bj), 0});
      }
  const int partials =
      p.temporary(op, "block_partials", bp.parts * bp.rows * bp.cols, partialsOf(op), std::move(m));
  // Block (part, bi, bj) of the partial element e.
  auto blockOf = [bp](i64 e) {
    const i64 part = e / (bp.rows * bp.cols), inPart = e - part * bp.rows * bp.cols;
    const i64 bi = inPart / (bp.rb * bp.cols);
    const i64 bj = (inPart - bi * bp.rb * bp.cols) / (bp.blockRows(bi) * bp.cb);
    return std::array<i64, 3>{part, bi, bj};
  };
  p.perSlice(
      op, kBlockProductsPhase, {partials},
      [bp, s, ap, bpBuf, blockOf](Range r) {
        const auto [part, bi, bj] = blockOf(r.begin);
        const Range ks = bp.ks(part, s.k);
        const i64 r0 = bi * bp.rb, c0 = bj * bp.cb;
        return Windows{{ap, bp.rows * ks.begin + r0 * ks.size(),
                        bp.rows * ks.begin + (r0 + bp.blockRows(bi)) * ks.size()},
                       {bpBuf, bp.cols * ks.begin + c0 * ks.size(),
                        bp.cols * ks.begin + (c0 + bp.blockCols(bj)) * ks.size()}};
      },
      0, "block_products", [bp, s, blockOf](Range r) { return bp.ks(blockOf(r.begin)[0], s.k); });
  // The sums: out in column blocks of cb, a slice (row i, columns of block bj) in one block of
  // every part.
  p.mapChannelBlocked(out, bp.rows, bp.cols, bp.cb);
  p.perSlice(
      op, kBlockSumsPhase, {out},
      [bp, partials](Range r) {
        const i64 i = r.begin / bp.cols, j = r.begin % bp.cols;
        const i64 bi = i / bp.rb, bj = j / bp.cb;
        Windows w;
        for (i64 part = 0; part < bp.parts; ++part) {
          const i64 begin =
              bp.blockBegin(part, bi, bj) + (i - bi * bp.rb) * bp.blockCols(bj) + (j - bj * bp.cb);
          w.push_back({partials, begin, begin + r.size()});
        }
        return w;
      },
      bp.cols, "sum_partials",
      [bp](Range) {
        return Range{0, bp.parts};
      });
}

// The copy vertex of kBlockAPhase / kBlockBPhase: element e of the k-part-major copy from the
// operand's windows (ascending).
std::function<void()> copyVertex(const VertexArgs& a, const BlockPlan& bp, const OperandView& v) {
  const Range ks = bp.ks(copyPartOf(bp, v.rows, v.k, a.work.begin), v.k);
  return [v, ks, W = a.in, y = a.out[0], work = a.work] {
    const i64 base = v.rows * ks.begin;
    size_t w = 0;
    for (i64 e = work.begin; e < work.end; ++e) {
      const i64 src = v.at((e - base) / ks.size(), ks.begin + (e - base) % ks.size());
      if (src < W[w].base || src >= W[w].base + W[w].size) {
        auto it = std::upper_bound(W.begin(), W.end(), src,
                                   [](i64 x, const FW& win) { return x < win.base; });
        w = static_cast<size_t>(it - W.begin()) - 1;
      }
      y[e - work.begin] = W[w][src];
    }
  };
}

// The block product of phase 0: partials[ii][jj] = sum over the part's ks of Ap[ii] . Bp[jj].
std::function<void()> blockVertex(const VertexArgs& a, const BlockPlan& bp, i64 k) {
  const i64 part = a.work.begin / (bp.rows * bp.cols);
  const i64 inPart = a.work.begin - part * bp.rows * bp.cols, bi = inPart / (bp.rb * bp.cols);
  const i64 bj = (inPart - bi * bp.rb * bp.cols) / (bp.blockRows(bi) * bp.cb);
  const i64 h = bp.blockRows(bi), w = bp.blockCols(bj), kp = bp.ks(part, k).size();
  return [A = a.in[0].data, B = a.in[1].data, y = a.out[0], h, w, kp] {
    for (i64 i = 0; i < h; ++i)
      for (i64 j = 0; j < w; ++j) {
        double acc = 0;
        for (i64 kk = 0; kk < kp; ++kk) acc += double(A[i * kp + kk]) * B[j * kp + kk];
        y[i * w + j] = float(acc);
      }
  };
}

// Batched B (attention's scores Q K^T and context P V: 32 heads of [512, 64] f16 at BERT-Large's
// micro-batch 2) read whole by a vertex, one head's rows of the output per tile: mapped linearly,
// a tile's slice crosses a batch boundary wherever the tiles do not divide the batches evenly,
// and that tile gathers two batches of B (V: 139,776 B on an Mk2 tile, with the split over k).
// Mapped in one block of tiles per batch (PlanApi::mapInBlocks), a tile reads its rows of A and
// its batch of B, whole while that fits a window budget in its stored type (no partials).
bool perBatchPlan(const PlanApi& p, const Op& op, const kernels::MatMulShape& s) {
  if (s.batch < 2 || s.broadcastB || s.batch > p.numTiles()) return false;
  const i64 bBatchBytes = s.k * s.n * sizeOf(p.graph().tensor(op.inputs[1]).dtype);
  if (bBatchBytes > p.windowBudgetBytes()) return false;
  if (s.k * s.n * 4 > p.windowBudgetBytes()) return true;  // otherwise split over k or columns
  const i64 batchElems = s.m * s.n;
  for (const TileSlice& sl : p.mapping(op.outputs[0]))
    if (sl.begin / batchElems != (sl.end - 1) / batchElems) return true;  // reads two batches
  return false;
}

// Rows of the output are (batch * M + i). Small B: a vertex per output slice reading its A
// rows and B whole (its batches); B [N, K] too large: slices cut at row ends, output columns
// [j0, j1) reading B rows j0..j1 (the output column-blocked: columnsPerTile); B [K, N] too
// large: the sum split over k, each part reading B rows k0..k1.
void plan(PlanApi& p, const Op& op) {
  const auto s = matMulShapeOf(p.graph(), op);
  const int a = op.inputs[0], b = op.inputs[1], out = op.outputs[0];
  const ColumnBlocks columns = columnsPerTile(p, op, s);
  if (blockable(s) && s.k * s.n * 4 > p.windowBudgetBytes()) {
    // What a tile holds under the column-blocked plan or the split over k (its partials and at
    // least a window budget of operands), against the blocked plan.
    const Graph& g = p.graph();
    const i64 e = s.cElems();
    double current = static_cast<double>(columns.ng > 0 ? columns.bytes : 0);
    if (!s.transB) {
      const i64 parts = conv_plan::reductionParts(
          e, s.k, s.n * 4, static_cast<i64>(p.mapping(out).size()), p.target());
      current = static_cast<double>(parts * e * sizeOf(partialsOf(op))) /
                    static_cast<double>(p.numTiles()) +
                static_cast<double>(p.windowBudgetBytes());
    }
    const BlockPlan bp = blockPlanOf(g, op, s, p.numTiles());
    if (bp.parts > 0 && bp.bytes < current) return planBlocked(p, op, s, bp);
  }
  if (columns.ng > 0) p.mapChannelBlocked(out, s.batch * s.m, s.n, columns.ng);
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
  auto wholeB = [s, b, bBatches, aWindow, with](Range r) {
    Range rows = rowsOf(r, s.n), bb = bBatches(rows);
    return with(aWindow(rows, {0, s.k}), {b, bb.begin * s.k * s.n, bb.end * s.k * s.n});
  };
  if (perBatchPlan(p, op, s)) {
    p.mapInBlocks(out, s.m * s.n);
    p.perSlice(op, 0, {out}, wholeB, s.m * s.n, "per_batch");
  } else if (s.k * s.n * 4 <= p.windowBudgetBytes()) {
    p.perSlice(op, 0, {out}, wholeB);
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
  if (a.phase == 1 || a.phase == kBlockSumsPhase) return sumPartials(a);
  const auto s = matMulShapeOf(a.g, a.op);
  if (a.phase >= kBlockAPhase) {  // the blocked plan
    const BlockPlan bp = blockPlanOf(a.g, a.op, s, a.target.numTiles);
    if (a.phase == kBlockAPhase)
      return copyVertex(a, bp, {a.op.inputs[0], bp.rows, s.k, !s.transA});
    if (a.phase == kBlockBPhase) return copyVertex(a, bp, {a.op.inputs[1], bp.cols, s.k, s.transB});
    return blockVertex(a, bp, s.k);
  }
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
  f.costTraits.macPhases = {0, kBlockProductsPhase};
  registerOp(std::move(f));
}

}  // namespace ipu::ops
