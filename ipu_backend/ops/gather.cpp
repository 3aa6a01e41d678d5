// gather: rows of a table picked by indices (embedding lookup), and its gradient scatter_add.
//   gather(table [V, D], indices i32 [...]) -> y [..., D], y[n, :] = table[indices[n], :]
//   scatter_add(updates [..., D], indices i32 [...], rows = V) -> y [V, D], zero but for
//     y[indices[n], :] += updates[n, :] (repeated indices accumulate)
// Which rows a vertex reads depends on the index values, which the static exchange cannot know.
// The plan is a multi-slice over the table (popops' multiSlice does the same): the table's rows
// are split into parts that fit a vertex's window budget, every part looks up all the indices
// of its output slice and writes the rows it holds (zero elsewhere) into a partial row, and a
// second phase sums the parts. No vertex copies the whole table unless it fits its budget.
// scatter_add splits the indices instead: each part adds its updates into a partial [V, D] slice.
// A wide table where those splits need several parts (BERT's word embeddings) is planned in
// column groups instead, as popops' multiSlice / multiUpdateAdd split the table over columns as
// well as rows (TableColumns below).
// Both take the policy's partials type (attribute `partials`, set on gather by the precision pass
// and passed on to its gradient): under "16.16" the parts are f16, as popops' multiUpdateAdd
// accumulates a 16-bit embedding gradient in its own type (gather's parts are exact: one part
// holds each output row). The column plans keep their partials in the output's type (gather's
// are exact) or have none (scatter_add sums in f32 and rounds once).
// An index outside [0, V) is an error: the fused kernel throws naming the op, the position and
// the value; a tile vertex, which cannot throw, writes NaN to the rows it computes (a column
// plan's vertex to its whole block, so the whole output is NaN).
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "ipu_backend/compiler/conv_plan.h"
#include "ipu_backend/compiler/executable.h"
#include "ipu_backend/ir/builder.h"
#include "ipu_backend/ops/op_info.h"
#include "ipu_backend/precision/half.h"

namespace ipu::ops {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Throws for the first out-of-range index a fused kernel met (-1: none).
void checkIndex(const Graph& g, const Op& op, i64 position, i64 rows, const std::int32_t* idx) {
  if (position < 0) return;
  throw std::out_of_range(
      fmt::format("{} '{}': index {} at position {} of '{}' is outside the table's rows [0, {})",
                  opName(op.kind), g.tensor(op.outputs[0]).name, idx[position], position,
                  g.tensor(op.inputs[1]).name, rows));
}

void recordBad(std::atomic<i64>& bad, i64 position) {
  i64 cur = bad.load();
  while ((cur < 0 || position < cur) && !bad.compare_exchange_weak(cur, position)) {
  }
}

// ---- column groups ---------------------------------------------------------------------------
// gather and scatter_add on a wide table ([V, D], D split into G groups of dc columns) hold and
// read copies of it or of the lookups' rows in column-block-major order, [G][rows][dc_g], as
// popops' multiSlice / multiUpdateAdd split the table over columns as well as rows: block g is
// contiguous, so a tile of group g reads its columns in one window.
struct TableColumns {
  i64 groups = 0, dc = 0;   // G column groups of dc columns (the last may be narrower)
  i64 v = 0, d = 0, n = 0;  // the table's rows and columns, the indices
  i64 width(i64 g) const { return std::min(dc, d - g * dc); }
  i64 lookupsBegin(i64 g) const { return g * n * dc; }  // block g of a [G][N][dc_g] copy
  i64 tableBegin(i64 g) const { return g * v * dc; }    // block g of a [G][V][dc_g] copy
  // The group of element e of a [G][rows][dc_g] copy.
  i64 groupOf(i64 e, i64 rows) const { return std::min(groups - 1, e / (rows * dc)); }
};

// The column groups: the fewest that keep what a tile of a group holds per lookup (N x dc of
// `bytes` each: scatter_add's update columns, gather's partial rows) within the table slice it
// holds; at most one group per tile, and groups of at least kMinGroupColumns columns (a copy
// reads a window per row and group: narrower groups cost more windows than they save bytes).
constexpr i64 kMinGroupColumns = 8;

TableColumns tableColumnsOf(i64 v, i64 d, i64 n, i64 bytes, i64 tableBytes, i64 tiles) {
  TableColumns c;
  c.v = v, c.d = d, c.n = n;
  const i64 slice = ceilDiv(v * d, tiles) * tableBytes;
  const i64 most = std::max<i64>(1, std::min(d / kMinGroupColumns, tiles));
  for (c.groups = 1; c.groups < most; ++c.groups)
    if (ceilDiv(d, c.groups) * n * bytes <= slice) break;
  c.dc = ceilDiv(d, c.groups);
  c.groups = ceilDiv(d, c.dc);
  return c;
}

// Block b of a group-blocked copy ([G][rows][dc_g]) over the tiles [first, first + count) of
// its group, in whole rows: each tile a run of rows.
void mapGroupBlock(std::vector<TileSlice>& m, i64 begin, i64 rows, i64 width, i64 first, i64 count,
                   i64 numTiles) {
  count = std::clamp<i64>(count, 1, rows);
  for (i64 j = 0; j < count; ++j) {
    const i64 r0 = rows * j / count, r1 = rows * (j + 1) / count;
    if (r1 > r0)
      m.push_back(
          {static_cast<int>((first + j) % numTiles), begin + r0 * width, begin + r1 * width, 0});
  }
}

// Rows [i0, i1) of a [rows, D] output (its slice r) from the G blocks of its column-blocked
// copy `copy` ([G][rows][dc_g]): a window per group.
Windows rowsFromColumns(const TableColumns& c, int copy, i64 rows, Range r) {
  const i64 i0 = r.begin / c.d, i1 = (r.end - 1) / c.d + 1;
  Windows ws;
  for (i64 gr = 0; gr < c.groups; ++gr)
    ws.push_back({copy, gr * rows * c.dc + i0 * c.width(gr), gr * rows * c.dc + i1 * c.width(gr)});
  return ws;
}

// The vertex of rowsFromColumns: output element i (row i / D, column i % D) from its group's
// window.
std::function<void()> rowsFromColumnsVertex(const VertexArgs& a, const TableColumns& c, i64 rows) {
  return [c, rows, W = a.in, y = a.out[0], work = a.work] {
    for (i64 i = work.begin; i < work.end; ++i) {
      const i64 row = i / c.d, col = i % c.d, gr = col / c.dc;
      y[i - work.begin] =
          W[static_cast<size_t>(gr)][gr * rows * c.dc + row * c.width(gr) + (col - gr * c.dc)];
    }
  };
}

// ---- gather ----------------------------------------------------------------------------------

std::vector<TensorType> inferGather(const std::vector<const Tensor*>& in, const Attrs& a,
                                    const std::string& label) {
  expectPartials(a, label);
  const Tensor &table = *in[0], &idx = *in[1];
  expectRank(table, 2, label, "table [V,D]");
  Shape out = idx.shape;
  out.push_back(table.shape[1]);
  return {{out, table.dtype}};
}

// The column-blocked plan of a wide table. Split over its rows, every part of the table writes
// a partial of the whole output ([N, D], zero but for its rows' lookups): BERT-Large's word
// embeddings (30,912 x 1,024 f16, 1,024 lookups) made about 210 parts, 299,596 B of partials and
// 299,008 B of gathered table rows on one Mk2 tile. In column groups, a tile of group g holds a
// run of the table's rows of g and writes a partial of N x dc only:
//   kGatherTablePhase    the table copied column-block-major, [G][V][dc_g]: each tile copies
//                        its own rows (the table's mapping), so the copy stays on the tile;
//   kGatherLookupPhase   partials [G][tile j of the group][N][dc_g]: tile j of group g reads
//                        block g's rows of its run (one window) and every index, and writes
//                        the rows it holds (zero elsewhere);
//   kGatherSumPhase      the lookups column-block-major, [G][N][dc_g]: the sum of the group's
//                        partials (one of them holds each row: exact);
//   kGatherRowsPhase     the output's slices read back from the G blocks (rowsFromColumns).
constexpr int kGatherTablePhase = 2, kGatherLookupPhase = 3, kGatherSumPhase = 4,
              kGatherRowsPhase = 5;

TableColumns gatherColumnsOf(const Graph& g, const Op& op, i64 tiles) {
  const Tensor& table = g.tensor(op.inputs[0]);
  return tableColumnsOf(table.shape[0], table.shape[1], g.tensor(op.inputs[1]).elements(),
                        sizeOf(g.tensor(op.outputs[0]).dtype), sizeOf(table.dtype), tiles);
}

// Group g's tiles (their indices from the first), and the rows of the table run of its tile j.
Range gatherGroupTiles(const TableColumns& c, i64 gr, i64 tiles) {
  return {gr * tiles / c.groups, (gr + 1) * tiles / c.groups};
}
Range gatherRunRows(const TableColumns& c, i64 j, i64 count) {
  return {c.v * j / count, c.v * (j + 1) / count};
}
// The first element of the partial block of tile j of group g (groups before g are full width).
i64 gatherPartialBegin(const TableColumns& c, i64 gr, i64 j, i64 tiles) {
  return c.n * c.dc * gatherGroupTiles(c, gr, tiles).begin + j * c.n * c.width(gr);
}

// Group g and tile j of the partial block holding element e.
std::array<i64, 2> gatherBlockOf(const TableColumns& c, i64 e, i64 tiles) {
  i64 gr = c.groups - 1;
  while (gr > 0 && gatherPartialBegin(c, gr, 0, tiles) > e) --gr;
  return {gr, (e - gatherPartialBegin(c, gr, 0, tiles)) / (c.n * c.width(gr))};
}

// The split over rows where it needs more than one part; what a tile holds under each: the
// split's partials and a part's gathered rows, against the column plan's table copy, the run it
// gathers and its partial block.
bool gatherColumnsAreSmaller(const TableColumns& c, i64 parts, i64 partialBytes, i64 tableBytes,
                             i64 outBytes, i64 tiles) {
  if (parts <= 1 || c.groups < 2 || c.groups * 2 > tiles) return false;
  const double T = static_cast<double>(tiles);
  const double split =
      static_cast<double>(parts * partialBytes) * static_cast<double>(c.n * c.d) / T +
      static_cast<double>(ceilDiv(c.v, parts) * c.d * tableBytes);
  const double columns = 2 * static_cast<double>(c.v * c.d * tableBytes) / T +
                         static_cast<double>(c.n * c.dc * outBytes + c.n * 4);
  return columns < split;
}

void planGatherColumns(PlanApi& p, const Op& op, const TableColumns& c) {
  const Graph& g = p.graph();
  const int table = op.inputs[0], idx = op.inputs[1], out = op.outputs[0];
  const DType tType = g.tensor(table).dtype, oType = g.tensor(out).dtype;
  const i64 T = p.numTiles();
  // The table's copy: group g's rows r on the tile holding the table's element r * D.
  std::vector<i64> cuts;  // the table's slice boundaries, in elements
  for (const TileSlice& sl : p.mapping(table)) cuts.push_back(sl.end);
  std::vector<TileSlice> tm;
  for (i64 gr = 0; gr < c.groups; ++gr) {
    const i64 w = c.width(gr);
    for (const TileSlice& sl : p.mapping(table)) {
      const i64 r0 = ceilDiv(sl.begin, c.d), r1 = std::min(c.v, ceilDiv(sl.end, c.d));
      if (r1 > r0) tm.push_back({sl.tile, c.tableBegin(gr) + r0 * w, c.tableBegin(gr) + r1 * w, 0});
    }
  }
  const int tableCols = p.temporary(op, "table_columns", c.v * c.d, tType, std::move(tm));
  p.perSlice(
      op, kGatherTablePhase, {tableCols},
      [c, table, cuts](Range r) {  // the rows whole, cut where the table's slices end
        const i64 gr = c.groupOf(r.begin, c.v), w = c.width(gr);
        const i64 r0 = (r.begin - c.tableBegin(gr)) / w, r1 = (r.end - c.tableBegin(gr)) / w;
        Windows ws;
        for (i64 b = r0 * c.d; b < r1 * c.d;) {
          const i64 e = std::min(r1 * c.d, *std::upper_bound(cuts.begin(), cuts.end(), b));
          ws.push_back({table, b, e});
          b = e;
        }
        return ws;
      },
      0, "table_columns");
  // The partial blocks: tile j of group g, n x dc_g elements each.
  std::vector<TileSlice> pm;
  const i64 start = p.tileOf(out, 0);
  for (i64 gr = 0; gr < c.groups; ++gr) {
    const Range tiles = gatherGroupTiles(c, gr, T);
    for (i64 j = 0; j < tiles.size(); ++j) {
      const i64 b = gatherPartialBegin(c, gr, j, T);
      pm.push_back({static_cast<int>((start + tiles.begin + j) % T), b, b + c.n * c.width(gr), 0});
    }
  }
  const i64 partialElems = pm.back().end;
  const int partials = p.temporary(op, "lookup_partials", partialElems, oType, std::move(pm));
  p.perSlice(
      op, kGatherLookupPhase, {partials},
      [c, T, tableCols, idx](Range r) {
        const auto [gr, j] = gatherBlockOf(c, r.begin, T);
        const Range rows = gatherRunRows(c, j, gatherGroupTiles(c, gr, T).size());
        const i64 b = c.tableBegin(gr), w = c.width(gr);
        return Windows{{tableCols, b + rows.begin * w, b + rows.end * w}, {idx, 0, c.n}};
      },
      0, "lookup_columns");
  // The lookups' copy: group g's block over the group's tiles, a run of lookups each.
  std::vector<TileSlice> lm;
  for (i64 gr = 0; gr < c.groups; ++gr) {
    const Range tiles = gatherGroupTiles(c, gr, T);
    mapGroupBlock(lm, c.lookupsBegin(gr), c.n, c.width(gr), start + tiles.begin, tiles.size(), T);
  }
  const int lookupCols = p.temporary(op, "lookup_columns", c.n * c.d, oType, std::move(lm));
  p.perSlice(
      op, kGatherSumPhase, {lookupCols},
      [c, T, partials](Range r) {  // lookups [k0, k1) of group g in each of its tiles' partials
        const i64 gr = c.groupOf(r.begin, c.n), w = c.width(gr), base = c.lookupsBegin(gr);
        const i64 k0 = (r.begin - base) / w, k1 = (r.end - base) / w;
        Windows ws;
        for (i64 j = 0; j < gatherGroupTiles(c, gr, T).size(); ++j) {
          const i64 b = gatherPartialBegin(c, gr, j, T);
          ws.push_back({partials, b + k0 * w, b + k1 * w});
        }
        return ws;
      },
      0, "sum_lookup_partials");
  p.perSlice(
      op, kGatherRowsPhase, {out},
      [c, lookupCols](Range r) { return rowsFromColumns(c, lookupCols, c.n, r); }, 0,
      "rows_from_columns");
}

// kGatherTablePhase: element e of the table's copy (row, column of group g) from the windows of
// its rows (ascending).
std::function<void()> gatherTableVertex(const VertexArgs& a, const TableColumns& c) {
  return [c, W = a.in, y = a.out[0], work = a.work] {
    const i64 gr = c.groupOf(work.begin, c.v), w = c.width(gr), base = c.tableBegin(gr);
    size_t win = 0;
    for (i64 e = work.begin; e < work.end; ++e) {
      const i64 src = (e - base) / w * c.d + gr * c.dc + (e - base) % w;
      while (src >= W[win].base + W[win].size) ++win;
      y[e - work.begin] = W[win][src];
    }
  };
}

// kGatherLookupPhase: the partial block of tile j of group g: row k the table's row idx[k] where
// the tile's run holds it, zero elsewhere; an index outside the table makes the block NaN (a
// vertex cannot throw).
std::function<void()> gatherLookupVertex(const VertexArgs& a, const TableColumns& c) {
  const i64 T = a.target.numTiles;
  const auto [gr, j] = gatherBlockOf(c, a.work.begin, T);
  const Range rows = gatherRunRows(c, j, gatherGroupTiles(c, gr, T).size());
  return [c, rows, w = c.width(gr), U = a.in[0], idx = a.ints[1], y = a.out[0], work = a.work] {
    std::fill(y, y + work.size(), 0.0f);
    for (i64 k = 0; k < c.n; ++k) {
      const i64 row = idx[k];
      if (row < 0 || row >= c.v) {
        std::fill(y, y + work.size(), kNaN);
        return;
      }
      if (row >= rows.begin && row < rows.end)
        std::copy(U.data + (row - rows.begin) * w, U.data + (row - rows.begin + 1) * w, y + k * w);
    }
  };
}

void planGather(PlanApi& p, const Op& op) {
  const Graph& g = p.graph();
  const Shape& ts = g.tensor(op.inputs[0]).shape;
  const i64 v = ts[0], d = ts[1];
  const int table = op.inputs[0], idx = op.inputs[1], out = op.outputs[0];
  const i64 parts = conv_plan::reductionParts(g.tensor(out).elements(), v, d * 4,
                                              static_cast<i64>(p.mapping(out).size()), p.target());
  const TableColumns c = gatherColumnsOf(g, op, p.numTiles());
  if (gatherColumnsAreSmaller(c, parts, sizeOf(partialsOf(op)), sizeOf(g.tensor(table).dtype),
                              sizeOf(g.tensor(out).dtype), p.numTiles()))
    return planGatherColumns(p, op, c);
  p.splitReduction(op, 0, op.outputs[0], v, d * 4, [=](Range r, Range red) {
    return Windows{{table, red.begin * d, red.end * d}, {idx, r.begin / d, (r.end - 1) / d + 1}};
  });
}

std::function<void()> vertexGather(const VertexArgs& a) {
  if (a.phase == 1 || a.phase == kGatherSumPhase) return sumPartials(a);
  if (a.phase >= kGatherTablePhase) {
    const TableColumns c = gatherColumnsOf(a.g, a.op, a.target.numTiles);
    if (a.phase == kGatherTablePhase) return gatherTableVertex(a, c);
    if (a.phase == kGatherLookupPhase) return gatherLookupVertex(a, c);
    return rowsFromColumnsVertex(a, c, c.n);
  }
  const Shape& ts = a.g.tensor(a.op.inputs[0]).shape;
  const i64 v = ts[0], d = ts[1];
  return [table = a.in[0], idx = a.ints[1], y = a.out[0], work = a.work, red = a.red, v, d] {
    for (i64 i = work.begin; i < work.end; ++i) {
      const i64 row = idx[i / d];
      y[i - work.begin] = row < 0 || row >= v                 ? kNaN
                          : row >= red.begin && row < red.end ? table[row * d + i % d]
                                                              : 0.0f;
    }
  };
}

// Fused mode: rows idx[k] of a [v, d] table copied as stored into y; an index outside the
// table is an error naming it (after the loop).
template <class T>
void gatherRows(const Graph& g, const Op& op, const T* table, const std::int32_t* idx, T* y, i64 v,
                i64 d, i64 n) {
  std::atomic<i64> bad{-1};
#pragma omp parallel for schedule(static)
  for (i64 k = 0; k < n; ++k) {
    const i64 row = idx[k];
    if (row < 0 || row >= v) {
      recordBad(bad, k);
      continue;
    }
    std::copy(table + row * d, table + (row + 1) * d, y + k * d);
  }
  checkIndex(g, op, bad.load(), v, idx);
}

std::function<void()> fusedGather(const FusedArgs& a) {
  const Shape& ts = a.g.tensor(a.op.inputs[0]).shape;
  const i64 v = ts[0], d = ts[1], n = a.g.tensor(a.op.inputs[1]).elements();
  return [&g = a.g, &op = a.op, table = a.in[0], idx = a.ints[1], y = a.out[0], v, d, n] {
    gatherRows(g, op, table, idx, y, v, d, n);
  };
}

// Fused mode on 16-bit tables: rows copied as stored (widening, copying and rounding back gives
// the same bits), instead of widening the whole table through scratch for a few rows.
std::function<void()> nativeGather(const NativeFusedArgs& a) {
  const DType t = a.g.tensor(a.op.inputs[0]).dtype;
  if ((t != DType::BF16 && t != DType::F16) || a.g.tensor(a.op.outputs[0]).dtype != t) return {};
  const Shape& ts = a.g.tensor(a.op.inputs[0]).shape;
  const i64 v = ts[0], d = ts[1], n = a.g.tensor(a.op.inputs[1]).elements();
  return
      [&g = a.g, &op = a.op, table = static_cast<const std::uint16_t*>(a.in[0]),
       idx = static_cast<const std::int32_t*>(a.in[1]), y = static_cast<std::uint16_t*>(a.out[0]),
       v, d, n] { gatherRows(g, op, table, idx, y, v, d, n); };
}

void gradGather(const GradArgs& a) {
  if (!a.needs[0]) return;
  Attrs attrs;
  attrs.set("rows", a.g.tensor(a.op.inputs[0]).shape[0]);
  if (a.op.attrs.has("partials")) attrs.set("partials", a.op.attrs.getString("partials"));
  a.accumulate(a.op.inputs[0], add(a.g, "scatter_add", {a.dy[0], a.op.inputs[1]}, attrs)[0]);
}

// ---- scatter_add -----------------------------------------------------------------------------

std::vector<TensorType> inferScatterAdd(const std::vector<const Tensor*>& in, const Attrs& a,
                                        const std::string& label) {
  expectPartials(a, label);
  const Tensor &upd = *in[0], &idx = *in[1];
  const i64 rows = a.getInt("rows");
  if (rows < 1) fail(label, fmt::format("rows must be >= 1, got {}", rows));
  if (upd.shape.size() != idx.shape.size() + 1 ||
      !std::equal(idx.shape.begin(), idx.shape.end(), upd.shape.begin()))
    fail(label, fmt::format("updates '{}' {} must be the indices' shape {} plus a row dimension",
                            upd.name, shapeStr(upd.shape), shapeStr(idx.shape)));
  return {{{rows, upd.shape.back()}, upd.dtype}};
}

// ---- the column-blocked plan ---------------------------------------------------------------
// With the output [V, D] mapped linearly a tile holds whole rows, and since the rows an update
// lands in depend on the index values, every tile needs every update row: the split over the
// indices then holds P partial [V, D] slices per tile and gathers N/P whole update rows (BERT-
// Large's word-embedding gradient on one Mk2 tile: 339,724 B of f16 partials and 262,144 B of
// update rows). Split over G groups of dc columns, a tile of group g needs only the updates'
// columns of g (N x dc), for all the indices at once, so there are no partials:
//   kColumnUpdatesPhase  the updates copied column-block-major, [G][N][dc_g] (block g is one
//                        window), block g on the tiles of group g;
//   kColumnScatterPhase  the table column-block-major, [G][V][dc_g], block g on the tiles of
//                        group g, each tile its rows: every index compared, its row added;
//   kColumnRowsPhase     the output's slices (whole rows) read back from the G blocks.
// The sum of an element is taken in f32 in index order and rounded once to the output's type
// (the fused kernels' order), so tile and fused mode agree to the bit.
constexpr int kColumnUpdatesPhase = 2, kColumnScatterPhase = 3, kColumnRowsPhase = 4;

// Which plan: the column blocks where the split over the indices needs more than one part (its
// updates exceed a vertex's window budget) and the table splits into at least two groups.
// What a tile holds under each: the split's partials and a budget of update rows, against the
// column plan's three table slices (its block copy, the gathered copy of it and the output, in
// kColumnRowsPhase) or its block copy, update columns and indices (kColumnScatterPhase).
bool columnPlanIsSmaller(const TableColumns& c, i64 parts, i64 partialBytes, i64 updBytes,
                         i64 outBytes, i64 budget, i64 tiles) {
  if (parts <= 1 || c.groups < 2) return false;
  const double e = static_cast<double>(c.v * c.d), T = static_cast<double>(tiles);
  const double split = static_cast<double>(parts * partialBytes) * e / T +
                       static_cast<double>(std::min(budget, ceilDiv(c.n, parts) * c.d * updBytes));
  const double slice = e * static_cast<double>(outBytes) / T;
  const double columns =
      std::max(3 * slice, slice + static_cast<double>(c.n * c.dc * updBytes + c.n * 4));
  return columns < split;
}

void planTableColumns(PlanApi& p, const Op& op, const TableColumns& c) {
  const Graph& g = p.graph();
  const int upd = op.inputs[0], idx = op.inputs[1], out = op.outputs[0];
  const i64 T = p.numTiles(), start = p.tileOf(out, 0);
  auto groupTiles = [&](i64 gr) { return Range{gr * T / c.groups, (gr + 1) * T / c.groups}; };
  std::vector<TileSlice> um, tm;
  for (i64 gr = 0; gr < c.groups; ++gr) {
    const Range tiles = groupTiles(gr);
    mapGroupBlock(um, c.lookupsBegin(gr), c.n, c.width(gr), start + tiles.begin, tiles.size(), T);
    mapGroupBlock(tm, c.tableBegin(gr), c.v, c.width(gr), start + tiles.begin, tiles.size(), T);
  }
  const int updCols =
      p.temporary(op, "update_columns", c.n * c.d, g.tensor(upd).dtype, std::move(um));
  const int tableCols =
      p.temporary(op, "table_columns", c.v * c.d, g.tensor(out).dtype, std::move(tm));
  // The group of a copy's element e (blocks of every group but the last are full width).
  // A slice of the updates' copy: rows of one group, a window of dc columns per update row
  // (neighbours merged while the merged window stays at most twice what it holds).
  p.perSlice(
      op, kColumnUpdatesPhase, {updCols},
      [c, upd](Range r) {
        const i64 gr = c.groupOf(r.begin, c.n), w = c.width(gr), base = c.lookupsBegin(gr);
        const i64 k0 = (r.begin - base) / w, k1 = (r.end - 1 - base) / w + 1;
        Windows ws;
        i64 held = 0;
        for (i64 k = k0; k < k1; ++k) {
          const i64 b = k * c.d + gr * c.dc, e = b + w;
          if (!ws.empty() && e - ws.back().begin <= 2 * (held + w)) {
            ws.back().end = e;
            held += w;
          } else {
            ws.push_back({upd, b, e});
            held = w;
          }
        }
        return ws;
      },
      0, "update_columns");
  // A slice of the table's copy: rows of one group, reading the group's update columns whole
  // and every index.
  p.perSlice(
      op, kColumnScatterPhase, {tableCols},
      [c, updCols, idx](Range r) {
        const i64 gr = c.groupOf(r.begin, c.v), b = c.lookupsBegin(gr);
        return Windows{{updCols, b, b + c.n * c.width(gr)}, {idx, 0, c.n}};
      },
      0, "scatter_columns");
  // The output's slices: rows [i0, i1) of every group's block, one window each.
  p.perSlice(
      op, kColumnRowsPhase, {out},
      [c, tableCols](Range r) { return rowsFromColumns(c, tableCols, c.v, r); }, 0,
      "rows_from_columns");
}

TableColumns scatterColumnsOf(const Graph& g, const Op& op, i64 tiles) {
  const Tensor& upd = g.tensor(op.inputs[0]);
  return tableColumnsOf(op.attrs.getInt("rows"), upd.shape.back(),
                        g.tensor(op.inputs[1]).elements(), sizeOf(upd.dtype),
                        sizeOf(g.tensor(op.outputs[0]).dtype), tiles);
}

void planScatterAdd(PlanApi& p, const Op& op) {
  const int upd = op.inputs[0], idx = op.inputs[1], out = op.outputs[0];
  const Graph& g = p.graph();
  const i64 d = g.tensor(upd).shape.back(), n = g.tensor(idx).elements();
  const i64 parts = conv_plan::reductionParts(g.tensor(out).elements(), n, d * 4 + 4,
                                              static_cast<i64>(p.mapping(out).size()), p.target());
  const TableColumns c = scatterColumnsOf(g, op, p.numTiles());
  if (columnPlanIsSmaller(c, parts, sizeOf(partialsOf(op)), sizeOf(g.tensor(upd).dtype),
                          sizeOf(g.tensor(out).dtype), p.windowBudgetBytes(), p.numTiles()))
    return planTableColumns(p, op, c);
  p.splitReduction(op, 0, out, n, d * 4 + 4, [=](Range, Range red) {
    return Windows{{upd, red.begin * d, red.end * d}, {idx, red.begin, red.end}};
  });
}

// kColumnUpdatesPhase: element e of the updates' copy from the windows of its rows (ascending).
std::function<void()> columnUpdatesVertex(const VertexArgs& a, const TableColumns& c) {
  return [c, W = a.in, y = a.out[0], work = a.work] {
    const i64 gr = std::min(c.groups - 1, work.begin / (c.n * c.dc)), w = c.width(gr);
    const i64 base = c.lookupsBegin(gr);
    size_t win = 0;
    for (i64 e = work.begin; e < work.end; ++e) {
      const i64 k = (e - base) / w, src = k * c.d + gr * c.dc + (e - base) % w;
      while (src >= W[win].base + W[win].size) ++win;
      y[e - work.begin] = W[win][src];
    }
  };
}

// kColumnScatterPhase: rows [r0, r1) of group g's block, every update of those rows added in
// index order; an index outside the table makes the slice NaN (a vertex cannot throw).
std::function<void()> columnScatterVertex(const VertexArgs& a, const TableColumns& c) {
  return [c, U = a.in[0], idx = a.ints[1], y = a.out[0], work = a.work] {
    const i64 gr = std::min(c.groups - 1, work.begin / (c.v * c.dc)), w = c.width(gr);
    const i64 base = c.tableBegin(gr), r0 = (work.begin - base) / w, r1 = (work.end - base) / w;
    std::fill(y, y + work.size(), 0.0f);
    for (i64 k = 0; k < c.n; ++k) {
      const i64 row = idx[k];
      if (row < 0 || row >= c.v) {
        std::fill(y, y + work.size(), kNaN);
        return;
      }
      if (row < r0 || row >= r1) continue;
      const float* u = U.data + k * w;
      float* yr = y + (row - r0) * w;
      for (i64 j = 0; j < w; ++j) yr[j] += u[j];
    }
  };
}

std::function<void()> vertexScatterAdd(const VertexArgs& a) {
  if (a.phase == 1) return sumPartials(a);
  if (a.phase >= kColumnUpdatesPhase) {
    const TableColumns c = scatterColumnsOf(a.g, a.op, a.target.numTiles);
    if (a.phase == kColumnUpdatesPhase) return columnUpdatesVertex(a, c);
    if (a.phase == kColumnScatterPhase) return columnScatterVertex(a, c);
    return rowsFromColumnsVertex(a, c, c.v);
  }
  const i64 d = a.g.tensor(a.op.inputs[0]).shape.back();
  const i64 v = a.op.attrs.getInt("rows");
  return [upd = a.in[0], idx = a.ints[1], y = a.out[0], work = a.work, red = a.red, v, d] {
    std::fill(y, y + work.size(), 0.0f);
    for (i64 k = red.begin; k < red.end; ++k) {
      const i64 row = idx[k];
      if (row < 0 || row >= v) {
        std::fill(y, y + work.size(), kNaN);
        return;
      }
      const i64 b = std::max(work.begin, row * d), e = std::min(work.end, (row + 1) * d);
      for (i64 i = b; i < e; ++i) y[i - work.begin] += upd[k * d + (i - row * d)];
    }
  };
}

// y[idx[k]] += upd[k] for k in order, over blocks of 16 columns (a cache line of f32) split
// over threads: every element's sum is taken in index order whatever the thread count (the
// column-at-a-time walk touched a new cache line per update element).
void scatterRows(const float* upd, const std::int32_t* idx, float* y, i64 n, i64 d) {
  constexpr i64 kBlock = 16;
  const i64 blocks = (d + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (i64 b = 0; b < blocks; ++b) {
    const i64 j0 = b * kBlock, j1 = std::min(d, j0 + kBlock);
    for (i64 k = 0; k < n; ++k) {
      float* yr = y + idx[k] * d;
      const float* ur = upd + k * d;
#pragma omp simd
      for (i64 j = j0; j < j1; ++j) yr[j] += ur[j];
    }
  }
}

void checkIndices(const Graph& g, const Op& op, const std::int32_t* idx, i64 n, i64 v) {
  for (i64 k = 0; k < n; ++k)
    if (idx[k] < 0 || idx[k] >= v) checkIndex(g, op, k, v, idx);
}

std::function<void()> fusedScatterAdd(const FusedArgs& a) {
  const i64 d = a.g.tensor(a.op.inputs[0]).shape.back();
  const i64 v = a.op.attrs.getInt("rows"), n = a.g.tensor(a.op.inputs[1]).elements();
  return [&g = a.g, &op = a.op, upd = a.in[0], idx = a.ints[1], y = a.out[0], v, d, n] {
    checkIndices(g, op, idx, n, v);
    std::fill(y, y + v * d, 0.0f);
    scatterRows(upd, idx, y, n, d);
  };
}

// Fused mode on 16-bit updates and output: the output zeroed as stored, the updates summed in
// f32 into one row per distinct index (in index order, as the f32 kernel sums them), each such
// row rounded once into the output: the bits of the widening path without widening and
// rounding the whole [V, D] output (the word embeddings' 31M elements for a few hundred rows).
std::function<void()> nativeScatterAdd(const NativeFusedArgs& a) {
  const DType t = a.g.tensor(a.op.inputs[0]).dtype;
  if ((t != DType::BF16 && t != DType::F16) || a.g.tensor(a.op.outputs[0]).dtype != t) return {};
  const i64 d = a.g.tensor(a.op.inputs[0]).shape.back();
  const i64 v = a.op.attrs.getInt("rows"), n = a.g.tensor(a.op.inputs[1]).elements();
  struct Scratch {
    std::vector<float> upd, rows;            // widened updates, one f32 row per distinct index
    std::vector<std::int32_t> slotOf, slot;  // index -> its row (-1: none), update -> row
    std::vector<i64> rowIndex;               // row -> its index
  };
  auto s = std::make_shared<Scratch>();
  s->upd.resize(static_cast<size_t>(n * d));
  s->rows.resize(static_cast<size_t>(n * d));
  s->slotOf.assign(static_cast<size_t>(v), -1);
  s->slot.resize(static_cast<size_t>(n));
  return [&g = a.g, &op = a.op, upd = a.in[0], idx = static_cast<const std::int32_t*>(a.in[1]),
          y = a.out[0], t, v, d, n, s] {
    checkIndices(g, op, idx, n, v);
    s->rowIndex.clear();
    for (i64 k = 0; k < n; ++k) {
      std::int32_t& r = s->slotOf[static_cast<size_t>(idx[k])];
      if (r < 0) {
        r = static_cast<std::int32_t>(s->rowIndex.size());
        s->rowIndex.push_back(idx[k]);
      }
      s->slot[static_cast<size_t>(k)] = r;
    }
    const i64 rows = static_cast<i64>(s->rowIndex.size());
    if (t == DType::BF16)
      precision::toFloat(static_cast<const precision::bf16*>(upd), s->upd.data(), n * d);
    else
      precision::toFloat(static_cast<const precision::f16*>(upd), s->upd.data(), n * d);
    std::fill(s->rows.begin(), s->rows.begin() + rows * d, 0.0f);
    scatterRows(s->upd.data(), s->slot.data(), s->rows.data(), n, d);
    std::memset(y, 0, static_cast<size_t>(v * d * 2));
#pragma omp parallel for schedule(static)
    for (i64 r = 0; r < rows; ++r) {
      const float* src = s->rows.data() + r * d;
      const i64 at = s->rowIndex[static_cast<size_t>(r)] * d;
      if (t == DType::BF16)
        precision::toBF16(src, static_cast<precision::bf16*>(y) + at, d);
      else
        precision::toF16(src, static_cast<precision::f16*>(y) + at, d);
    }
    for (i64 idxRow : s->rowIndex) s->slotOf[static_cast<size_t>(idxRow)] = -1;
  };
}

void gradScatterAdd(const GradArgs& a) {
  if (!a.needs[0]) return;
  Attrs attrs;
  if (a.op.attrs.has("partials")) attrs.set("partials", a.op.attrs.getString("partials"));
  a.accumulate(a.op.inputs[0], add(a.g, "gather", {a.dy[0], a.op.inputs[1]}, attrs)[0]);
}

}  // namespace

IPU_REGISTER_OPS(gather) {
  OpInfo g;
  g.def = {kUnassignedKind,        "gather", 2, 1, {}, {{"partials", AttrType::String, false}},
           PrecisionRule::Compute,
           /*usesPartials=*/true};
  g.doc = "table [V,D], indices i32 [...] -> y [..., D], y[n] = table[indices[n]]";
  g.inputDTypes = {floatTypes(), indexTypes()};
  g.infer = inferGather;
  g.grad = gradGather;
  g.plan = planGather;
  g.vertex = vertexGather;
  g.fused = fusedGather;
  g.nativeFused = nativeGather;
  g.cost = [](const Op&, int phase) { return phase == 0 ? 2.0 : 1.0; };  // compare, select
  g.tolerances.f32 = {0, 0, 1e-2};                                       // copies: exact
  g.tolerances.bf16 = {1e-2, 0, 1e-1};
  registerOp(std::move(g));

  OpInfo s;
  s.def = {kUnassignedKind,
           "scatter_add",
           2,
           1,
           {},
           {{"rows", AttrType::Int, true}, {"partials", AttrType::String, false}},
           PrecisionRule::Compute,
           /*usesPartials=*/true};
  s.doc = "updates [..., D], indices i32 [...], rows V -> y [V, D], y[indices[n]] += updates[n]";
  s.inputDTypes = {floatTypes(), indexTypes()};
  s.infer = inferScatterAdd;
  s.grad = gradScatterAdd;
  s.plan = planScatterAdd;
  s.vertex = vertexScatterAdd;
  s.fused = fusedScatterAdd;
  s.nativeFused = nativeScatterAdd;
  s.cost = [](const Op&, int) { return 1.0; };
  s.tolerances.f32 = {1e-6, 1e-6, 1e-2};
  registerOp(std::move(s));
}

}  // namespace ipu::ops
