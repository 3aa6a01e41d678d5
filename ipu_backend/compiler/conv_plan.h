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

// ---- the data gradient of a grouped (or depthwise) convolution, blocked by groups ------------
// dx's channels of group g sum dy over g's output channels only. Split over output channels (or
// not split at all), a vertex gathered the dy rows of EVERY channel of its pixels: windows are
// flat, and a block of channels of many NHWC pixels is not contiguous. This plan makes it so:
//   phase kGroupedDyBlocksPhase: dy -> dy blocks, block b = the output channels of groups
//     [b*gb, (b+1)*gb) as [N*OH*OW][kbb] (kbb = its gb*K/G channels, fewer in the last block) at
//     flat offset b * dyBlockElems(s, gb); a slice of block b copies pixels whose channels of b
//     one slice of dy holds, on that slice's tile (no exchange but for a pixel cut by a slice
//     boundary: its own slice, gathering kbb elements);
//   phase kGroupedDataPhase: dx channel-blocked (gb groups' C/G channels each), a vertex reads
//     its tile's rows of its block (one window per tile) and its groups' weight rows.
// Same sum, in the same order, as kernels::ref::conv2dBackwardData over every k.
constexpr int kGroupedDyBlocksPhase = 5;
constexpr int kGroupedDataPhase = 6;

// Groups per block: the largest gb (the fewest blocks: every block adds work-list entries that
// stay on a tile for the whole program) whose tile gathers at most a quarter of a window budget
// (its dy-block rows and its groups' weights, in the stored dtypes); else the gb that minimises
// those bytes plus the work lists. G (one block: the unblocked plan) when that is enough.
i64 groupsPerBlock(const Conv2dShape& s, i64 dyBytes, i64 weightBytes, const Target& t);
// Elements of a full dy block (the flat offset of block b is b times this).
inline i64 dyBlockElems(const Conv2dShape& s, i64 gb) {
  return s.n * s.outH() * s.outW() * gb * s.kPerGroup();
}
// The output channels of block b: [b*gb*K/G, min(K, (b+1)*gb*K/G)).
Range outputChannelsOfGroupBlock(const Conv2dShape& s, i64 gb, i64 b);
// The window of dy that slice [out) of the dy blocks reads (out lies inside one block).
Range dyOfBlockSlice(const Conv2dShape& s, i64 gb, Range out);
// The window of the dy blocks holding output rows [oRows) (n*OH + oh) of block b.
Range blockRowsOfOutputRows(const Conv2dShape& s, i64 gb, i64 b, Range oRows);
// The weight rows w[k0:k1] of block b's output channels.
Range weightsOfGroupBlock(const Conv2dShape& s, i64 gb, i64 b);

}  // namespace ipu::conv_plan
