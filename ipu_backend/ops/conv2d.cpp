// conv2d: 2-D convolution over NHWC activations, and its two gradients.
//   x [N,H,W,C], w [K,R,S,C/G], attributes stride [2], pad [4] (top, left, bottom, right),
//   dilation [2], groups, optional partials ("f32" / "f16": the tile partial sums' type, set by
//   the precision pass) -> y [N,OH,OW,K]
// conv2d_backward_data: (dy [N,OH,OW,K], w) -> dx [input_shape]
// conv2d_backward_filter: (x, dy) -> dw [K, kernel..., C/G]
// Fused mode runs oneDNN (fused.h): f32 primitives on f32 data, bf16 primitives on bf16 data
// where the CPU has them (nativeFused), otherwise f32 with 16-bit operands converted around it.
// The tile plans read rows of NHWC windows; a convolution whose weights exceed a vertex's
// budget writes its output channel-blocked and splits its data gradient over output channels.
// Grouped and depthwise convolutions plan all three passes in blocks of groups (x and dy copied
// into channel blocks first, compiler/conv_plan.h), so a vertex reads only its groups' channels.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <memory>

#include <fmt/format.h>

#include "ipu_backend/compiler/conv_plan.h"
#include "ipu_backend/compiler/executable.h"
#include "ipu_backend/compiler/op_shapes.h"
#include "ipu_backend/kernels/fused.h"
#include "ipu_backend/kernels/reference.h"
#include "ipu_backend/ops/op_info.h"

namespace ipu::ops {
namespace {

namespace ref = kernels::ref;
namespace fz = kernels::fused;
using A = AttrType;

std::vector<AttrSpec> convAttrs(std::vector<AttrSpec> extra = {}) {
  std::vector<AttrSpec> a = {{"stride", A::Ints, true},
                             {"pad", A::Ints, true},
                             {"dilation", A::Ints, true},
                             {"groups", A::Int, true},
                             {"partials", A::String, false}};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// ---- type inference ----------------------------------------------------------------------------
std::vector<TensorType> inferForward(const std::vector<const Tensor*>& in, const Attrs& a,
                                     const std::string& label) {
  expectPartials(a, label);
  const Tensor &x = *in[0], &w = *in[1];
  expectRank(x, 4, label, "input [N,H,W,C]");
  expectRank(w, 4, label, "weight [K,R,S,C/G]");
  i64 g = a.getInt("groups");
  if (g < 1 || x.shape[3] % g != 0 || w.shape[0] % g != 0)
    fail(label, fmt::format("groups={} must divide input channels {} and output channels {}", g,
                            x.shape[3], w.shape[0]));
  if (w.shape[3] * g != x.shape[3])
    fail(label, fmt::format("weight '{}' {} expects {} input channels per group, input '{}' "
                            "{} has {} channels for {} groups",
                            w.name, shapeStr(w.shape), w.shape[3], x.name, shapeStr(x.shape),
                            x.shape[3], g));
  auto geo = windowGeometry(x.shape, w.shape[1], w.shape[2], a, label);
  return {{{x.shape[0], geo.oh, geo.ow, w.shape[0]}, x.dtype}};
}

std::vector<TensorType> inferBackwardData(const std::vector<const Tensor*>& in, const Attrs& a,
                                          const std::string& label) {
  expectPartials(a, label);
  const Tensor &dy = *in[0], &w = *in[1];
  expectRank(dy, 4, label, "gradient [N,OH,OW,K]");
  expectRank(w, 4, label, "weight [K,R,S,C/G]");
  const auto& xs = a.getInts("input_shape");
  if (xs.size() != 4) fail(label, "attribute 'input_shape' must have 4 values");
  auto geo = windowGeometry(xs, w.shape[1], w.shape[2], a, label);
  if (dy.shape != Shape{xs[0], geo.oh, geo.ow, w.shape[0]})
    fail(label, fmt::format("gradient '{}' {} does not match the output {} of input {}", dy.name,
                            shapeStr(dy.shape), shapeStr({xs[0], geo.oh, geo.ow, w.shape[0]}),
                            shapeStr(xs)));
  return {{xs, dy.dtype}};
}

std::vector<TensorType> inferBackwardFilter(const std::vector<const Tensor*>& in, const Attrs& a,
                                            const std::string& label) {
  expectPartials(a, label);
  const Tensor &x = *in[0], &dy = *in[1];
  expectRank(x, 4, label, "input [N,H,W,C]");
  expectRank(dy, 4, label, "gradient [N,OH,OW,K]");
  const auto& ks = a.getInts("kernel");
  if (ks.size() != 2) fail(label, "attribute 'kernel' must have 2 values");
  i64 g = a.getInt("groups");
  if (g < 1 || x.shape[3] % g != 0 || dy.shape[3] % g != 0)
    fail(label, "groups must divide input and output channels");
  auto geo = windowGeometry(x.shape, ks[0], ks[1], a, label);
  if (dy.shape != Shape{x.shape[0], geo.oh, geo.ow, dy.shape[3]})
    fail(label, fmt::format("gradient '{}' {} does not match input '{}' {}", dy.name,
                            shapeStr(dy.shape), x.name, shapeStr(x.shape)));
  return {{{dy.shape[3], ks[0], ks[1], x.shape[3] / g}, x.dtype}};
}

// ---- gradient ----------------------------------------------------------------------------------
void gradForward(const GradArgs& a) {
  const Op& op = a.op;
  const int dy = a.dy[0];
  if (a.needs[0]) {
    Attrs at = op.attrs;
    at.set("input_shape", a.g.tensor(op.inputs[0]).shape);
    a.accumulate(op.inputs[0], a.g.addOp1(OpKind::Conv2dBackwardData, {dy, op.inputs[1]}, at));
  }
  if (a.needs[1]) {
    Attrs at = op.attrs;
    const Shape w = a.g.tensor(op.inputs[1]).shape;
    at.set("kernel", std::vector<i64>{w[1], w[2]});
    a.accumulate(op.inputs[1], a.g.addOp1(OpKind::Conv2dBackwardFilter, {op.inputs[0], dy}, at));
  }
}

// ---- tile plans --------------------------------------------------------------------------------
// Weight bytes one output channel of a convolution reads.
i64 weightBytesPerOutputChannel(const kernels::Conv2dShape& s) {
  return s.r * s.s * s.cPerGroup() * 4;
}

// How many output channels one tile computes (conv_plan::forwardChannelsPerTile): K itself when
// a linear mapping's slices (which may span all channels) fit the window budget with all the
// weights; otherwise the kg that minimises what a tile gathers: the weights of its kg channels
// plus the input rows of its block of pixels, in the operands' stored dtypes.
i64 outputChannelsPerTile(const PlanApi& p, const Op& op, const kernels::Conv2dShape& s) {
  const Graph& g = p.graph();
  return conv_plan::forwardChannelsPerTile(s, sizeOf(g.tensor(op.inputs[0]).dtype),
                                           sizeOf(g.tensor(op.inputs[1]).dtype), p.target())
      .kg;
}

// Output slices are channel-blocked when the weights are large: a vertex reads its input rows
// and its channels' weight rows. The vertices of one tile read one window of input rows, the
// rows of all their output rows (one gather per tile, not one per output row: neighbouring
// rows' windows overlap).
bool planGroupedForward(PlanApi& p, const Op& op);

void planForward(PlanApi& p, const Op& op) {
  const auto s = convShapeOf(p.graph(), op);
  if (s.groups > 1 && planGroupedForward(p, op)) return;
  // Large operands: blocks of input channels as well where a tile holds less that way
  // (compiler/conv_plan.h, ForwardBlocks).
  if (p.convForwardBlocked(op)) return;
  const int x = op.inputs[0], w = op.inputs[1], out = op.outputs[0];
  const i64 kg = outputChannelsPerTile(p, op, s);
  if (kg < s.k) p.mapChannelBlocked(out, s.n * s.outH() * s.outW(), s.k, kg);
  const i64 oRowLen = s.outW() * s.k, iRowLen = s.w * s.c, wPerK = s.r * s.s * s.cPerGroup();
  std::vector<Range> tileRows(static_cast<size_t>(p.numTiles()), Range{0, 0});
  for (const TileSlice& sl : p.mapping(out)) {
    const Range rows = rowsOf({sl.begin, sl.end}, oRowLen);
    Range& u = tileRows[static_cast<size_t>(sl.tile)];
    u = u.size() == 0 ? rows : Range{std::min(u.begin, rows.begin), std::max(u.end, rows.end)};
  }
  p.perSlice(op, 0, {out}, [&p, &tileRows, s, x, w, out, iRowLen, wPerK](Range r) {
    const Range& outRows = tileRows[static_cast<size_t>(p.tileOf(out, r.begin))];
    Range rows =
        inputRowsForOutputRows(outRows, s.outH(), s.h, s.strideH, s.padTop, s.dilH * (s.r - 1) + 1);
    Range ks = channelsOf(r, s.k);
    return Windows{{x, rows.begin * iRowLen, rows.end * iRowLen},
                   {w, ks.begin * wPerK, ks.end * wPerK}};
  });
}

// Copies `src` ([pixels, c], NHWC) into channel blocks (conv_plan::ChannelBlocks), a temporary
// of the op written in `phase`: each pixel's channels of a block on the tile holding them in
// src, in runs of pixels inside one slice of src; a pixel whose channels of the block two slices
// share is a run of its own (its vertex gathers those channels only). Returns the blocks' id.
int copyToChannelBlocks(PlanApi& p, const Op& op, int phase, int src,
                        const conv_plan::ChannelBlocks& cb, const std::string& what) {
  const std::vector<TileSlice>& srcMap = p.mapping(src);
  std::vector<TileSlice> blockMap;
  for (i64 b = 0; b < cb.count(); ++b) {
    const Range ch = cb.channels(b);
    const i64 base = b * cb.blockElems(), cbb = ch.size();
    size_t sl = 0, runSlice = 0;
    i64 runBegin = 0;
    bool runWhole = false;
    for (i64 px = 0; px <= cb.pixels; ++px) {
      bool whole = false;
      if (px < cb.pixels) {
        const i64 lo = px * cb.c + ch.begin, hi = px * cb.c + ch.end;
        while (srcMap[sl].end <= lo) ++sl;
        whole = hi <= srcMap[sl].end;
        if (px > runBegin && whole && runWhole && sl == runSlice) continue;
      }
      if (px > runBegin)
        blockMap.push_back({srcMap[runSlice].tile, base + runBegin * cbb, base + px * cbb, 0});
      runBegin = px, runSlice = sl, runWhole = whole;
    }
  }
  const Graph& g = p.graph();
  const int blocks =
      p.temporary(op, what, cb.pixels * cb.c, g.tensor(src).dtype, std::move(blockMap));
  p.perSlice(
      op, phase, {blocks},
      [src, cb](Range r) {
        const Range w = cb.sourceOfSlice(r);
        return Windows{{src, w.begin, w.end}};
      },
      0, what);
  return blocks;
}

// The data gradient of a grouped convolution in blocks of groups (compiler/conv_plan.h): dy in
// blocks, then dx, channel-blocked by groups, reading only its block's dy rows and its groups'
// weights. False (nothing planned) when one block is best.
bool planGroupedBackwardData(PlanApi& p, const Op& op) {
  namespace cp = conv_plan;
  const auto s = convShapeOf(p.graph(), op);
  const int dy = op.inputs[0], w = op.inputs[1], dx = op.outputs[0];
  const Graph& g = p.graph();
  const i64 gb =
      cp::groupsPerBlock(s, sizeOf(g.tensor(dy).dtype), sizeOf(g.tensor(w).dtype), p.target());
  if (gb >= s.groups) return false;
  const cp::ChannelBlocks dyb = cp::dyBlocks(s, gb);
  const int dyBlocks = copyToChannelBlocks(p, op, cp::kGroupedDyBlocksPhase, dy, dyb, "dy_blocks");
  // dx channel-blocked by groups; a tile's vertices read one window of their block's dy rows.
  const i64 cg = gb * s.cPerGroup(), iRowLen = s.w * s.c;
  p.mapChannelBlocked(dx, s.n * s.h * s.w, s.c, cg);
  std::vector<Range> tileRows(static_cast<size_t>(p.numTiles()), Range{0, 0});
  for (const TileSlice& sl : p.mapping(dx)) {
    const Range rows = rowsOf({sl.begin, sl.end}, iRowLen);
    Range& u = tileRows[static_cast<size_t>(sl.tile)];
    u = u.size() == 0 ? rows : Range{std::min(u.begin, rows.begin), std::max(u.end, rows.end)};
  }
  p.perSlice(op, cp::kGroupedDataPhase, {dx},
             [&p, &tileRows, s, gb, cg, dyb, dx, w, dyBlocks](Range r) {
               const i64 b = channelsOf(r, s.c).begin / cg;
               const Range& dxRows = tileRows[static_cast<size_t>(p.tileOf(dx, r.begin))];
               const Range oRows = outputRowsForInputRows(dxRows, s.outH(), s.h, s.strideH,
                                                          s.padTop, s.dilH * (s.r - 1) + 1);
               const Range d = dyb.rowsOfBlock(b, oRows, s.outW());
               const Range wr = cp::weightsOfGroupBlock(s, gb, b);
               return Windows{{dyBlocks, d.begin, d.end}, {w, wr.begin, wr.end}};
             });
  return true;
}

// The filter gradient of a grouped convolution in blocks of groups (compiler/conv_plan.h): x and
// dy in blocks, then the split over output rows with its vertices cut at dw's block boundaries,
// each reading its part's rows of its block of x and dy. False when one block is best.
bool planGroupedBackwardFilter(PlanApi& p, const Op& op) {
  namespace cp = conv_plan;
  const auto s = convShapeOf(p.graph(), op);
  const int x = op.inputs[0], dy = op.inputs[1];
  const Graph& g = p.graph();
  const i64 xBytes = sizeOf(g.tensor(x).dtype), dyBytes = sizeOf(g.tensor(dy).dtype);
  const cp::GroupedFilterBlocks plan = cp::groupedFilterPlan(s, xBytes, dyBytes, p.target());
  const i64 gb = plan.gb;
  if (gb >= s.groups) return false;
  const cp::ChannelBlocks xb = cp::xBlocks(s, gb), dyb = cp::dyBlocks(s, gb);
  const int dyBlocks = copyToChannelBlocks(p, op, cp::kGroupedDyBlocksPhase, dy, dyb, "dy_blocks");
  const int xBlocks = copyToChannelBlocks(p, op, cp::kGroupedXBlocksPhase, x, xb, "x_blocks");
  const i64 oh = s.outH(), dwPerBlock = cp::weightsOfGroupBlock(s, gb, 0).size();
  p.splitReduction(
      op, cp::kGroupedFilterPhase, op.outputs[0], s.n * oh, plan.bytesPerRow,
      [s, xb, dyb, xBlocks, dyBlocks, oh, dwPerBlock](Range out, Range red) {
        const i64 b = out.begin / dwPerBlock;
        const Range xRows =
            inputRowsForOutputRows(red, oh, s.h, s.strideH, s.padTop, s.dilH * (s.r - 1) + 1);
        const Range xw = xb.rowsOfBlock(b, xRows, s.w), dw = dyb.rowsOfBlock(b, red, s.outW());
        return Windows{{xBlocks, xw.begin, xw.end}, {dyBlocks, dw.begin, dw.end}};
      },
      false, dwPerBlock);
  return true;
}

// The forward convolution of a grouped convolution in blocks of groups (compiler/conv_plan.h): x
// in blocks, then y, channel-blocked by groups, reading only its block's x rows and its
// channels' weights. False when one block is best.
bool planGroupedForward(PlanApi& p, const Op& op) {
  namespace cp = conv_plan;
  const auto s = convShapeOf(p.graph(), op);
  const int x = op.inputs[0], w = op.inputs[1], y = op.outputs[0];
  const Graph& g = p.graph();
  const i64 gb = cp::groupsPerForwardBlock(s, sizeOf(g.tensor(x).dtype), sizeOf(g.tensor(w).dtype),
                                           p.target());
  if (gb >= s.groups) return false;
  const cp::ChannelBlocks xb = cp::xBlocks(s, gb);
  const int xBlocks = copyToChannelBlocks(p, op, cp::kGroupedXBlocksPhase, x, xb, "x_blocks");
  const i64 kg = gb * s.kPerGroup(), oRowLen = s.outW() * s.k;
  p.mapChannelBlocked(y, s.n * s.outH() * s.outW(), s.k, kg);
  std::vector<Range> tileRows(static_cast<size_t>(p.numTiles()), Range{0, 0});
  for (const TileSlice& sl : p.mapping(y)) {
    const Range rows = rowsOf({sl.begin, sl.end}, oRowLen);
    Range& u = tileRows[static_cast<size_t>(sl.tile)];
    u = u.size() == 0 ? rows : Range{std::min(u.begin, rows.begin), std::max(u.end, rows.end)};
  }
  p.perSlice(op, cp::kGroupedForwardPhase, {y},
             [&p, &tileRows, s, gb, kg, xb, y, w, xBlocks](Range r) {
               const i64 b = channelsOf(r, s.k).begin / kg;
               const Range& yRows = tileRows[static_cast<size_t>(p.tileOf(y, r.begin))];
               const Range iRows = inputRowsForOutputRows(yRows, s.outH(), s.h, s.strideH, s.padTop,
                                                          s.dilH * (s.r - 1) + 1);
               const Range xw = xb.rowsOfBlock(b, iRows, s.w);
               const Range wr = cp::weightsOfGroupBlock(s, gb, b);
               return Windows{{xBlocks, xw.begin, xw.end}, {w, wr.begin, wr.end}};
             });
  return true;
}

// The split over k of an ungrouped convolution's data gradient with dy in k-blocks
// (compiler/conv_plan.h): dy copied into blocks, then each part reads its blocks' rows and its
// weight rows only. False (nothing planned) where the parts' tiles read few dy rows.
bool planKBlockedBackwardData(PlanApi& p, const Op& op) {
  namespace cp = conv_plan;
  const auto s = convShapeOf(p.graph(), op);
  const int dy = op.inputs[0], w = op.inputs[1], dx = op.outputs[0];
  if (!cp::splitDataGradReadsKBlocks(s, sizeOf(p.graph().tensor(dy).dtype),
                                     static_cast<i64>(p.mapping(dx).size()), p.target()))
    return false;
  const cp::ChannelBlocks dyb =
      cp::dyKBlocks(s, cp::dataGradDyBlockSize(s, sizeOf(p.graph().tensor(dy).dtype), p.target()));
  const int dyBlocks = copyToChannelBlocks(p, op, cp::kDyKBlocksPhase, dy, dyb, "dy_k_blocks");
  const i64 iRowLen = s.w * s.c, wPerK = s.r * s.s * s.c;
  p.splitReduction(
      op, cp::kKBlockedDataPhase, dx, s.k, weightBytesPerOutputChannel(s),
      [s, dyb, dyBlocks, w, iRowLen, wPerK](Range r, Range ks) {
        const Range rows = outputRowsForInputRows(rowsOf(r, iRowLen), s.outH(), s.h, s.strideH,
                                                  s.padTop, s.dilH * (s.r - 1) + 1);
        Windows ws;
        for (i64 b = ks.begin / dyb.cb; b * dyb.cb < ks.end; ++b) {
          const Range d = dyb.rowsOfBlock(b, rows, s.outW());
          ws.push_back({dyBlocks, d.begin, d.end});
        }
        ws.push_back({w, ks.begin * wPerK, ks.end * wPerK});
        return ws;
      },
      false, 0, cp::dataGradKBlockSize(s, p.target()));
  return true;
}

void planBackwardData(PlanApi& p, const Op& op) {
  const auto s = convShapeOf(p.graph(), op);
  const int dy = op.inputs[0], w = op.inputs[1], out = op.outputs[0];
  const i64 oRowLen = s.outW() * s.k, iRowLen = s.w * s.c, wPerK = s.r * s.s * s.cPerGroup();
  if (s.groups > 1 && planGroupedBackwardData(p, op)) return;
  auto dyRows = [s, dy, oRowLen, iRowLen](Range r) {
    Range rows = outputRowsForInputRows(rowsOf(r, iRowLen), s.outH(), s.h, s.strideH, s.padTop,
                                        s.dilH * (s.r - 1) + 1);
    return NeedWindow{dy, rows.begin * oRowLen, rows.end * oRowLen};
  };
  if (weightBytesPerOutputChannel(s) * s.k <= p.windowBudgetBytes()) {
    const NeedWindow all = p.whole(w);
    p.perSlice(op, 0, {out}, [dyRows, all](Range r) { return Windows{dyRows(r), all}; });
    return;
  }
  // Large weights: a forward convolution of dy with transposed weights where that plan applies
  // and a tile holds less (compiler/conv_plan.h). Otherwise (grouped, or a tile holds less this
  // way) split the sum over output channels k, each part reading only its weight rows w[k0:k1]
  // (contiguous in the [K,R,S,C/G] layout) and, ungrouped with many dy rows per tile, only its
  // channels of dy (copied into k-blocks first). The transposed plan's tiles read every output
  // channel; where that is many bytes it is split over them as well (conv_plan.h, DataBlocks).
  if (p.convBackwardDataBlocked(op)) return;
  if (p.convBackwardDataTransposed(op)) return;
  if (planKBlockedBackwardData(p, op)) return;
  p.splitReduction(op, 0, out, s.k, weightBytesPerOutputChannel(s),
                   [dyRows, w, wPerK](Range r, Range ks) {
                     return Windows{dyRows(r), {w, ks.begin * wPerK, ks.end * wPerK}};
                   });
}

// Split over output rows (n * OH + oh): a part reads its dy rows and the x rows they cover,
// whatever the image size.
// Ungrouped convolutions whose tiles would hold less that way take the blocked plan over output
// channels, input channels and rows (compiler/conv_plan.h, FilterBlocks).
void planBackwardFilter(PlanApi& p, const Op& op) {
  if (p.convBackwardFilterBlocked(op)) return;
  const auto s = convShapeOf(p.graph(), op);
  if (s.groups > 1 && planGroupedBackwardFilter(p, op)) return;
  const int x = op.inputs[0], dy = op.inputs[1];
  const i64 oRowLen = s.outW() * s.k, iRowLen = s.w * s.c, oh = s.outH();
  const i64 bytesPerRow = (oRowLen + s.strideH * iRowLen) * 4;
  p.splitReduction(op, 0, op.outputs[0], s.n * oh, bytesPerRow,
                   [s, x, dy, oRowLen, iRowLen, oh](Range, Range red) {
                     Range xRows = inputRowsForOutputRows(red, oh, s.h, s.strideH, s.padTop,
                                                          s.dilH * (s.r - 1) + 1);
                     return Windows{{x, xRows.begin * iRowLen, xRows.end * iRowLen},
                                    {dy, red.begin * oRowLen, red.end * oRowLen}};
                   });
}

// ---- kernels -----------------------------------------------------------------------------------
// A copy into channel blocks (the grouped plans' first phases).
std::function<void()> channelBlocksVertex(const VertexArgs& a, const conv_plan::ChannelBlocks& cb) {
  return [cb, x = a.in[0], y = a.out[0], work = a.work] {
    ref::toChannelBlocks(cb.pixels, cb.c, cb.cb, x, y, work);
  };
}

// The blocked plan's geometry (defined with the weight gradient's, below).
conv_plan::ForwardBlocks forwardBlocksOf(const VertexArgs& a, const kernels::Conv2dShape& s);

std::function<void()> vertexForward(const VertexArgs& a) {
  if (a.phase == 1) return sumPartials(a);
  if (a.phase >= conv_plan::kForwardWeightBlocksPhase &&
      a.phase <= conv_plan::kForwardBlocksPhase) {  // the blocked plan (compiler/conv_plan.h)
    const auto s = convShapeOf(a.g, a.op);
    const conv_plan::ForwardBlocks fb = forwardBlocksOf(a, s);
    if (a.phase == conv_plan::kForwardWeightBlocksPhase)
      return [s, kb = fb.kb, cb = fb.cb, W = a.in, y = a.out[0], work = a.work] {
        ref::conv2dWeightsToFilterBlocks(s, kb, cb, W[0], y, work);
      };
    if (a.phase == conv_plan::kForwardXBlocksPhase)
      return [s, cb = fb.cb, sub = fb.subsampled, W = a.in, y = a.out[0], work = a.work] {
        ref::conv2dInputToChannelBlocks(s, cb, sub, W[0], y, work);
      };
    // kForwardBlocksPhase: windows xB, wB (the plan's order).
    return [s, fb, W = a.in, y = a.out[0], work = a.work] {
      ref::conv2dForwardBlock(s, fb.kb, fb.cb, fb.subsampled, W[0], W[1], y, work);
    };
  }
  if (a.phase != 0) {  // the grouped plan (compiler/conv_plan.h): x in blocks, then y
    const auto s = convShapeOf(a.g, a.op);
    const i64 gb =
        conv_plan::groupsPerForwardBlock(s, sizeOf(a.g.tensor(a.op.inputs[0]).dtype),
                                         sizeOf(a.g.tensor(a.op.inputs[1]).dtype), a.target);
    if (a.phase == conv_plan::kGroupedXBlocksPhase)
      return channelBlocksVertex(a, conv_plan::xBlocks(s, gb));
    return [s, gb, W = a.in, y = a.out[0], work = a.work] {
      ref::conv2dForwardGroupBlocks(s, gb, W[0], W[1], y, work);
    };
  }
  return [s = convShapeOf(a.g, a.op), W = a.in, y = a.out[0], work = a.work] {
    ref::conv2dForward(s, W[0], W[1], y, work);
  };
}

// The blocked data gradient's geometry (defined with the weight gradient's, below).
conv_plan::DataBlocks dataBlocksOf(const VertexArgs& a, const kernels::Conv2dShape& s);

std::function<void()> vertexBackwardData(const VertexArgs& a) {
  if (a.phase == 1 && a.in.empty())  // the blocked plan's pixels that no tap reaches
    return [y = a.out[0], n = a.work.size()] { std::fill(y, y + n, 0.0f); };
  if (a.phase == 1 || a.phase == conv_plan::kKBlockedDataPhase + 1) return sumPartials(a);
  const auto s = convShapeOf(a.g, a.op);
  // The blocked plan (compiler/conv_plan.h, DataBlocks): w and dy in blocks, then the k-blocks'
  // partials (windows dyB, wB). Its dy copy shares the k-blocked split's phase and kernel.
  if (s.groups == 1 &&
      (a.phase == conv_plan::kDataWeightBlocksPhase || a.phase == conv_plan::kDataBlocksPhase ||
       a.phase == conv_plan::kDyKBlocksPhase)) {
    if (const conv_plan::DataBlocks db = dataBlocksOf(a, s); db.use) {
      if (a.phase == conv_plan::kDataWeightBlocksPhase)
        return [s, kb = db.kb, cb = db.cb, W = a.in, y = a.out[0], work = a.work] {
          ref::conv2dWeightsToFilterBlocks(s, kb, cb, W[0], y, work);
        };
      if (a.phase == conv_plan::kDyKBlocksPhase)
        return channelBlocksVertex(a, conv_plan::dyKBlocks(s, db.kb));
      return [s, db, W = a.in, y = a.out[0], work = a.work] {
        ref::conv2dBackwardDataBlock(s, db.kb, db.cb, db.subsampled, W[0], W[1], y, work);
      };
    }
  }
  // The split over k with dy in k-blocks (compiler/conv_plan.h; ungrouped, so its copy shares
  // the grouped plan's phase): windows the blocks, then w.
  if (s.groups == 1 &&
      (a.phase == conv_plan::kDyKBlocksPhase || a.phase == conv_plan::kKBlockedDataPhase)) {
    const i64 kb =
        conv_plan::dataGradDyBlockSize(s, sizeOf(a.g.tensor(a.op.inputs[0]).dtype), a.target);
    if (a.phase == conv_plan::kDyKBlocksPhase)
      return channelBlocksVertex(a, conv_plan::dyKBlocks(s, kb));
    return [s, kb, blocks = std::vector<FW>(a.in.begin(), a.in.end() - 1), w = a.in.back(),
            y = a.out[0], work = a.work,
            red = a.red] { ref::conv2dBackwardDataKBlocks(s, kb, blocks, w, y, work, red); };
  }
  // The grouped plan (compiler/conv_plan.h): dy in blocks of groups, then dx.
  if (a.phase == conv_plan::kGroupedDyBlocksPhase || a.phase == conv_plan::kGroupedDataPhase) {
    const i64 gb = conv_plan::groupsPerBlock(s, sizeOf(a.g.tensor(a.op.inputs[0]).dtype),
                                             sizeOf(a.g.tensor(a.op.inputs[1]).dtype), a.target);
    if (a.phase == conv_plan::kGroupedDyBlocksPhase)
      return channelBlocksVertex(a, conv_plan::dyBlocks(s, gb));
    return [s, gb, W = a.in, y = a.out[0], work = a.work] {
      ref::conv2dBackwardDataGroupBlocks(s, gb, W[0], W[1], y, work);
    };
  }
  // The transposed-weights plan (compiler/conv_plan.h): k-blocks, wt, then dx.
  if (a.phase >= conv_plan::kWeightKBlocksPhase) {
    if (a.phase == conv_plan::kTransposedDataPhase)
      return [s, W = a.in, y = a.out[0], work = a.work] {
        ref::conv2dBackwardDataTransposed(s, W[0], W[1], y, work);
      };
    const i64 kb = conv_plan::kBlockSize(s, sizeOf(a.g.tensor(a.op.inputs[1]).dtype), a.target);
    if (a.phase == conv_plan::kWeightKBlocksPhase)
      return [s, kb, W = a.in, y = a.out[0], work = a.work] {
        ref::conv2dWeightsToKBlocks(s, kb, W[0], y, work);
      };
    return [s, kb, W = a.in, y = a.out[0], work = a.work] {
      ref::conv2dKBlocksToTransposed(s, kb, W, y, work);
    };
  }
  const Range ks = a.red.size() > 0 ? a.red : Range{0, s.k};  // split over k: partials
  return [s, W = a.in, y = a.out[0], work = a.work, ks] {
    ref::conv2dBackwardData(s, W[0], W[1], y, work, ks);
  };
}

// A blocked plan's geometry of the op a vertex belongs to (the planner chose it from the same
// arguments: `plan(s, bytes of input 0, of input 1, of the partials, target)`); the last one is
// kept, as consecutive vertices belong to one op.
template <class Plan, class Choose>
Plan blockedPlanOf(const VertexArgs& a, const kernels::Conv2dShape& s, Choose plan) {
  const Graph& g = a.g;
  const DType pt = partialsOf(a.op);
  const std::array<i64, 24> key{s.n,
                                s.h,
                                s.w,
                                s.c,
                                s.k,
                                s.r,
                                s.s,
                                s.strideH,
                                s.strideW,
                                s.padTop,
                                s.padLeft,
                                s.padBottom,
                                s.padRight,
                                s.dilH,
                                s.dilW,
                                s.groups,
                                sizeOf(g.tensor(a.op.inputs[0]).dtype),
                                sizeOf(g.tensor(a.op.inputs[1]).dtype),
                                sizeOf(pt),
                                a.target.numTiles,
                                a.target.bytesPerTile,
                                a.target.workListBytesPerOperand,
                                a.target.workersPerTile,
                                a.target.minBytesPerTile};
  thread_local std::array<i64, 24> lastKey{};
  thread_local Plan last;
  if (key != lastKey) {
    last = plan(s, key[16], key[17], key[18], a.target);
    lastKey = key;
  }
  return last;
}

conv_plan::FilterBlocks filterBlocksOf(const VertexArgs& a, const kernels::Conv2dShape& s) {
  return blockedPlanOf<conv_plan::FilterBlocks>(a, s, conv_plan::filterBlocks);
}

conv_plan::ForwardBlocks forwardBlocksOf(const VertexArgs& a, const kernels::Conv2dShape& s) {
  return blockedPlanOf<conv_plan::ForwardBlocks>(a, s, conv_plan::forwardBlocks);
}

conv_plan::DataBlocks dataBlocksOf(const VertexArgs& a, const kernels::Conv2dShape& s) {
  return blockedPlanOf<conv_plan::DataBlocks>(a, s, conv_plan::dataBlocks);
}

std::function<void()> vertexBackwardFilter(const VertexArgs& a) {
  if (a.phase == 1 || a.phase == conv_plan::kGroupedFilterPhase + 1) return sumPartials(a);
  if (a.phase >= conv_plan::kGroupedDyBlocksPhase) {  // the grouped plan (compiler/conv_plan.h)
    const auto s = convShapeOf(a.g, a.op);
    const i64 gb =
        conv_plan::groupsPerFilterBlock(s, sizeOf(a.g.tensor(a.op.inputs[0]).dtype),
                                        sizeOf(a.g.tensor(a.op.inputs[1]).dtype), a.target);
    if (a.phase == conv_plan::kGroupedDyBlocksPhase)
      return channelBlocksVertex(a, conv_plan::dyBlocks(s, gb));
    if (a.phase == conv_plan::kGroupedXBlocksPhase)
      return channelBlocksVertex(a, conv_plan::xBlocks(s, gb));
    return [s, gb, W = a.in, y = a.out[0], work = a.work, red = a.red] {
      ref::conv2dBackwardFilterGroupBlocks(s, gb, W[0], W[1], y, work, red);
    };
  }
  if (a.phase >= conv_plan::kFilterDyBlocksPhase) {  // the blocked plan (compiler/conv_plan.h)
    const auto s = convShapeOf(a.g, a.op);
    const conv_plan::FilterBlocks fb = filterBlocksOf(a, s);
    if (a.phase == conv_plan::kFilterDyBlocksPhase)
      return [s, kb = fb.kb, W = a.in, y = a.out[0], work = a.work] {
        ref::conv2dGradToChannelBlocks(s, kb, W[0], y, work);
      };
    if (a.phase == conv_plan::kFilterXBlocksPhase)
      return [s, cb = fb.cb, sub = fb.subsampled, W = a.in, y = a.out[0], work = a.work] {
        ref::conv2dInputToChannelBlocks(s, cb, sub, W[0], y, work);
      };
    // kFilterBlocksPhase: windows dyB, xB (the plan's order).
    return [s, fb, W = a.in, y = a.out[0], work = a.work, red = a.red] {
      ref::conv2dBackwardFilterBlock(s, fb.kb, fb.cb, fb.subsampled, W[1], W[0], y, work, red);
    };
  }
  return [s = convShapeOf(a.g, a.op), W = a.in, y = a.out[0], work = a.work, red = a.red] {
    ref::conv2dBackwardFilter(s, W[0], W[1], y, work, red);
  };
}

// f32 kernels (fused.h): one oneDNN primitive per op, built here, owned by the step.
template <class K>
FusedKernel fusedPass() {
  return [](const FusedArgs& a) -> std::function<void()> {
    auto k = std::make_shared<K>(convShapeOf(a.g, a.op));
    return [k, p = a.in[0], q = a.in[1], y = a.out[0]] { k->run(p, q, y); };
  };
}

// Every operand bf16 and oneDNN has bf16 primitives: the bf16 primitive on the stored data.
template <class K>
NativeFusedKernel nativeBf16Pass() {
  return [](const NativeFusedArgs& a) -> std::function<void()> {
    if (!a.bf16Primitives || !allOperandsAre(a.g, a.op, DType::BF16)) return {};
    auto k = std::make_shared<K>(convShapeOf(a.g, a.op), kernels::ElementType::BF16);
    return [k, p = a.in[0], q = a.in[1], y = a.out[0]] { k->run(p, q, y); };
  };
}

// ---- cost --------------------------------------------------------------------------------------
// Contraction length per output (the AMP's efficiency), the extent the compiler splits partial
// sums over (input channels for the forward's blocked plan, output channels for the data
// gradient, output rows n x OH for the filter gradient) and the planned activation / weight
// operands.
CostTraits::MacWork macWork(const Graph& g, const Op& op) {
  const auto s = convShapeOf(g, op);
  CostTraits::MacWork m;
  m.macs = static_cast<double>(s.macs());
  m.outElems = static_cast<double>(g.tensor(op.outputs[0]).elements());
  switch (op.kind) {
    case OpKind::Conv2d:
      m.contraction = static_cast<double>(s.cPerGroup());
      m.redExtent = static_cast<double>(s.c);  // the blocked plan's vertices sum a c-block
      break;
    case OpKind::Conv2dBackwardData:
      m.contraction = static_cast<double>(s.kPerGroup());
      m.redExtent = static_cast<double>(s.k);
      break;
    default:  // the filter gradient
      m.contraction = static_cast<double>(s.n * s.outH() * s.outW());
      m.redExtent = static_cast<double>(s.n * s.outH());
      m.planA = {op.inputs[0], op.inputs[1]};
      m.planW = {op.outputs[0]};
      return m;
  }
  m.planA = {op.inputs[0]};
  m.planW = {op.inputs[1]};
  return m;
}

// Phase 0 is priced as MACs (macWork); phase 1 sums partial rows, an add per vector.
double cost(const Op&, int) {
  return 1.0;
}

OpInfo convInfo(OpKind kind, std::string_view name, std::vector<AttrSpec> attrs) {
  OpInfo f;
  f.def = {kind, name, 2, 1, {}, std::move(attrs)};
  f.inputDTypes = {floatTypes(), floatTypes()};
  f.cost = cost;
  f.costTraits.macWork = macWork;
  return f;
}

}  // namespace

IPU_REGISTER_OPS(conv2d) {
  OpInfo f = convInfo(OpKind::Conv2d, "conv2d", convAttrs());
  f.def.precision = PrecisionRule::Compute;
  f.def.usesPartials = true;
  f.doc = "x [N,H,W,C], w [K,R,S,C/G] -> y [N,OH,OW,K] (stride, pad, dilation, groups)";
  f.infer = inferForward;
  f.grad = gradForward;
  f.plan = planForward;
  f.vertex = vertexForward;
  f.fused = fusedPass<fz::Conv2dForward>();
  f.nativeFused = nativeBf16Pass<fz::Conv2dForward>();
  // The grouped and the blocked plans' block phases multiply; their copies move operands and
  // the blocked plan's phase 1 sums the c-blocks' partials.
  f.costTraits.macPhases = {0, conv_plan::kGroupedForwardPhase, conv_plan::kForwardBlocksPhase};
  registerOp(std::move(f));

  OpInfo d = convInfo(OpKind::Conv2dBackwardData, "conv2d_backward_data",
                      convAttrs({{"input_shape", A::Ints, true}}));
  d.doc = "dy [N,OH,OW,K], w [K,R,S,C/G] -> dx [input_shape]";
  d.infer = inferBackwardData;
  d.grad = noGradient("it is a backward op");
  d.plan = planBackwardData;
  d.vertex = vertexBackwardData;
  d.fused = fusedPass<fz::Conv2dBackwardData>();
  d.nativeFused = nativeBf16Pass<fz::Conv2dBackwardData>();
  // The transposed plan's dx phase multiplies; its k-block and transpose phases move weights.
  // So do the blocked plan's block phase and the grouped and k-blocked plans' block phases.
  d.costTraits.macPhases = {0, conv_plan::kTransposedDataPhase, conv_plan::kGroupedDataPhase,
                            conv_plan::kKBlockedDataPhase, conv_plan::kDataBlocksPhase};
  registerOp(std::move(d));

  OpInfo w = convInfo(OpKind::Conv2dBackwardFilter, "conv2d_backward_filter",
                      convAttrs({{"kernel", A::Ints, true}}));
  w.doc = "x [N,H,W,C], dy [N,OH,OW,K] -> dw [K,kernel...,C/G]";
  w.infer = inferBackwardFilter;
  w.grad = noGradient("it is a backward op");
  w.plan = planBackwardFilter;
  w.vertex = vertexBackwardFilter;
  w.fused = fusedPass<fz::Conv2dBackwardFilter>();
  w.nativeFused = nativeBf16Pass<fz::Conv2dBackwardFilter>();
  // Its partial rows are combined reading outputs x parts elements (the other split kinds
  // price their combining as elementwise).
  w.costTraits.reduction = true;
  // The grouped and the blocked plans' block phases multiply; their channel-block copies move
  // operands.
  w.costTraits.macPhases = {0, conv_plan::kGroupedFilterPhase, conv_plan::kFilterBlocksPhase};
  registerOp(std::move(w));
}

}  // namespace ipu::ops
