// The tile plan of a convolution's data gradient from transposed weights: the geometry the
// planner (compiler.cpp) and the tile engine share.
//
// When a convolution's weights are larger than a vertex's window budget, the data gradient
// dx = conv_transpose(dy, w) cannot read all of w on one tile. Splitting the sum over output
// channels k (a k-range of w is contiguous in the [K,R,S,C] layout) makes every part write a
// partial row of the WHOLE input gradient: for ResNet-50's stage4_unit1_conv1sc at micro-batch 20
// that was the worst tile of the training program. Poplibs instead plans the data gradient as a
// forward convolution of dy with transposed weights (weightsTransposeChansFlipXY): each tile
// writes a block of input channels of a block of pixels and reads the dy rows of its pixels and
// the weights of its channels. Here the transposed weights wt[C,R,S,K] are a temporary of the op,
// built in two steps so that no vertex reads more than one window budget of w:
//   phase kWeightKBlocksPhase: w -> k-blocks, block b = output channels [b*kb, (b+1)*kb) as
//     [C][R][S][kbb]: a slice of block b reads w's rows of block b only (kb*R*S*C elements);
//   phase kWeightTransposePhase: k-blocks -> wt: a slice of rows of wt reads those rows of every
//     block (one window per block, together the size of the slice);
//   phase kTransposedDataPhase: dx channel-blocked (cg input channels per tile), a vertex reads
//     its tile's dy rows (one window per tile) and wt rows [c0, c1) (contiguous).
// Same sum in the same order as the unsplit kernel (kernels::ref::conv2dBackwardDataTransposed),
// so the tile-mode bits equal the single-vertex path's.
#pragma once

#include <algorithm>
#include <vector>

#include "ipu_backend/kernels/kernel_types.h"
#include "ipu_backend/target/target.h"

namespace ipu::conv_plan {

using kernels::Conv2dShape;
using kernels::i64;
using kernels::Range;

// Compute-set phases of conv2d_backward_data's transposed plan (0 and 1 are the split plan's
// partials and their sum).
constexpr int kWeightKBlocksPhase = 2;
constexpr int kWeightTransposePhase = 3;
constexpr int kTransposedDataPhase = 4;

// How many parts a reduction over `redExtent` units is split into (the planner's
// splitReduction), its output of `outElems` elements in `outSlices` tile slices and each unit
// adding `bytesPerRedUnit` to a vertex's windows. Per tile, P parts cost about
// P x |partials row| / T of partials and |windows| / P of gathered operands: the fewest parts
// that keep the windows within the budget if the partials then fit the budget too; otherwise
// P = sqrt(|windows| x T / |row|), which minimises the sum (windows may then exceed the
// budget). At least enough parts to occupy the tiles when the output is small.
i64 reductionParts(i64 outElems, i64 redExtent, i64 bytesPerRedUnit, i64 outSlices,
                   const Target& t);

// Whether conv2d_backward_data (weights over the window budget) takes the transposed plan: for
// ungrouped convolutions whose tile would hold fewer bytes than under the split over k (its
// partials and its part's weight rows, against the transposed plan's gathered dy rows and wt
// rows plus a work-list entry per output region beyond the first; every estimate per tile).
bool transposedPlanIsSmaller(const Conv2dShape& s, i64 dyBytes, i64 weightBytes, i64 partialBytes,
                             const Target& t);

// What one vertex may gather of one operand (weights, rows): an eighth of the tile, so that
// the gathered operands of a compute set, its partials and the live activations share a tile.
inline i64 windowBudgetBytes(const Target& t) {
  return t.bytesPerTile / 8;
}

// Output channels per k-block: as many as keep one block's rows of w (kb*R*S*C elements of
// `weightBytes` each) within the window budget, at least 1.
i64 kBlockSize(const Conv2dShape& s, i64 weightBytes, const Target& t);
// Elements of a full k-block (the flat offset of block b is b times this).
inline i64 kBlockElems(const Conv2dShape& s, i64 kb) {
  return kb * s.c * s.r * s.s;
}
// The window of w that a slice [out) of k-block b reads (out lies inside one block).
Range weightRowsOfKBlockSlice(const Conv2dShape& s, i64 kb, Range out);
// The window of each k-block that rows [out) of wt read: window b is block b's rows of out.
std::vector<Range> kBlockWindowsOfTransposedSlice(const Conv2dShape& s, i64 kb, Range out);
// wt rows of input channels [c0, c1): elements [c0*R*S*K, c1*R*S*K).
Range transposedWeightsOfChannels(const Conv2dShape& s, Range channels);

// Input channels per tile of dx: the cg that minimises what a tile gathers, its dy rows (all K
// channels of the output rows its pixels read) plus cg channels of wt, in the stored dtypes; C
// when one tile can hold every channel's weights within the window budget.
i64 inputChannelsPerTile(const Conv2dShape& s, i64 dyBytes, i64 weightBytes, const Target& t);

// ---- the gradients of a grouped (or depthwise) convolution, in blocks of groups ---------------
// dx's channels of group g sum dy over g's output channels only, and dw's rows of g read only g's
// channels of x and dy. Windows are flat, and a block of channels of many NHWC pixels is not
// contiguous: split over output channels (dx) or output rows (dw), every vertex gathered the
// rows of EVERY channel. These plans first copy the operands they read into channel blocks of
// gb groups each (ChannelBlocks), each tile copying what it holds (no exchange but for a pixel
// cut by a slice boundary: its own slice, gathering one block's channels), then read one
// block's rows:
//   conv2d_backward_data: kGroupedDyBlocksPhase (dy -> blocks of gb*K/G channels), then
//     kGroupedDataPhase: dx channel-blocked (gb*C/G channels per tile), a vertex reading its
//     tile's rows of its block of dy and its groups' weight rows;
//   conv2d_backward_filter: kGroupedDyBlocksPhase and kGroupedXBlocksPhase (x -> blocks of
//     gb*C/G channels), then the split over output rows from kGroupedFilterPhase (partials; +1
//     their sum), its vertices cut at block boundaries of dw, each reading its part's rows of
//     its block of x and dy.
// The same sums, in the same order, as the kernels::ref kernels over every k / row.
constexpr int kGroupedDyBlocksPhase = 5;
constexpr int kGroupedDataPhase = 6;
constexpr int kGroupedXBlocksPhase = 7;
constexpr int kGroupedFilterPhase = 8;
// conv2d's own phases: kGroupedXBlocksPhase, then kGroupedForwardPhase: y channel-blocked by
// groups (gb*K/G channels per tile), a vertex reading its tile's rows of its block of x and its
// channels' weight rows.
constexpr int kGroupedForwardPhase = 10;

// A [pixels, c] tensor (NHWC, channels innermost) in blocks of cb channels: block b holds
// channels [b*cb, min(c, (b+1)*cb)) as [pixels][cbb] (cbb its size) at flat offset b*pixels*cb.
struct ChannelBlocks {
  i64 pixels = 1, c = 1, cb = 1;
  i64 count() const { return (c + cb - 1) / cb; }
  i64 blockElems() const { return pixels * cb; }  // of a full block
  Range channels(i64 b) const { return {b * cb, std::min(c, (b + 1) * cb)}; }
  // The window of the [pixels, c] tensor that slice [out) of the blocks reads (inside a block).
  Range sourceOfSlice(Range out) const;
  // Block b's elements of rows [rows) of rowPixels pixels each.
  Range rowsOfBlock(i64 b, Range rows, i64 rowPixels) const;
};

// Groups per block of the data gradient: the largest gb (the fewest blocks: every block adds
// work-list entries that stay on a tile for the whole program) whose tile gathers at most a
// quarter of a window budget (its dy-block rows and its groups' weights, in the stored dtypes);
// else the gb that minimises those bytes plus the work lists. G (one block: the unblocked plan)
// when that is enough.
i64 groupsPerBlock(const Conv2dShape& s, i64 dyBytes, i64 weightBytes, const Target& t);
// Groups per block of the forward convolution: as groupsPerBlock, what a tile gathers being its
// x-block rows and its output channels' weights.
i64 groupsPerForwardBlock(const Conv2dShape& s, i64 xBytes, i64 weightBytes, const Target& t);
// The filter gradient's blocks and parts: gb groups per block and the bytes per output row that
// make splitReduction split the rows into the parts chosen with it. The fewest blocks for which
// some parts keep a tile's share (its part's rows of x and dy of the blocks its slice of dw
// spans, and its share of every part's partial row, held twice: the partials and their sum's
// gather) within half a window budget; else the blocks and parts that minimise it plus the
// blocks' work lists.
struct GroupedFilterBlocks {
  i64 gb = 1;
  i64 bytesPerRow = 1;
};
GroupedFilterBlocks groupedFilterPlan(const Conv2dShape& s, i64 xBytes, i64 dyBytes,
                                      const Target& t);
i64 groupsPerFilterBlock(const Conv2dShape& s, i64 xBytes, i64 dyBytes, const Target& t);
// The blocks of dy and x for gb groups per block.
inline ChannelBlocks dyBlocks(const Conv2dShape& s, i64 gb) {
  return {s.n * s.outH() * s.outW(), s.k, gb * s.kPerGroup()};
}
inline ChannelBlocks xBlocks(const Conv2dShape& s, i64 gb) {
  return {s.n * s.h * s.w, s.c, gb * s.cPerGroup()};
}
// The weight rows w[k0:k1] (equally dw's) of block b's output channels.
Range weightsOfGroupBlock(const Conv2dShape& s, i64 gb, i64 b);

// ---- conv2d_backward_data's split over k with dy in k-blocks (groups == 1) -------------------
// Split over output channels, part p's partial row of dx sums its k-range only, but a flat
// window of dy rows holds every channel: for EfficientNet-B4's 448 -> 2688 expand conv at
// micro-batch 3 each part's tile gathered 193 KB of dy rows for its 44 channels. Here dy is
// first copied into k-blocks (ChannelBlocks, each tile copying what it holds), then the split
// runs on whole blocks of weight rows (splitReduction's redBlock), a part reading only the rows
// of the dy blocks its k-range spans:
//   phase kDyKBlocksPhase: dy -> [K/kb][P][kbb] (P = N*OH*OW); the grouped plan's phase of
//     the same copy (one codelet on a tile running both);
//   phase kKBlockedDataPhase: the parts' partial rows (+1: their sum, or dx when one part).
// The same sums, in the same order, as the split over k reading dy (kernels::ref).
constexpr int kDyKBlocksPhase = kGroupedDyBlocksPhase;
constexpr int kKBlockedDataPhase = 12;

// Output channels per k-block: those whose weight rows, counted as f32 as the split counts
// them, fit one window budget (the split's fewest parts then read a block each).
i64 dataGradKBlockSize(const Conv2dShape& s, const Target& t);
// Output channels per block of dy: the most, in multiples of dataGradKBlockSize, for which a
// part's tile gathers at most a quarter of a window budget of dy rows (two blocks: a part's
// k-range may cross a block boundary). Fewer, larger blocks: every block adds a region of the
// copy (work-list entries, always live on every tile holding dy).
i64 dataGradDyBlockSize(const Conv2dShape& s, i64 dyBytes, const Target& t);
// The k-blocks of dy.
inline ChannelBlocks dyKBlocks(const Conv2dShape& s, i64 kb) {
  return {s.n * s.outH() * s.outW(), s.k, kb};
}
// Whether the split over k (weights over the window budget; dx in `dxSlices` tile slices) reads
// dy in k-blocks: groups == 1, more than one part, a part's tile would gather more than a
// quarter of a window budget of dy rows (every channel), and blocking saves more than the
// blocks' copy holds per tile.
bool splitDataGradReadsKBlocks(const Conv2dShape& s, i64 dyBytes, i64 dxSlices, const Target& t);

// ---- conv2d_backward_filter's blocked plan ----------------------------------------------------
// The weight gradient dw[K,R,S,C] = sum over output pixels of dy[.,k] x[.,c] split only over
// output rows makes every part write a partial of the WHOLE dw and read every channel of its
// rows: for ResNet-50's stage4_unit1_conv1sc at micro-batch 20 a tile held 190 KB of partials
// and 230 KB of x and dy rows. Poplibs plans the weight-update pass as a convolution with its
// own partition of K, C and the pixels; here likewise (groups == 1):
//   phase kFilterDyBlocksPhase: dy -> dyB [K/kb][P][kbb] (P = N*OH*OW output pixels; skipped
//     when kb == K, dy is then its own single block); one vertex per tile slice and block,
//     reading every channel of the pixels the slice spans (a flat window);
//   phase kFilterXBlocksPhase: x -> xB [C/cb][XP][cbb] likewise (XP = N*H*W, or for a 1x1
//     convolution without padding only the P pixels it reads: `subsampled`);
//   phase kFilterBlocksPhase: partials dwP [parts][K/kb][C/cb][kbb][R][S][cbb], one block per
//     tile: the vertex of (part, k-block, c-block) reads the part's dy pixels of its k-block
//     and the x pixels they cover of its c-block (two contiguous windows);
//   phase 1: dw (its own mapping) sums the parts' blocks, one vertex per run of a c-block.
constexpr int kFilterDyBlocksPhase = 2;
constexpr int kFilterXBlocksPhase = 3;
constexpr int kFilterBlocksPhase = 4;

struct FilterBlocks {
  bool use = false;  // false: the split over output rows (the planner's splitReduction)
  i64 kb = 1, cb = 1, parts = 1;
  bool subsampled = false;
  double tileBytes = 0;   // the estimate per tile of this plan
  double splitBytes = 0;  // the same of the split over output rows
};
// The blocked plan's geometry for operands of these stored sizes: the (kb, cb, parts) whose
// per-tile estimate is smallest (the larger of its block phase, its gathered dy and x windows
// and its partial block, and its combining phase, plus the work-list entries of its copies),
// used where that is smaller than the split over output rows, the split's exceeds a window
// budget and groups == 1. The tile engine calls it again with the same arguments to find the
// geometry of a vertex.
FilterBlocks filterBlocks(const Conv2dShape& s, i64 xBytes, i64 dyBytes, i64 partialBytes,
                          const Target& t);
// Pixels of xB per block: P when subsampled, else N*H*W.
inline i64 filterInputPixels(const Conv2dShape& s, bool subsampled) {
  return subsampled ? s.n * s.outH() * s.outW() : s.n * s.h * s.w;
}
// Offset, within one part of dwP, of block (k-block b, c-block g), and of dw's element
// ((k*R + r)*S + t)*C + c.
i64 filterBlockOffset(const Conv2dShape& s, i64 kb, i64 cb, i64 b, i64 g);
i64 filterBlockedIndex(const Conv2dShape& s, i64 kb, i64 cb, i64 dwIndex);

// ---- conv2d's blocked plan (the forward convolution split over input channels too) ----------
// Split over output channels and pixels only, a tile of the forward convolution gathers every
// input channel of its pixels: for ResNet-50's stage4_unit1_conv1sc at micro-batch 20 that was
// 200 KB of x rows plus 137 KB of weights, the worst tile of the training program. Poplibs
// partitions the forward convolution over the input channels as well, the partial sums of each
// input-channel block then summed; here likewise (groups == 1), in the layouts of the blocked
// weight gradient:
//   phase kForwardWeightBlocksPhase: w -> wB, dw's blocked layout [K/kb][C/cb][kbb][R][S][cbb]
//     (filterBlockOffset): a vertex per tile slice and block reads w's rows of its k's;
//   phase kForwardXBlocksPhase: x -> xB [C/cb][XP][cbb] as kFilterXBlocksPhase (XP = N*H*W, or
//     for a 1x1 convolution without padding only the P = N*OH*OW pixels it reads);
//   phase kForwardBlocksPhase: partials yP [C/cb][K/kb][P][kbb], one block of pixels of a
//     (k-block, c-block) per tile: the vertex reads the x pixels of its block's pixels in its
//     c-block and its (k-block, c-block) of wB (two contiguous windows);
//   phase 1: y (its own mapping) sums the c-blocks' partials, one vertex per run of a k-block.
constexpr int kForwardWeightBlocksPhase = 2;
constexpr int kForwardXBlocksPhase = 3;
constexpr int kForwardBlocksPhase = 4;

// The split over output channels and pixels: kg output channels per tile and what a tile gathers
// (its input rows, every channel, and its channels' weights in the stored dtypes).
struct ForwardChannels {
  i64 kg = 1;
  double tileBytes = 0;
};
ForwardChannels forwardChannelsPerTile(const Conv2dShape& s, i64 xBytes, i64 weightBytes,
                                       const Target& t);

struct ForwardBlocks {
  bool use = false;  // false: the split over output channels and pixels
  i64 kb = 1, cb = 1, pixelParts = 1;
  bool subsampled = false;
  double tileBytes = 0;   // the estimate per tile of this plan
  double splitBytes = 0;  // the same of the split
};
// The blocked plan's geometry: the (kb, cb, pixel parts) whose per-tile estimate is smallest
// (the largest of its block phase, its copies and its combining phase, plus the always-live
// state it adds), used where that is smaller than the split's, the split's tile exceeds two
// window budgets and groups == 1. The tile engine calls it again with the same arguments.
ForwardBlocks forwardBlocks(const Conv2dShape& s, i64 xBytes, i64 weightBytes, i64 partialBytes,
                            const Target& t);
// Pixels [begin, end) of part j of the P output pixels.
inline Range forwardPixelsOfPart(const Conv2dShape& s, i64 parts, i64 j) {
  const i64 pixels = s.n * s.outH() * s.outW();
  return {pixels * j / parts, pixels * (j + 1) / parts};
}
// Offset in yP of y's element p*K + k (the part of c-block 0; c-block g adds g*P*K).
i64 forwardBlockedIndex(const Conv2dShape& s, i64 kb, i64 yIndex);
// The w element that wB's element i copies (the inverse of filterBlockedIndex).
i64 filterBlockSource(const Conv2dShape& s, i64 kb, i64 cb, i64 i);
// The range of wB's block that holds its element i.
Range filterBlockOf(const Conv2dShape& s, i64 kb, i64 cb, i64 i);

// ---- conv2d_backward_data's blocked plan (the transposed plan split over its contraction K) --
// The transposed-weights plan gives a tile a block of input channels of a block of pixels, but
// its contraction runs over every output channel: its tiles gather the dy rows of all K channels
// and K weights per input channel. For ResNet-50's stage4_unit1_conv1sc at micro-batch 20 that
// was 114,688 B of dy rows and 118,784 B of wt rows on one tile, the worst tile of the training
// program. Here, as the forward convolution's blocked plan (ForwardBlocks) with the roles of
// the channels swapped (groups == 1):
//   phase kDataWeightBlocksPhase: w -> wB, the blocked weight gradient's layout
//     [K/kb][C/cb][kbb][R][S][cbb] (filterBlockOffset);
//   phase kDyKBlocksPhase: dy -> dyB [K/kb][P][kbb] (P = N*OH*OW; the k-blocked split's copy,
//     the same kernel);
//   phase kDataBlocksPhase: partials dxP [K/kb][C/cb][XP][cbb], one (k-block, c-block, part of
//     the pixels) block per tile, reading its k-block of its pixels' dy rows and its block of wB
//     (two contiguous windows). XP = N*H*W, or for a strided 1x1 convolution without padding
//     only the P pixels a tap reaches (`subsampled`). A vertex's work range is in dx's pixels,
//     [K/kb][C/cb][N*H*W][cbb], every pixel of its part (so the cost model prices its share of
//     the op's multiply-accumulates), its output the partials of those a tap reaches;
//   phase 1: dx (its own mapping) sums the k-blocks' partials, one vertex per run of a c-block
//     of a pixel; the pixels no tap reaches are zero-filled (vertices with no inputs).
// Each k-block's partial is the sum, in conv2dBackwardData's order, over its channels.
constexpr int kDataWeightBlocksPhase = 14;
constexpr int kDataBlocksPhase = 15;
// The transposed plan's tile (its gathered dy and wt rows) must exceed this many window budgets
// for the blocked plan to be considered. Measured on ResNet-50 at micro-batch 20 (Mk2): at 1.6
// the three stride-2 1x1 shortcuts of stages 2-4 take it (1.65-2.9 budgets) and the largest
// not-always-live peak falls from 418,968 to 384,688 B; at 1.5 and below the stride-2 3x3s and
// stage 3's first 1x1 reduction take it too, and their partials raise it again (391,152 B at
// 1.5), while their always-live state grows.
constexpr double kDataBlocksThreshold = 1.6;

struct DataBlocks {
  bool use = false;  // false: the transposed plan (or the split over k)
  i64 kb = 1, cb = 1, parts = 1;
  bool subsampled = false;
  double tileBytes = 0;        // the estimate per tile of this plan
  double transposedBytes = 0;  // the same of the transposed plan
};
// The blocked plan's geometry for operands of these stored sizes: the (kb, cb, parts) whose
// per-tile estimate is smallest (the largest of its block phase, its copies and its combining
// phase, plus the always-live state it adds), used where the transposed plan applies
// (transposedPlanIsSmaller), its tile gathers more than kDataBlocksThreshold window budgets and
// this estimate is smaller. The tile engine calls it again with the same arguments.
DataBlocks dataBlocks(const Conv2dShape& s, i64 dyBytes, i64 weightBytes, i64 partialBytes,
                      const Target& t);
// Pixels of dx that the partials hold: P when subsampled, else N*H*W.
inline i64 dataPartialPixels(const Conv2dShape& s, bool subsampled) {
  return subsampled ? s.n * s.outH() * s.outW() : s.n * s.h * s.w;
}
// The partials' pixel of dx's pixel (n*H + h)*W + w: itself, or when subsampled its index among
// the pixels a tap reaches, -1 when none does.
i64 dataPartialPixel(const Conv2dShape& s, bool subsampled, i64 pixel);
// dx's pixel of the partials' pixel p (the inverse of dataPartialPixel).
i64 dataPixelOfPartial(const Conv2dShape& s, bool subsampled, i64 p);
// Part j of the partials' pixels, and the dx pixels [begin, end) its vertices' work ranges span
// (the parts tile dx's pixels: the first begins at 0, the last ends at N*H*W).
inline Range dataPartialPixelsOfPart(const Conv2dShape& s, bool subsampled, i64 parts, i64 j) {
  const i64 xp = dataPartialPixels(s, subsampled);
  return {xp * j / parts, xp * (j + 1) / parts};
}
Range dataPixelsOfPart(const Conv2dShape& s, bool subsampled, i64 parts, i64 j);

}  // namespace ipu::conv_plan
