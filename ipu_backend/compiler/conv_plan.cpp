#include "ipu_backend/compiler/conv_plan.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "ipu_backend/compiler/op_shapes.h"

namespace ipu::conv_plan {
namespace {

i64 ceilDiv(i64 a, i64 b) {
  return (a + b - 1) / b;
}

}  // namespace

i64 reductionParts(i64 outElems, i64 redExtent, i64 bytesPerRedUnit, i64 outSlices,
                   const Target& t) {
  const double windowsTotal = static_cast<double>(bytesPerRedUnit) * redExtent;
  const double budget = static_cast<double>(windowBudgetBytes(t));
  const double T = static_cast<double>(t.numTiles), e = static_cast<double>(outElems);
  const i64 unitsPerPart =
      std::max<i64>(1, windowBudgetBytes(t) / std::max<i64>(1, bytesPerRedUnit));
  const i64 fewest = ceilDiv(redExtent, unitsPerPart);
  const i64 most = static_cast<i64>(T * budget / (4.0 * e));
  const i64 memParts = fewest <= most
                           ? fewest
                           : static_cast<i64>(std::ceil(std::sqrt(windowsTotal * T / (4.0 * e))));
  const i64 parParts = std::max<i64>(1, std::min<i64>(8, t.numTiles / std::max<i64>(1, outSlices)));
  return std::clamp<i64>(std::max(memParts, parParts), 1, redExtent);
}

namespace {

// Per tile: the gathered dy rows and wt rows of `cg` input channels, and the work-list entries of
// its output regions (one per pixel: the channel block of a pixel is one region).
struct TransposedTile {
  i64 cg = 1;
  double bytes = 0;
};

TransposedTile bestTransposedTile(const Conv2dShape& s, i64 dyBytes, i64 weightBytes,
                                  const Target& t) {
  const i64 perC = s.r * s.s * s.k * weightBytes;
  const i64 pixels = s.n * s.h * s.w, oh = s.outH(), span = s.dilH * (s.r - 1) + 1;
  TransposedTile best{1, std::numeric_limits<double>::infinity()};
  for (i64 cg = 1; cg <= s.c; ++cg) {
    const i64 groups = ceilDiv(s.c, cg);
    if (cg > 1 && ceilDiv(s.c, cg - 1) == groups) continue;  // same groups, more weights
    const i64 blocks = std::clamp<i64>(t.numTiles / groups, 1, pixels);
    const i64 pixelsPerTile = ceilDiv(pixels, blocks);
    const i64 dxRows = std::min(s.n * s.h, ceilDiv(pixelsPerTile, s.w) + 1);
    const i64 dyRows =
        outputRowsForInputRows({0, dxRows}, oh, s.h, s.strideH, s.padTop, span).size();
    const i64 regions = cg < s.c ? pixelsPerTile : 1;
    const double bytes = static_cast<double>(dyRows * s.outW() * s.k * dyBytes) +
                         static_cast<double>(cg * perC) +
                         static_cast<double>((regions - 1) * t.workListBytesPerOperand);
    if (bytes < best.bytes) best = {cg, bytes};
  }
  return best;
}

}  // namespace

bool transposedPlanIsSmaller(const Conv2dShape& s, i64 dyBytes, i64 weightBytes, i64 partialBytes,
                             const Target& t) {
  if (s.groups != 1) return false;
  const double T = static_cast<double>(t.numTiles);
  const i64 dxElems = s.inputElems();
  // The split plan as the planner makes it (its budget counts weights as f32).
  const i64 parts = reductionParts(dxElems, s.k, s.r * s.s * s.c * 4,
                                   std::max<i64>(1, dxElems * partialBytes / t.minBytesPerTile), t);
  const double split = parts > 1 ? static_cast<double>(parts * dxElems * partialBytes) / T +
                                       static_cast<double>(s.weightElems() * weightBytes) /
                                           static_cast<double>(parts)
                                 : static_cast<double>(s.weightElems() * weightBytes);
  return bestTransposedTile(s, dyBytes, weightBytes, t).bytes < split;
}

i64 kBlockSize(const Conv2dShape& s, i64 weightBytes, const Target& t) {
  const i64 rowBytes = s.r * s.s * s.c * weightBytes;  // one output channel's weights
  return std::clamp<i64>(windowBudgetBytes(t) / std::max<i64>(1, rowBytes), 1, s.k);
}

Range weightRowsOfKBlockSlice(const Conv2dShape& s, i64 kb, Range out) {
  const i64 rs = s.r * s.s, blockElems = kBlockElems(s, kb);
  const i64 b = out.begin / blockElems, kbb = std::min(kb, s.k - b * kb);
  // Rows (c * R*S + rt) of the block that the slice covers, hence its input channels.
  const i64 row0 = (out.begin - b * blockElems) / kbb, row1 = (out.end - 1 - b * blockElems) / kbb;
  const i64 c0 = row0 / rs, c1 = row1 / rs;
  const i64 k0 = b * kb, k1 = k0 + kbb;
  return {k0 * rs * s.c + c0, (k1 - 1) * rs * s.c + (rs - 1) * s.c + c1 + 1};
}

std::vector<Range> kBlockWindowsOfTransposedSlice(const Conv2dShape& s, i64 kb, Range out) {
  const i64 row0 = out.begin / s.k, row1 = (out.end - 1) / s.k + 1, blockElems = kBlockElems(s, kb);
  std::vector<Range> w;
  for (i64 b = 0; b * kb < s.k; ++b) {
    const i64 kbb = std::min(kb, s.k - b * kb);
    w.push_back({b * blockElems + row0 * kbb, b * blockElems + row1 * kbb});
  }
  return w;
}

Range transposedWeightsOfChannels(const Conv2dShape& s, Range channels) {
  const i64 rowElems = s.r * s.s * s.k;
  return {channels.begin * rowElems, channels.end * rowElems};
}

i64 inputChannelsPerTile(const Conv2dShape& s, i64 dyBytes, i64 weightBytes, const Target& t) {
  if (s.r * s.s * s.k * weightBytes * s.c <= windowBudgetBytes(t)) return s.c;
  return bestTransposedTile(s, dyBytes, weightBytes, t).cg;
}

// The search both channel-blocked outputs (dx, y) share: gb from G down, the first whose tile
// gathers at most a quarter of a window budget (`gathered(gb, blocks, pixelsPerTile)`: its
// output's `pixels` over the tiles a block gets), else the gb with the fewest bytes counting the
// work lists blocking adds (one output region per pixel; the copies of `copiedPixels` operand
// pixels into blocks, about one per pixel and block).
template <class Gathered>
i64 fewestGroupBlocks(const Conv2dShape& s, i64 pixels, i64 copiedPixels, const Target& t,
                      Gathered gathered) {
  const i64 G = s.groups;
  const double target = static_cast<double>(windowBudgetBytes(t) / 4);
  i64 best = G;
  double bestBytes = std::numeric_limits<double>::infinity();
  for (i64 gb = G; gb >= 1; --gb) {
    const i64 blocks = ceilDiv(G, gb);
    if (gb < G && ceilDiv(G, gb + 1) == blocks) continue;  // same blocks, fewer channels each
    const i64 pixelBlocks = std::clamp<i64>(t.numTiles / blocks, 1, pixels);
    const i64 pixelsPerTile = ceilDiv(pixels, pixelBlocks);
    const double bytes = gathered(gb, blocks, pixelsPerTile);
    // Fewest blocks first: each block adds work-list entries that stay on the tile for the whole
    // program.
    if (bytes <= target) return gb;
    const double workLists = static_cast<double>(
        blocks > 1 ? (pixelsPerTile + 2 * ceilDiv(copiedPixels * blocks, t.numTiles)) *
                         t.workListBytesPerOperand
                   : 0);
    if (bytes + workLists < bestBytes) bestBytes = bytes + workLists, best = gb;
  }
  return best;
}

i64 groupsPerBlock(const Conv2dShape& s, i64 dyBytes, i64 weightBytes, const Target& t) {
  const i64 cpg = s.cPerGroup(), kpg = s.kPerGroup();
  const i64 pixels = s.n * s.h * s.w, oh = s.outH(), span = s.dilH * (s.r - 1) + 1;
  return fewestGroupBlocks(s, pixels, pixels, t, [&](i64 gb, i64 blocks, i64 pixelsPerTile) {
    // Unblocked, a slice of the linear mapping spans whole pixels' channels.
    const i64 dxPixels = blocks > 1
                             ? pixelsPerTile
                             : std::max<i64>(1, ceilDiv(std::max(t.minBytesPerTile / dyBytes,
                                                                 ceilDiv(pixels * s.c, t.numTiles)),
                                                        s.c));
    const i64 dxRows = std::min(s.n * s.h, ceilDiv(dxPixels, s.w) + 1);
    const i64 dyRows =
        outputRowsForInputRows({0, dxRows}, oh, s.h, s.strideH, s.padTop, span).size();
    return static_cast<double>(dyRows * s.outW() * gb * kpg * dyBytes) +
           static_cast<double>(gb * kpg * s.r * s.s * cpg * weightBytes);
  });
}

Range ChannelBlocks::sourceOfSlice(Range out) const {
  const i64 b = out.begin / blockElems();
  const Range ch = channels(b);
  const i64 p0 = (out.begin - b * blockElems()) / ch.size(),
            p1 = (out.end - 1 - b * blockElems()) / ch.size();
  return {p0 * c + ch.begin, p1 * c + ch.end};
}

Range ChannelBlocks::rowsOfBlock(i64 b, Range rows, i64 rowPixels) const {
  const i64 rowElems = rowPixels * channels(b).size(), base = b * blockElems();
  return {base + rows.begin * rowElems, base + rows.end * rowElems};
}

Range weightsOfGroupBlock(const Conv2dShape& s, i64 gb, i64 b) {
  const Range ks = dyBlocks(s, gb).channels(b);
  const i64 rowElems = s.r * s.s * s.cPerGroup();
  return {ks.begin * rowElems, ks.end * rowElems};
}

i64 groupsPerForwardBlock(const Conv2dShape& s, i64 xBytes, i64 weightBytes, const Target& t) {
  const i64 cpg = s.cPerGroup(), kpg = s.kPerGroup();
  const i64 pixels = s.n * s.outH() * s.outW(), span = s.dilH * (s.r - 1) + 1;
  return fewestGroupBlocks(
      s, pixels, s.n * s.h * s.w, t, [&](i64 gb, i64 blocks, i64 pixelsPerTile) {
        const i64 yPixels =
            blocks > 1 ? pixelsPerTile
                       : std::max<i64>(1, ceilDiv(std::max(t.minBytesPerTile / xBytes,
                                                           ceilDiv(pixels * s.k, t.numTiles)),
                                                  s.k));
        const i64 yRows = std::min(s.n * s.outH(), ceilDiv(yPixels, s.outW()) + 1);
        const i64 xRows = std::min(s.n * s.h, (yRows - 1) * s.strideH + span);
        return static_cast<double>(xRows * s.w * gb * cpg * xBytes) +
               static_cast<double>(gb * kpg * s.r * s.s * cpg * weightBytes);
      });
}

GroupedFilterBlocks groupedFilterPlan(const Conv2dShape& s, i64 xBytes, i64 dyBytes,
                                      const Target& t) {
  const i64 G = s.groups, cpg = s.cPerGroup(), kpg = s.kPerGroup();
  const i64 rows = s.n * s.outH(), span = s.dilH * (s.r - 1) + 1;
  const i64 dwElems = s.weightElems(), perK = s.r * s.s * cpg;
  const i64 dwSlices = std::clamp<i64>(dwElems * 4 / t.minBytesPerTile, 1, t.numTiles);
  const i64 budget = windowBudgetBytes(t);
  const double target = static_cast<double>(budget / 2);
  GroupedFilterBlocks best{G, budget};
  double bestBytes = std::numeric_limits<double>::infinity();
  for (i64 gb = G; gb >= 1; --gb) {
    const i64 blocks = ceilDiv(G, gb);
    if (gb < G && ceilDiv(G, gb + 1) == blocks) continue;  // same blocks, fewer channels each
    const double workLists = static_cast<double>(
        blocks > 1 ? 2 * ceilDiv((s.n * s.h * s.w + rows * s.outW()) * blocks, t.numTiles) *
                         t.workListBytesPerOperand
                   : 0);
    // Rows per part: a tile gathers its part's rows of x and dy of the blocks its slice of a
    // partial row spans, and holds its share of every part's partial row twice (the partials,
    // then their sum's gather). bytesPerRow sets the parts that splitReduction makes.
    double bestHere = std::numeric_limits<double>::infinity();
    i64 bytesHere = budget;
    for (i64 u = 1;; u = std::min(rows, 2 * u)) {
      const i64 bytesPerRow = std::max<i64>(1, budget / u);
      const i64 parts = reductionParts(dwElems, rows, bytesPerRow, dwSlices, t);
      const i64 sliceElems = ceilDiv(dwElems * parts, t.numTiles);
      const i64 spanned = std::min(blocks, ceilDiv(sliceElems, gb * kpg * perK) + 1);
      const i64 partRows = ceilDiv(rows, parts);
      const i64 xRows = std::min(s.n * s.h, (partRows - 1) * s.strideH + span);
      const double bytes = static_cast<double>(spanned) *
                               static_cast<double>(partRows * s.outW() * gb * kpg * dyBytes +
                                                   xRows * s.w * gb * cpg * xBytes) +
                           (parts > 1 ? 2.0 * static_cast<double>(parts * dwElems * 4) /
                                            static_cast<double>(t.numTiles)
                                      : 0.0);
      if (bytes < bestHere) bestHere = bytes, bytesHere = bytesPerRow;
      if (u >= rows) break;
    }
    if (bestHere <= target) return {gb, bytesHere};
    if (bestHere + workLists < bestBytes) bestBytes = bestHere + workLists, best = {gb, bytesHere};
  }
  return best;
}

i64 groupsPerFilterBlock(const Conv2dShape& s, i64 xBytes, i64 dyBytes, const Target& t) {
  return groupedFilterPlan(s, xBytes, dyBytes, t).gb;
}

// ---- conv2d_backward_data's split over k with dy in k-blocks ----------------------------------

i64 dataGradKBlockSize(const Conv2dShape& s, const Target& t) {
  return kBlockSize(s, 4, t);
}

namespace {

// The parts splitReduction makes of the k-blocks of the data gradient (each block's weight rows
// counted as f32) for dx in `dxSlices` tile slices.
i64 dataGradParts(const Conv2dShape& s, i64 dxSlices, const Target& t) {
  const i64 kb = dataGradKBlockSize(s, t);
  return reductionParts(s.inputElems(), ceilDiv(s.k, kb), kb * s.r * s.s * s.c * 4, dxSlices, t);
}

// Pixels of dy rows that a tile of one of `parts` parts reads: its slice of the part's partial
// row (spread over T / parts tiles), the dx rows it covers and the dy rows they read.
i64 dyPixelsPerPartTile(const Conv2dShape& s, i64 parts, const Target& t) {
  const i64 slice = std::max(t.minBytesPerTile / 4, ceilDiv(s.inputElems() * parts, t.numTiles));
  const i64 dxRows = std::min(s.n * s.h, ceilDiv(ceilDiv(slice, s.c), s.w) + 1);
  return outputRowsForInputRows({0, dxRows}, s.outH(), s.h, s.strideH, s.padTop,
                                s.dilH * (s.r - 1) + 1)
             .size() *
         s.outW();
}

}  // namespace

i64 dataGradDyBlockSize(const Conv2dShape& s, i64 dyBytes, const Target& t) {
  const i64 kb = dataGradKBlockSize(s, t);
  // The parts without their floor for small outputs (dxSlices = T), so that the tile engine finds
  // the same size from the shape alone.
  const i64 pixels = dyPixelsPerPartTile(s, dataGradParts(s, t.numTiles, t), t);
  const i64 most = windowBudgetBytes(t) / 4 / std::max<i64>(1, 2 * pixels * dyBytes);
  return std::clamp<i64>(most / kb * kb, kb, s.k);
}

bool splitDataGradReadsKBlocks(const Conv2dShape& s, i64 dyBytes, i64 dxSlices, const Target& t) {
  if (s.groups != 1) return false;
  const i64 kb = dataGradKBlockSize(s, t), blocks = ceilDiv(s.k, kb);
  if (blocks < 2) return false;
  const i64 parts = dataGradParts(s, dxSlices, t);
  if (parts < 2) return false;
  const i64 dyRowElems = dyPixelsPerPartTile(s, parts, t);
  const i64 unblocked = dyRowElems * s.k * dyBytes;
  // A part's k-range and one more dy block it may cross into.
  const i64 blocked =
      dyRowElems * std::min(s.k, ceilDiv(blocks, parts) * kb + dataGradDyBlockSize(s, dyBytes, t)) *
      dyBytes;
  const i64 copied = ceilDiv(s.outputElems(), t.numTiles) * dyBytes;  // the blocks, per tile
  return unblocked > windowBudgetBytes(t) / 4 && unblocked - blocked > copied;
}

// ---- conv2d_backward_filter's blocked plan ----------------------------------------------------

namespace {

// Block sizes tried for `extent` channels: extent, extent/2, extent/4, ... (rounded up), down to
// 8 channels (a copy's vertex reads every channel of the pixels its slice spans: smaller blocks
// span more pixels).
std::vector<i64> blockSizes(i64 extent) {
  std::vector<i64> sizes{extent};
  for (i64 d = 2; ceilDiv(extent, d) >= 8 && d <= extent; d *= 2)
    sizes.push_back(ceilDiv(extent, d));
  return sizes;
}

// Vertex state and work-list entries are always live, on every tile, for the whole program: a
// byte of them weighs as much as kStateWeight bytes of one op's peak.
constexpr double kStateWeight = 4;

}  // namespace

FilterBlocks filterBlocks(const Conv2dShape& s, i64 xBytes, i64 dyBytes, i64 partialBytes,
                          const Target& t) {
  FilterBlocks best;
  const i64 T = t.numTiles, rows = s.n * s.outH(), ow = s.outW(), rs = s.r * s.s;
  const i64 span = s.dilH * (s.r - 1) + 1, pixels = rows * ow;
  // dw keeps its linear mapping (few tiles when small): the combining vertices of a tile sum
  // every part's blocks of its slice.
  const i64 dwElems = s.weightElems();
  const i64 dwSlices = std::clamp<i64>(dwElems * xBytes / t.minBytesPerTile, 1, T);
  const i64 dwPerTile = ceilDiv(dwElems, dwSlices);
  // The split over output rows as the planner makes it (its row budget counts f32), per tile:
  // its part's share of the partials and the x and dy rows of the part.
  {
    const i64 parts =
        reductionParts(dwElems, rows, (ow * s.k + s.strideH * s.w * s.c) * 4, dwSlices, t);
    const i64 partRows = ceilDiv(rows, parts);
    const i64 inRows = std::min(s.n * s.h, (partRows - 1) * s.strideH + span + 1);
    best.splitBytes = static_cast<double>(parts * dwElems * partialBytes) / static_cast<double>(T) +
                      static_cast<double>(partRows * ow * s.k * dyBytes) +
                      static_cast<double>(inRows * s.w * s.c * xBytes);
  }
  best.tileBytes = best.splitBytes;
  // Where a tile of the split holds no more than one window budget, its extra compute sets and
  // copies are not worth their always-live state.
  if (s.groups != 1 || best.splitBytes <= static_cast<double>(windowBudgetBytes(t))) return best;
  const bool subsampled = s.r == 1 && s.s == 1 && s.padTop == 0 && s.padLeft == 0 &&
                          s.padBottom == 0 && s.padRight == 0;
  const i64 xPixels = filterInputPixels(s, subsampled);
  for (const i64 kb : blockSizes(s.k))
    for (const i64 cb : blockSizes(s.c)) {
      const i64 blocksPerPart = ceilDiv(s.k, kb) * ceilDiv(s.c, cb);
      if (blocksPerPart > T) continue;
      const double block = static_cast<double>(kb * rs * cb * partialBytes);
      // The channel-blocked copies (phases of their own): a tile's slice of the copy and the
      // src elements its pixels span (every channel of them).
      auto copyPhase = [&](i64 pix, i64 channels, i64 bb, i64 bytes, i64 stride) {
        const i64 slice = ceilDiv(pix * channels, T);
        return static_cast<double>(slice * bytes +
                                   ((ceilDiv(slice, bb) + 1) * stride) * channels * bytes);
      };
      const double copies =
          static_cast<double>((kb < s.k ? ceilDiv(pixels * s.k, T) * dyBytes : 0) +
                              (cb < s.c || subsampled ? ceilDiv(xPixels * s.c, T) * xBytes : 0));
      const double copyPeak = std::max(
          kb < s.k ? copyPhase(pixels, s.k, kb, dyBytes, 1) : 0.0,
          cb < s.c || subsampled ? copyPhase(xPixels, s.c, cb, xBytes, subsampled ? s.strideW : 1)
                                 : 0.0);
      // Each copy is a compute set: a vertex state on every tile.
      const double copyState =
          static_cast<double>(t.vertexStateBytes * ((kb < s.k) + (cb < s.c || subsampled)));
      const i64 combineRuns = ceilDiv(dwPerTile, std::min(cb, s.c)) + 1;
      for (i64 parts = 1; parts <= rows && parts * blocksPerPart <= T; ++parts) {
        const i64 partRows = ceilDiv(rows, parts);
        const i64 xPartPixels =
            subsampled ? partRows * ow
                       : std::min(s.n * s.h, (partRows - 1) * s.strideH + span + 1) * s.w;
        const double blockPhase = static_cast<double>(partRows * ow * kb * dyBytes) +
                                  static_cast<double>(xPartPixels * cb * xBytes) + block + copies;
        const double combine =
            block + static_cast<double>(dwPerTile * (parts * partialBytes + xBytes));
        const double state =
            copyState + static_cast<double>(std::max<i64>(0, combineRuns - t.workersPerTile) *
                                            (parts + 1) * t.workListBytesPerOperand);
        const double bytes = std::max({blockPhase, combine, copyPeak}) + kStateWeight * state;
        if (bytes < best.tileBytes) {
          best.use = true;
          best.kb = kb, best.cb = cb, best.parts = parts, best.subsampled = subsampled;
          best.tileBytes = bytes;
        }
      }
    }
  return best;
}

i64 filterBlockOffset(const Conv2dShape& s, i64 kb, i64 cb, i64 b, i64 g) {
  const i64 rs = s.r * s.s, kbb = std::min(kb, s.k - b * kb);
  return b * kb * rs * s.c + g * kbb * rs * cb;
}

i64 filterBlockedIndex(const Conv2dShape& s, i64 kb, i64 cb, i64 i) {
  const i64 rs = s.r * s.s, c = i % s.c, rsi = (i / s.c) % rs, k = i / (s.c * rs);
  const i64 b = k / kb, g = c / cb, cbb = std::min(cb, s.c - g * cb);
  return filterBlockOffset(s, kb, cb, b, g) + ((k - b * kb) * rs + rsi) * cbb + (c - g * cb);
}

// ---- conv2d's blocked plan --------------------------------------------------------------------

ForwardChannels forwardChannelsPerTile(const Conv2dShape& s, i64 xBytes, i64 weightBytes,
                                       const Target& t) {
  // The planner's budget test counts the weights as f32.
  const i64 perK = s.r * s.s * s.cPerGroup();
  if (perK * 4 * s.k <= windowBudgetBytes(t))
    return {s.k, static_cast<double>(perK * s.k * weightBytes)};
  const i64 pixels = s.n * s.outH() * s.outW(), span = s.dilH * (s.r - 1) + 1;
  ForwardChannels best{1, std::numeric_limits<double>::infinity()};
  for (i64 kg = 1; kg <= s.k; ++kg) {
    const i64 groups = ceilDiv(s.k, kg);
    if (kg > 1 && ceilDiv(s.k, kg - 1) == groups) continue;  // same groups, more weights
    const i64 blocks = std::clamp<i64>(t.numTiles / groups, 1, pixels);
    const i64 pixelsPerTile = ceilDiv(pixels, blocks);
    const i64 outRows = std::min(s.n * s.outH(), ceilDiv(pixelsPerTile, s.outW()) + 1);
    const i64 inRows = std::min(s.n * s.h, (outRows - 1) * s.strideH + span);
    const double bytes = static_cast<double>(inRows * s.w * s.c * xBytes) +
                         static_cast<double>(kg * perK * weightBytes);
    if (bytes < best.tileBytes) best = {kg, bytes};
  }
  return best;
}

ForwardBlocks forwardBlocks(const Conv2dShape& s, i64 xBytes, i64 weightBytes, i64 partialBytes,
                            const Target& t) {
  ForwardBlocks best;
  best.splitBytes = forwardChannelsPerTile(s, xBytes, weightBytes, t).tileBytes;
  best.tileBytes = best.splitBytes;
  // Where a tile of the split gathers no more than two window budgets (a quarter of the tile)
  // the split leaves room for the live activations, and the plan's four compute sets would add
  // always-live state (vertex state, work lists, codelets) on every tile for the whole program.
  if (s.groups != 1 || best.splitBytes <= static_cast<double>(2 * windowBudgetBytes(t)))
    return best;
  const i64 T = t.numTiles, ow = s.outW(), rs = s.r * s.s, pixels = s.n * s.outH() * ow;
  const i64 span = s.dilH * (s.r - 1) + 1;
  const bool subsampled = s.r == 1 && s.s == 1 && s.padTop == 0 && s.padLeft == 0 &&
                          s.padBottom == 0 && s.padRight == 0;
  const i64 xPixels = filterInputPixels(s, subsampled);
  // y keeps its linear mapping; its slices are summed from every c-block's partials.
  const i64 yElems = pixels * s.k;
  const i64 ySlices = std::clamp<i64>(yElems * xBytes / t.minBytesPerTile, 1, T);
  const i64 yPerTile = ceilDiv(yElems, ySlices);
  // A copy's tile: its slice and the src elements from its first to its last (`rowElems` of src
  // per `perRow` elements of the copy).
  auto copyPhase = [T](i64 elems, i64 perRow, i64 rowElems, i64 bytes) {
    const i64 slice = ceilDiv(elems, T);
    return static_cast<double>(slice * bytes + (ceilDiv(slice, perRow) + 1) * rowElems * bytes);
  };
  // Each of its four compute sets: a vertex state on every tile.
  const double setState = static_cast<double>(4 * t.vertexStateBytes);
  const double copies = static_cast<double>(ceilDiv(xPixels * s.c, T) * xBytes +
                                            ceilDiv(s.weightElems(), T) * weightBytes);
  for (const i64 kb : blockSizes(s.k))
    for (const i64 cb : blockSizes(s.c)) {
      const i64 kBlocks = ceilDiv(s.k, kb), cBlocks = ceilDiv(s.c, cb);
      if (cBlocks == 1 || kBlocks * cBlocks > T) continue;  // one c-block: the split
      const double copyPeak = std::max(copyPhase(xPixels * s.c, cb, s.c, xBytes),
                                       copyPhase(s.weightElems(), rs * cb, rs * s.c, weightBytes));
      const i64 combineRuns = ceilDiv(yPerTile, kb) + 1;
      const double state =
          setState + static_cast<double>(std::max<i64>(0, combineRuns - t.workersPerTile) *
                                         (cBlocks + 1) * t.workListBytesPerOperand);
      const double combine = static_cast<double>(yPerTile * (cBlocks * partialBytes + xBytes));
      for (i64 parts = 1; parts <= pixels && parts * kBlocks * cBlocks <= T; ++parts) {
        const i64 partPixels = ceilDiv(pixels, parts);
        const i64 xPartPixels =
            subsampled
                ? partPixels
                : std::min(s.n * s.h,
                           (std::min(s.n * s.outH(), ceilDiv(partPixels, ow) + 1) - 1) * s.strideH +
                               span) *
                      s.w;
        const double block = static_cast<double>(partPixels * kb * partialBytes);
        const double blockPhase = static_cast<double>(xPartPixels * cb * xBytes) +
                                  static_cast<double>(kb * rs * cb * weightBytes) + block + copies;
        const double bytes =
            std::max({blockPhase, combine + block, copyPeak}) + kStateWeight * state;
        if (bytes < best.tileBytes) {
          best.use = true;
          best.kb = kb, best.cb = cb, best.pixelParts = parts, best.subsampled = subsampled;
          best.tileBytes = bytes;
        }
      }
    }
  return best;
}

i64 forwardBlockedIndex(const Conv2dShape& s, i64 kb, i64 i) {
  const i64 pixels = s.n * s.outH() * s.outW(), k = i % s.k, p = i / s.k;
  const i64 b = k / kb, kbb = std::min(kb, s.k - b * kb);
  return b * kb * pixels + p * kbb + (k - b * kb);
}

Range filterBlockOf(const Conv2dShape& s, i64 kb, i64 cb, i64 i) {
  const i64 rs = s.r * s.s, b = i / (kb * rs * s.c), kbb = std::min(kb, s.k - b * kb);
  const i64 g = (i - b * kb * rs * s.c) / (kbb * rs * cb), cbb = std::min(cb, s.c - g * cb);
  const i64 at = filterBlockOffset(s, kb, cb, b, g);
  return {at, at + kbb * rs * cbb};
}

i64 filterBlockSource(const Conv2dShape& s, i64 kb, i64 cb, i64 i) {
  const i64 rs = s.r * s.s, b = i / (kb * rs * s.c), kbb = std::min(kb, s.k - b * kb);
  const i64 g = (i - b * kb * rs * s.c) / (kbb * rs * cb), cbb = std::min(cb, s.c - g * cb);
  const i64 e = i - filterBlockOffset(s, kb, cb, b, g);
  const i64 cc = e % cbb, rsi = (e / cbb) % rs, kk = e / (cbb * rs);
  return ((b * kb + kk) * rs + rsi) * s.c + g * cb + cc;
}

// ---- conv2d_backward_data's blocked plan ------------------------------------------------------

i64 dataPartialPixel(const Conv2dShape& s, bool subsampled, i64 pixel) {
  if (!subsampled) return pixel;
  const i64 iw = pixel % s.w, ih = (pixel / s.w) % s.h, n = pixel / (s.w * s.h);
  if (ih % s.strideH != 0 || iw % s.strideW != 0) return -1;
  const i64 p = ih / s.strideH, q = iw / s.strideW;
  if (p >= s.outH() || q >= s.outW()) return -1;
  return (n * s.outH() + p) * s.outW() + q;
}

i64 dataPixelOfPartial(const Conv2dShape& s, bool subsampled, i64 p) {
  if (!subsampled) return p;
  const i64 oh = s.outH(), ow = s.outW();
  return ((p / (oh * ow)) * s.h + (p / ow) % oh * s.strideH) * s.w + (p % ow) * s.strideW;
}

Range dataPixelsOfPart(const Conv2dShape& s, bool subsampled, i64 parts, i64 j) {
  const Range px = dataPartialPixelsOfPart(s, subsampled, parts, j);
  return {j == 0 ? 0 : dataPixelOfPartial(s, subsampled, px.begin),
          j + 1 == parts ? s.n * s.h * s.w : dataPixelOfPartial(s, subsampled, px.end)};
}

DataBlocks dataBlocks(const Conv2dShape& s, i64 dyBytes, i64 weightBytes, i64 partialBytes,
                      const Target& t) {
  DataBlocks best;
  // Only where the transposed plan would be taken (weights over the window budget, counted as
  // f32 as the planner counts them, and a tile holding less than under the split over k).
  if (s.groups != 1 || s.weightElems() * 4 <= windowBudgetBytes(t) ||
      !transposedPlanIsSmaller(s, dyBytes, weightBytes, partialBytes, t))
    return best;
  best.transposedBytes = bestTransposedTile(s, dyBytes, weightBytes, t).bytes;
  best.tileBytes = best.transposedBytes;
  // Where the transposed plan's tile gathers no more than kDataBlocksThreshold window budgets,
  // the four compute sets of this plan would add always-live state (vertex state, work lists,
  // codelets) on every tile for the whole program for little.
  if (best.transposedBytes <= kDataBlocksThreshold * static_cast<double>(windowBudgetBytes(t)))
    return best;
  const i64 T = t.numTiles, rs = s.r * s.s, oh = s.outH(), ow = s.outW();
  const i64 P = s.n * oh * ow, pixels = s.n * s.h * s.w, span = s.dilH * (s.r - 1) + 1;
  const bool subsampled = s.r == 1 && s.s == 1 && s.padTop == 0 && s.padLeft == 0 &&
                          s.padBottom == 0 && s.padRight == 0 && (s.strideH > 1 || s.strideW > 1);
  const i64 xp = dataPartialPixels(s, subsampled);
  // dx keeps its linear mapping; its slices sum every k-block's partials of the pixels a tap
  // reaches (xp of every N*H*W) and zero-fill the others.
  const i64 dxElems = s.inputElems();
  const i64 dxSlices = std::clamp<i64>(dxElems * dyBytes / t.minBytesPerTile, 1, T);
  const i64 dxPerTile = ceilDiv(dxElems, dxSlices);
  const i64 readPerTile = ceilDiv(dxPerTile * xp, pixels);
  // A copy's tile: its slice and the src elements from its first to its last (`rowElems` of src
  // per `perRow` elements of the copy).
  auto copyPhase = [T](i64 elems, i64 perRow, i64 rowElems, i64 bytes) {
    const i64 slice = ceilDiv(elems, T);
    return static_cast<double>(slice * bytes + (ceilDiv(slice, perRow) + 1) * rowElems * bytes);
  };
  // Each of its four compute sets: a vertex state on every tile.
  const double setState = static_cast<double>(4 * t.vertexStateBytes);
  const double copies = static_cast<double>(ceilDiv(P * s.k, T) * dyBytes +
                                            ceilDiv(s.weightElems(), T) * weightBytes);
  for (const i64 kb : blockSizes(s.k))
    for (const i64 cb : blockSizes(s.c)) {
      const i64 kBlocks = ceilDiv(s.k, kb), cBlocks = ceilDiv(s.c, cb);
      if (kBlocks == 1 || kBlocks * cBlocks > T) continue;  // one k-block: the transposed plan
      const double copyPeak = std::max(copyPhase(P * s.k, kb, s.k, dyBytes),
                                       copyPhase(s.weightElems(), rs * cb, rs * s.c, weightBytes));
      // Runs of a c-block of a pixel, and of pixels no tap reaches.
      const i64 combineRuns =
          ceilDiv(dxPerTile, cb) + 1 + (subsampled ? ceilDiv(dxPerTile, s.c) + 1 : 0);
      const double state =
          setState + static_cast<double>(std::max<i64>(0, combineRuns - t.workersPerTile) *
                                         (kBlocks + 1) * t.workListBytesPerOperand);
      const double combine =
          static_cast<double>(readPerTile * kBlocks * partialBytes + dxPerTile * dyBytes);
      for (i64 parts = 1; parts <= xp && parts * kBlocks * cBlocks <= T; ++parts) {
        const i64 partPixels = ceilDiv(xp, parts);
        const i64 dyPixels =
            subsampled
                ? partPixels
                : outputRowsForInputRows({0, std::min(s.n * s.h, ceilDiv(partPixels, s.w) + 1)}, oh,
                                         s.h, s.strideH, s.padTop, span)
                          .size() *
                      ow;
        const double block = static_cast<double>(partPixels * cb * partialBytes);
        const double blockPhase = static_cast<double>(dyPixels * kb * dyBytes) +
                                  static_cast<double>(kb * rs * cb * weightBytes) + block + copies;
        const double bytes =
            std::max({blockPhase, combine + block, copyPeak}) + kStateWeight * state;
        if (bytes < best.tileBytes) {
          best.use = true;
          best.kb = kb, best.cb = cb, best.parts = parts, best.subsampled = subsampled;
          best.tileBytes = bytes;
        }
      }
    }
  return best;
}

}  // namespace ipu::conv_plan
