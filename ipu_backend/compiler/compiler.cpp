#include "ipu_backend/compiler/compiler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <limits>
#include <map>
#include <numeric>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>

#include "ipu_backend/compiler/conv_plan.h"
#include "ipu_backend/compiler/first_fit.h"
#include "ipu_backend/compiler/op_shapes.h"
#include "ipu_backend/ir/op_defs.h"
#include "ipu_backend/kernels/fused.h"
#include "ipu_backend/ops/op_info.h"
#include "ipu_backend/optimizers/optimizer.h"

namespace ipu {
namespace {

// The compiler's phases on stderr when IPU_COMPILE_TIMES is set: wall seconds and the process's
// CPU seconds (all its threads: one compile at a time, OMP_NUM_THREADS=1, gives each phase's own).
class PhaseTimer {
 public:
  explicit PhaseTimer(std::string program)
      : program_(std::move(program)), on_(std::getenv("IPU_COMPILE_TIMES") != nullptr) {}
  bool on() const { return on_; }
  void lap(std::string_view phase) {
    if (!on_) return;
    const auto now = std::chrono::steady_clock::now();
    const double cpu = processCpuSeconds();
    std::fprintf(stderr, "compile %s: %.*s %.3f s wall, %.3f s CPU\n", program_.c_str(),
                 static_cast<int>(phase.size()), phase.data(),
                 std::chrono::duration<double>(now - last_).count(), cpu - lastCpu_);
    last_ = now;
    lastCpu_ = cpu;
  }

 private:
  static double processCpuSeconds() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
  std::string program_;
  bool on_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
  double lastCpu_ = processCpuSeconds();
};

i64 ceilDiv(i64 a, i64 b) {
  return (a + b - 1) / b;
}

// ---- tile mapping ---------------------------------------------------------------------------

// Linear mapping: contiguous grain-aligned runs spread over as many tiles of [firstTile,
// firstTile + tiles) as the size warrants.
std::vector<TileSlice> rangeMapping(i64 elements, DType dtype, const Target& t, i64 firstTile,
                                    i64 tiles) {
  i64 es = sizeOf(dtype);
  i64 grain = std::max<i64>(1, t.grainBytes / es);
  i64 maxTiles = std::max<i64>(1, elements * es / t.minBytesPerTile);
  i64 used = std::min<i64>(tiles, std::max<i64>(1, std::min(maxTiles, ceilDiv(elements, grain))));
  i64 per = ceilDiv(ceilDiv(elements, used), grain) * grain;
  std::vector<TileSlice> m;
  for (i64 i = 0, e = 0; e < elements; ++i, e += per)
    m.push_back(
        {static_cast<int>((firstTile + i) % t.numTiles), e, std::min(elements, e + per), 0});
  return m;
}

// Buffers of equal size get equal mappings, so elementwise ops between them stay tile-local; the
// start tile is derived from the size so that many small tensors do not all land on tile 0.
// `spread` (a variable's family, see variableFamilies) moves the start further: the biases,
// norm parameters and their optimizer state of every layer have equal sizes, and one start
// tile for all of them piled hundreds of always-live slices onto the same few tiles.
std::vector<TileSlice> linearMapping(const Buffer& b, const Target& t, std::uint64_t spread = 0) {
  i64 start = static_cast<i64>(
      (static_cast<std::uint64_t>(b.elements) * 2654435761ULL + spread * 40503ULL) %
      static_cast<std::uint64_t>(t.numTiles));
  return rangeMapping(b.elements, b.dtype, t, start, t.numTiles);
}

// Per tensor: 0 for activations; for a variable, a hash of its family's root name, the family
// being a weight and the same-sized variables named after it ("w/grad_accum", "w/momentum",
// "w/ema", ...), so that a weight and its state keep one mapping (their update stays
// tile-local) while different weights of one size start on different tiles. Deterministic.
std::vector<std::uint64_t> variableFamilies(const Graph& g) {
  std::unordered_map<std::string_view, const Tensor*> variables;
  for (const Tensor& t : g.tensors())
    if (t.kind == TensorKind::Variable) variables.emplace(t.name, &t);
  std::vector<std::uint64_t> family(g.tensors().size(), 0);
  for (const Tensor& t : g.tensors()) {
    if (t.kind != TensorKind::Variable) continue;
    std::string_view root = t.name;
    for (size_t cut = root.rfind('/'); cut != std::string_view::npos && cut > 0;
         cut = root.rfind('/')) {
      auto it = variables.find(root.substr(0, cut));
      if (it == variables.end() || it->second->elements() != t.elements()) break;
      root = root.substr(0, cut);
    }
    std::uint64_t h = 14695981039346656037ULL;  // FNV-1a: the same on every platform
    for (char ch : root) h = (h ^ static_cast<unsigned char>(ch)) * 1099511628211ULL;
    family[static_cast<size_t>(t.id)] = h | 1;
  }
  return family;
}

// Channel-blocked mapping of an [P, K] tensor (P pixels, K innermost channels): tile (g, q) holds
// channels [g*kg, (g+1)*kg) of the pixels of block q. A convolution whose weights are too large
// for one tile writes its output like this, so that each tile needs only the weights of its kg
// output channels (Poplar's planner partitions output channels the same way).
std::vector<TileSlice> channelBlockedMapping(i64 pixels, i64 k, i64 kg, const Target& t) {
  const i64 groups = ceilDiv(k, kg);
  const i64 pixelBlocks = std::clamp<i64>(t.numTiles / groups, 1, pixels);
  std::vector<TileSlice> m;
  m.reserve(static_cast<size_t>(pixels * groups));
  for (i64 p = 0; p < pixels; ++p) {
    const i64 q = p * pixelBlocks / pixels;
    for (i64 g = 0; g < groups; ++g)
      m.push_back({static_cast<int>((g * pixelBlocks + q) % t.numTiles), p * k + g * kg,
                   p * k + std::min(k, (g + 1) * kg), 0});
  }
  return m;
}

// Where the run of element i ends in a row of `extent` channels cut into blocks of `block`
// channels: at its block's end (the last block may be short), never past the row.
i64 channelBlockRunEnd(i64 i, i64 extent, i64 block) {
  const i64 c = i % extent;
  return std::min(i - c + extent, i + (std::min(block, extent - c / block * block) - c % block));
}

// A buffer of `elements` in blocks of blockElems: block b linearly over the tiles [start + b T /
// blocks, start + (b + 1) T / blocks) (one tile, shared, where there are more blocks than tiles).
std::vector<TileSlice> blockMapping(i64 elements, i64 blockElems, DType dtype, const Target& t,
                                    i64 start) {
  const i64 blocks = ceilDiv(elements, blockElems), T = t.numTiles;
  std::vector<TileSlice> m;
  for (i64 b = 0; b < blocks; ++b) {
    const i64 first = b * blockElems, size = std::min(blockElems, elements - first);
    const i64 tile0 = b * T / blocks;
    for (TileSlice sl : rangeMapping(size, dtype, t, start + tile0,
                                     std::max<i64>(1, (b + 1) * T / blocks - tile0))) {
      sl.begin += first, sl.end += first;
      m.push_back(sl);
    }
  }
  return m;
}

// ---- input windows --------------------------------------------------------------------------

using ops::NeedWindow;

// ---- the planner ----------------------------------------------------------------------------

// Implements PlanApi: what registered op kinds' plan rules may ask of it (ops/op_info.h).
class Planner : public ops::PlanApi {
 public:
  Planner(Executable& exe) : exe_(exe), g_(exe.graph), t_(exe.target) {}

  const Graph& graph() const override { return g_; }
  void perSlice(const Op& op, int phase, const std::vector<int>& outs,
                const std::function<ops::Windows(Range)>& windows, i64 cutAt, std::string_view what,
                const std::function<Range(Range)>& red = {}) override {
    for (int o : outs)
      if (exe_.buffers[o].elements != exe_.buffers[outs[0]].elements ||
          exe_.mapping[o].size() != exe_.mapping[outs[0]].size())
        throw CompileError(
            fmt::format("internal: {} writes '{}' and '{}' per slice, but they are "
                        "mapped differently",
                        opName(op.kind), exe_.buffers[outs[0]].name, exe_.buffers[o].name),
            -1, 0, 0);
    ComputeSet& cs = newComputeSet(op, phase, std::string(what));
    cs.vertices.reserve(exe_.mapping[outs[0]].size());
    for (const TileSlice& s : exe_.mapping[outs[0]])
      for (i64 b = s.begin; b < s.end;) {
        const i64 e = cutAt > 0 ? std::min(s.end, (b / cutAt + 1) * cutAt) : s.end;
        std::vector<OutRegion> regions;
        for (int o : outs) regions.push_back({o, b, e});
        cs.vertices.push_back(vertexOn(s.tile, windows({b, e}), std::move(regions), {b, e},
                                       red ? red({b, e}) : Range{}));
        b = e;
      }
  }
  void splitReduction(const Op& op, int firstPhase, int out, i64 redExtent, i64 bytesPerRedUnit,
                      const std::function<ops::Windows(Range, Range)>& windows, bool combineMax,
                      i64 cutAt, i64 redBlock) override {
    phaseBase_ = firstPhase;
    splitReduction(op, out, redExtent, bytesPerRedUnit, windows, combineMax, cutAt, redBlock);
    phaseBase_ = 0;
  }
  NeedWindow whole(int buf) const override { return {buf, 0, exe_.buffers[buf].elements}; }
  const std::vector<TileSlice>& mapping(int buffer) const override { return exe_.mapping[buffer]; }
  int tileOf(int buffer, i64 element) const override { return exe_.sliceOf(buffer, element).tile; }
  i64 numTiles() const override { return t_.numTiles; }
  i64 windowBudgetBytes() const override { return conv_plan::windowBudgetBytes(t_); }
  void mapChannelBlocked(int buffer, i64 pixels, i64 k, i64 kg) override {
    exe_.mapping[buffer] = channelBlockedMapping(pixels, k, kg, t_);
  }
  void mapInBlocks(int buffer, i64 blockElems) override {
    const Buffer& b = exe_.buffers[buffer];
    exe_.mapping[buffer] =
        blockMapping(b.elements, blockElems, b.dtype, t_, exe_.mapping[buffer].front().tile);
  }
  void operandTiles(const Op& op) override {
    ComputeSet& cs = newComputeSet(op, 0, "");
    for (int t : op.inputs)
      for (const TileSlice& s : exe_.mapping[t])
        cs.vertices.push_back(vertexOn(s.tile, {{t, s.begin, s.end}}, {}, {s.begin, s.end}));
    for (int t : op.outputs)
      for (const TileSlice& s : exe_.mapping[t])
        cs.vertices.push_back(vertexOn(s.tile, {}, {{t, s.begin, s.end}}, {s.begin, s.end}));
  }
  int scratch(const Op& op, const std::string& what, i64 elements) override {
    const int out = op.outputs.empty() ? op.inputs[0] : op.outputs[0];
    return addTemporary(fmt::format("{}/{}", exe_.buffers[out].name, what), elements, DType::F32);
  }
  bool convBackwardDataTransposed(const Op& op) override {
    namespace cp = conv_plan;
    const auto s = convShapeOf(g_, op);
    const int dy = op.inputs[0], w = op.inputs[1], dx = op.outputs[0];
    const DType wType = g_.tensor(w).dtype;
    const i64 wBytes = sizeOf(wType), dyBytes = sizeOf(g_.tensor(dy).dtype);
    const DType partials = ops::partialsOf(op);
    if (!cp::transposedPlanIsSmaller(s, dyBytes, wBytes, sizeOf(partials), t_)) return false;
    const i64 kb = cp::kBlockSize(s, wBytes, t_);
    const std::string name = exe_.buffers[dx].name;  // a copy: buffers grow below
    // The k-blocks: a slice of block b reads w's rows of that block (one flat window of about a
    // window budget, however few elements the slice has). Each block is mapped over tiles of
    // its own, so that no tile's slice spans two blocks and gathers two windows (EfficientNet
    // G16's squeeze-excitation fc2: 148 KB on one tile).
    const i64 blockElems = cp::kBlockElems(s, kb), nBlocks = ceilDiv(s.k, kb);
    std::vector<TileSlice> blockMap;
    const i64 start = linearMapping({name, s.weightElems(), wType, -1, false}, t_)[0].tile;
    for (i64 b = 0; b < nBlocks; ++b) {
      const i64 first = b * blockElems, size = std::min(blockElems, s.weightElems() - first);
      const i64 tile0 = b * t_.numTiles / nBlocks;
      for (TileSlice sl : rangeMapping(size, wType, t_, start + tile0,
                                       std::max<i64>(1, (b + 1) * t_.numTiles / nBlocks - tile0))) {
        sl.begin += first, sl.end += first;
        blockMap.push_back(sl);
      }
    }
    const int blocks =
        temporary(op, "weight_k_blocks", s.weightElems(), wType, std::move(blockMap));
    perSlice(
        op, cp::kWeightKBlocksPhase, {blocks},
        [&, s, kb](Range r) {
          const Range rows = cp::weightRowsOfKBlockSlice(s, kb, r);
          return ops::Windows{{w, rows.begin, rows.end}};
        },
        cp::kBlockElems(s, kb), "weight_k_blocks");
    // The transposed weights wt[C,R,S,K]: a slice reads its rows of every block.
    const int wt = addTemporary(name + "/weights_transposed", s.weightElems(), wType);
    perSlice(
        op, cp::kWeightTransposePhase, {wt},
        [&, s, kb](Range r) {
          ops::Windows ws;
          for (const Range& b : cp::kBlockWindowsOfTransposedSlice(s, kb, r))
            ws.push_back({blocks, b.begin, b.end});
          return ws;
        },
        0, "weights_transposed");
    // dx as a forward convolution's output: channel-blocked, each tile reading one window of dy
    // rows (those of all its pixels) and the wt rows of its channels.
    const i64 cg = cp::inputChannelsPerTile(s, dyBytes, wBytes, t_);
    if (cg < s.c) mapChannelBlocked(dx, s.n * s.h * s.w, s.c, cg);
    const i64 iRowLen = s.w * s.c, oRowLen = s.outW() * s.k;
    std::vector<Range> tileRows(static_cast<size_t>(t_.numTiles), Range{0, 0});
    for (const TileSlice& sl : exe_.mapping[dx]) {
      const Range rows = rowsOf({sl.begin, sl.end}, iRowLen);
      Range& u = tileRows[static_cast<size_t>(sl.tile)];
      u = u.size() == 0 ? rows : Range{std::min(u.begin, rows.begin), std::max(u.end, rows.end)};
    }
    perSlice(op, cp::kTransposedDataPhase, {dx},
             [&, s, iRowLen, oRowLen](Range r) {
               const Range& dxRows = tileRows[static_cast<size_t>(exe_.sliceOf(dx, r.begin).tile)];
               const Range rows = outputRowsForInputRows(dxRows, s.outH(), s.h, s.strideH, s.padTop,
                                                         s.dilH * (s.r - 1) + 1);
               const Range wRows = cp::transposedWeightsOfChannels(s, channelsOf(r, s.c));
               return ops::Windows{{dy, rows.begin * oRowLen, rows.end * oRowLen},
                                   {wt, wRows.begin, wRows.end}};
             },
             0, {});
    return true;
  }

  const Target& target() const override { return t_; }
  int temporary(const Op& op, const std::string& what, i64 elements, DType dtype,
                std::vector<TileSlice> mapping) override {
    i64 covered = 0;
    for (const TileSlice& sl : mapping) {
      if (sl.begin != covered || sl.end <= sl.begin || sl.tile < 0 || sl.tile >= t_.numTiles)
        throw CompileError(fmt::format("internal: {} maps its temporary '{}' with a slice [{}, {}) "
                                       "on tile {} where element {} comes next",
                                       opName(op.kind), what, sl.begin, sl.end, sl.tile, covered),
                           -1, 0, 0);
      covered = sl.end;
    }
    if (covered != elements)
      throw CompileError(
          fmt::format("internal: {} maps {} of the {} elements of its temporary '{}'",
                      opName(op.kind), covered, elements, what),
          -1, 0, 0);
    const int out = op.outputs.empty() ? op.inputs[0] : op.outputs[0];
    exe_.buffers.push_back(
        {fmt::format("{}/{}", exe_.buffers[out].name, what), elements, dtype, -1, false});
    exe_.mapping.push_back(std::move(mapping));
    return static_cast<int>(exe_.buffers.size() - 1);
  }

  bool convBackwardFilterBlocked(const Op& op) override {
    namespace cp = conv_plan;
    const auto s = convShapeOf(g_, op);
    const int x = op.inputs[0], dy = op.inputs[1], dw = op.outputs[0];
    const DType xType = g_.tensor(x).dtype, dyType = g_.tensor(dy).dtype;
    const DType partials = ops::partialsOf(op);
    const cp::FilterBlocks fb =
        cp::filterBlocks(s, sizeOf(xType), sizeOf(dyType), sizeOf(partials), t_);
    if (!fb.use) return false;
    const std::string name = exe_.buffers[dw].name;  // a copy: buffers grow below
    const i64 kb = fb.kb, cb = fb.cb, parts = fb.parts, rs = s.r * s.s;
    const i64 ow = s.outW(), rows = s.n * s.outH(), pixels = rows * ow;
    const i64 xPixels = cp::filterInputPixels(s, fb.subsampled);
    auto blocked = [&](int phase, int src, i64 pix, i64 channels, i64 block, DType dtype,
                       const std::string& what, const std::function<i64(i64)>& srcPixel) {
      return copyInChannelBlocks(op, phase, src, name + "/" + what, pix, channels, block, dtype,
                                 what, srcPixel);
    };
    int dyB = dy, xB = x;
    if (kb < s.k)
      dyB = blocked(cp::kFilterDyBlocksPhase, dy, pixels, s.k, kb, dyType, "dy_blocks",
                    [](i64 p) { return p; });
    const i64 oh = s.outH();
    if (cb < s.c || fb.subsampled)
      xB = blocked(cp::kFilterXBlocksPhase, x, xPixels, s.c, cb, xType, "x_blocks",
                   [&s, oh, ow, sub = fb.subsampled](i64 p) {
                     return sub ? ((p / (oh * ow)) * s.h + (p / ow) % oh * s.strideH) * s.w +
                                      (p % ow) * s.strideW
                                : p;
                   });
    // The partial blocks: one slice per (part, k-block, c-block), spread over the tiles.
    const i64 dwElems = s.weightElems(), kBlocks = ceilDiv(s.k, kb), cBlocks = ceilDiv(s.c, cb);
    const i64 nBlocks = parts * kBlocks * cBlocks;
    const int dwP = [&] {
      Buffer b{name + "/partial_blocks", parts * dwElems, partials, -1, false};
      exe_.buffers.push_back(b);
      std::vector<TileSlice> m;
      m.reserve(static_cast<size_t>(nBlocks));
      for (i64 q = 0; q < nBlocks; ++q) {
        const i64 p = q / (kBlocks * cBlocks), b = (q / cBlocks) % kBlocks, g = q % cBlocks;
        const i64 begin = p * dwElems + cp::filterBlockOffset(s, kb, cb, b, g);
        const i64 size = std::min(kb, s.k - b * kb) * rs * std::min(cb, s.c - g * cb);
        m.push_back({static_cast<int>(q * t_.numTiles / nBlocks), begin, begin + size, 0});
      }
      exe_.mapping.push_back(std::move(m));
      return static_cast<int>(exe_.buffers.size() - 1);
    }();
    {
      ComputeSet& cs = newComputeSet(op, cp::kFilterBlocksPhase, "partial_blocks");
      const i64 span = s.dilH * (s.r - 1) + 1;
      for (const TileSlice& sl : exe_.mapping[dwP]) {
        const i64 p = sl.begin / dwElems, off = sl.begin - p * dwElems;
        const i64 b = off / (kb * rs * s.c);
        const i64 g = (off - b * kb * rs * s.c) / (std::min(kb, s.k - b * kb) * rs * cb);
        const Range red{rows * p / parts, rows * (p + 1) / parts};
        const i64 kbb = std::min(kb, s.k - b * kb), cbb = std::min(cb, s.c - g * cb);
        const Range xPix = fb.subsampled ? Range{red.begin * ow, red.end * ow} : [&] {
          const Range in = inputRowsForOutputRows(red, oh, s.h, s.strideH, s.padTop, span);
          return Range{in.begin * s.w, in.end * s.w};
        }();
        const i64 dyAt = b * kb * pixels, xAt = g * cb * xPixels;
        cs.vertices.push_back(vertexOn(
            sl.tile,
            {{dyB, dyAt + red.begin * ow * kbb, dyAt + red.end * ow * kbb},
             {xB, xAt + xPix.begin * cbb, xAt + xPix.end * cbb}},
            {{dwP, sl.begin, sl.end}}, {off, off + (sl.end - sl.begin)}, red, static_cast<int>(p)));
      }
    }
    // dw: each run of one c-block (contiguous in dw and in every part's block) sums the parts.
    sumBlockedPartials(
        op, dw, dwP, parts, dwElems, [&s, cb](i64 i) { return channelBlockRunEnd(i, s.c, cb); },
        [&s, kb, cb](i64 i) { return cp::filterBlockedIndex(s, kb, cb, i); });
    return true;
  }

  bool convForwardBlocked(const Op& op) override {
    namespace cp = conv_plan;
    const auto s = convShapeOf(g_, op);
    const int x = op.inputs[0], w = op.inputs[1], y = op.outputs[0];
    const DType xType = g_.tensor(x).dtype, wType = g_.tensor(w).dtype;
    const DType partials = ops::partialsOf(op);
    const cp::ForwardBlocks fb =
        cp::forwardBlocks(s, sizeOf(xType), sizeOf(wType), sizeOf(partials), t_);
    if (!fb.use) return false;
    const std::string name = exe_.buffers[y].name;  // a copy: buffers grow below
    const i64 kb = fb.kb, cb = fb.cb, rs = s.r * s.s, oh = s.outH(), ow = s.outW();
    const i64 pixels = s.n * oh * ow, xPixels = cp::filterInputPixels(s, fb.subsampled);
    // wB in the blocked weight gradient's layout; xB as its x blocks (subsampled: the pixels a 1x1
    // strided convolution reads).
    const int wB = copyInBlocks(
        op, cp::kForwardWeightBlocksPhase, w, name + "/weight_blocks", s.weightElems(), wType,
        "weight_blocks", [&s, kb, cb](i64 i) { return cp::filterBlockOf(s, kb, cb, i); },
        [&s, kb, cb](i64 i) { return cp::filterBlockSource(s, kb, cb, i); });
    const int xB = copyInChannelBlocks(
        op, cp::kForwardXBlocksPhase, x, name + "/x_blocks", xPixels, s.c, cb, xType, "x_blocks",
        [&s, oh, ow, sub = fb.subsampled](i64 p) {
          return sub ? ((p / (oh * ow)) * s.h + (p / ow) % oh * s.strideH) * s.w +
                           (p % ow) * s.strideW
                     : p;
        });
    // The partial blocks: one slice per (c-block, k-block, part of the pixels), spread over the
    // tiles.
    const i64 yElems = pixels * s.k, kBlocks = ceilDiv(s.k, kb), cBlocks = ceilDiv(s.c, cb);
    const i64 parts = fb.pixelParts, nBlocks = cBlocks * kBlocks * parts;
    const int yP = [&] {
      Buffer b{name + "/partial_blocks", cBlocks * yElems, partials, -1, false};
      exe_.buffers.push_back(b);
      std::vector<TileSlice> m;
      m.reserve(static_cast<size_t>(nBlocks));
      for (i64 q = 0; q < nBlocks; ++q) {
        const i64 g = q / (kBlocks * parts), bk = (q / parts) % kBlocks, j = q % parts;
        const i64 kbb = std::min(kb, s.k - bk * kb), at = g * yElems + bk * kb * pixels;
        const Range px = cp::forwardPixelsOfPart(s, parts, j);
        if (px.size() == 0) continue;
        m.push_back({static_cast<int>(q * t_.numTiles / nBlocks), at + px.begin * kbb,
                     at + px.end * kbb, 0});
      }
      exe_.mapping.push_back(std::move(m));
      return static_cast<int>(exe_.buffers.size() - 1);
    }();
    {
      ComputeSet& cs = newComputeSet(op, cp::kForwardBlocksPhase, "partial_blocks");
      const i64 span = s.dilH * (s.r - 1) + 1;
      for (const TileSlice& sl : exe_.mapping[yP]) {
        const i64 g = sl.begin / yElems, bk = (sl.begin - g * yElems) / (kb * pixels);
        const i64 kbb = std::min(kb, s.k - bk * kb), cbb = std::min(cb, s.c - g * cb);
        const i64 at = g * yElems + bk * kb * pixels;
        const Range px{(sl.begin - at) / kbb, (sl.end - at) / kbb};
        const Range xPix = fb.subsampled ? px : [&] {
          const Range in = inputRowsForOutputRows({px.begin / ow, (px.end - 1) / ow + 1}, oh, s.h,
                                                  s.strideH, s.padTop, span);
          return Range{in.begin * s.w, in.end * s.w};
        }();
        const i64 xAt = g * cb * xPixels, wAt = cp::filterBlockOffset(s, kb, cb, bk, g);
        cs.vertices.push_back(vertexOn(
            sl.tile,
            {{xB, xAt + xPix.begin * cbb, xAt + xPix.end * cbb}, {wB, wAt, wAt + kbb * rs * cbb}},
            {{yP, sl.begin, sl.end}}, {sl.begin, sl.end}, {g * cb, g * cb + cbb}));
      }
    }
    // y: each run of one k-block (contiguous in y and in every c-block's partials) sums the
    // c-blocks.
    sumBlockedPartials(
        op, y, yP, cBlocks, yElems, [&s, kb](i64 i) { return channelBlockRunEnd(i, s.k, kb); },
        [&s, kb](i64 i) { return cp::forwardBlockedIndex(s, kb, i); });
    return true;
  }

  bool convBackwardDataBlocked(const Op& op) override {
    namespace cp = conv_plan;
    const auto s = convShapeOf(g_, op);
    const int dy = op.inputs[0], w = op.inputs[1], dx = op.outputs[0];
    const DType dyType = g_.tensor(dy).dtype, wType = g_.tensor(w).dtype;
    const DType partials = ops::partialsOf(op);
    const cp::DataBlocks db =
        cp::dataBlocks(s, sizeOf(dyType), sizeOf(wType), sizeOf(partials), t_);
    if (!db.use) return false;
    const std::string name = exe_.buffers[dx].name;  // a copy: buffers grow below
    const i64 kb = db.kb, cb = db.cb, rs = s.r * s.s, oh = s.outH(), ow = s.outW();
    const i64 P = s.n * oh * ow, pixels = s.n * s.h * s.w;
    const i64 xp = cp::dataPartialPixels(s, db.subsampled);
    // wB in the blocked weight gradient's layout; dy in k-blocks.
    const int wB = copyInBlocks(
        op, cp::kDataWeightBlocksPhase, w, name + "/weight_blocks", s.weightElems(), wType,
        "weight_blocks", [&s, kb, cb](i64 i) { return cp::filterBlockOf(s, kb, cb, i); },
        [&s, kb, cb](i64 i) { return cp::filterBlockSource(s, kb, cb, i); });
    const int dyB = copyInChannelBlocks(op, cp::kDyKBlocksPhase, dy, name + "/dy_k_blocks", P, s.k,
                                        kb, dyType, "dy_k_blocks", [](i64 p) { return p; });
    // The partial blocks: one slice per (k-block, c-block, part of the pixels), spread over the
    // tiles; each vertex reads its part's dy rows of its k-block and its (k-block, c-block) of
    // wB.
    const i64 kBlocks = ceilDiv(s.k, kb), cBlocks = ceilDiv(s.c, cb), parts = db.parts;
    const i64 nBlocks = kBlocks * cBlocks * parts, partStride = xp * s.c;
    const int dxP = static_cast<int>(exe_.buffers.size());
    exe_.buffers.push_back({name + "/partial_blocks", kBlocks * partStride, partials, -1, false});
    exe_.mapping.emplace_back();  // its slices, below, in (k-block, c-block, part) order
    ComputeSet& cs = newComputeSet(op, cp::kDataBlocksPhase, "partial_blocks");
    const i64 span = s.dilH * (s.r - 1) + 1;
    for (i64 q = 0; q < nBlocks; ++q) {
      const i64 b = q / (cBlocks * parts), g = (q / parts) % cBlocks, j = q % parts;
      const i64 kbb = std::min(kb, s.k - b * kb), cbb = std::min(cb, s.c - g * cb);
      const Range px = cp::dataPartialPixelsOfPart(s, db.subsampled, parts, j);
      if (px.size() == 0) continue;
      const Range full = cp::dataPixelsOfPart(s, db.subsampled, parts, j);
      // The dy pixels its dx pixels read: the same pixels when subsampled (1x1), else the
      // output rows of its input rows.
      const Range dyPix = db.subsampled ? px : [&] {
        const Range rows = outputRowsForInputRows({full.begin / s.w, (full.end - 1) / s.w + 1}, oh,
                                                  s.h, s.strideH, s.padTop, span);
        return Range{rows.begin * ow, rows.end * ow};
      }();
      const int tile = static_cast<int>(q * t_.numTiles / nBlocks);
      const i64 at = b * partStride + g * cb * xp, dyAt = b * kb * P;
      const i64 wAt = cp::filterBlockOffset(s, kb, cb, b, g);
      const i64 workAt = b * pixels * s.c + g * cb * pixels;
      exe_.mapping[dxP].push_back({tile, at + px.begin * cbb, at + px.end * cbb, 0});
      cs.vertices.push_back(vertexOn(tile,
                                     {{dyB, dyAt + dyPix.begin * kbb, dyAt + dyPix.end * kbb},
                                      {wB, wAt, wAt + kbb * rs * cbb}},
                                     {{dxP, at + px.begin * cbb, at + px.end * cbb}},
                                     {workAt + full.begin * cbb, workAt + full.end * cbb},
                                     {b * kb, b * kb + kbb}));
    }
    // dx: each run of one c-block of a pixel a tap reaches sums the k-blocks; the others are
    // zero.
    sumBlockedPartials(
        op, dx, dxP, kBlocks, partStride,
        [&s, cb, sub = db.subsampled, pixels](i64 i) {
          const i64 pixel = i / s.c;
          if (cp::dataPartialPixel(s, sub, pixel) < 0) {  // up to the next pixel a tap reaches
            i64 next = pixel + 1;
            while (next < pixels && cp::dataPartialPixel(s, sub, next) < 0) ++next;
            return next * s.c;
          }
          return channelBlockRunEnd(i, s.c, cb);
        },
        [&s, cb, xp, sub = db.subsampled](i64 i) -> i64 {
          const i64 c = i % s.c, p = cp::dataPartialPixel(s, sub, i / s.c);
          if (p < 0) return -1;
          const i64 g = c / cb, cbb = std::min(cb, s.c - g * cb);
          return g * cb * xp + p * cbb + (c - g * cb);
        });
    return true;
  }

  void run() {
    PhaseTimer timer(g_.name());
    createTensorBuffers();
    for (const Op& op : g_.ops()) {
      exe_.opFirstComputeSet.push_back(static_cast<int>(exe_.computeSets.size()));
      planOp(op);
    }
    if (timer.on()) {
      size_t vertices = 0, windows = 0, slices = 0;
      for (const ComputeSet& cs : exe_.computeSets)
        for (const Vertex& v : cs.vertices) ++vertices, windows += v.inputs.size();
      for (const auto& m : exe_.mapping) slices += m.size();
      timer.lap(fmt::format("plan ops ({} compute sets, {} vertices, {} windows, {} slices)",
                            exe_.computeSets.size(), vertices, windows, slices));
    }
    buildProgram();
    allocateArenas(timer);
    if (exe_.options.planExchanges) planExchanges();
    timer.lap("exchanges");
  }

 private:
  // -- buffers --
  void createTensorBuffers() {
    const std::vector<std::uint64_t> family = variableFamilies(g_);
    for (const Tensor& t : g_.tensors()) {
      Buffer b{t.name, t.elements(), t.dtype, t.id, t.kind == TensorKind::Variable};
      exe_.buffers.push_back(b);
      exe_.mapping.push_back(linearMapping(b, t_, family[static_cast<size_t>(t.id)]));
    }
  }
  // A [parts, elems] partials buffer: row p is spread over its own group of tiles, so that the
  // vertices of one part (which share that part's slice of the reduced operand, e.g. a block of
  // weight rows) sit together and each tile gathers the operand slice of one part only.
  int addPartials(const std::string& name, i64 parts, i64 rowElems, DType dtype = DType::F32) {
    Buffer b{name, parts * rowElems, dtype, -1, false};
    exe_.buffers.push_back(b);
    std::vector<TileSlice> m;
    const i64 T = t_.numTiles;
    for (i64 p = 0; p < parts; ++p) {
      const i64 first = p * T / parts, tiles = std::max<i64>(1, (p + 1) * T / parts - first);
      for (TileSlice s : rangeMapping(rowElems, DType::F32, t_, first, tiles)) {
        s.begin += p * rowElems, s.end += p * rowElems;
        m.push_back(s);
      }
    }
    exe_.mapping.push_back(std::move(m));
    return static_cast<int>(exe_.buffers.size() - 1);
  }
  // A temporary of an op's plan (not a graph tensor), mapped linearly; live from its first
  // write to its last read.
  int addTemporary(const std::string& name, i64 elements, DType dtype) {
    Buffer b{name, elements, dtype, -1, false};
    exe_.buffers.push_back(b);
    exe_.mapping.push_back(linearMapping(b, t_));
    return static_cast<int>(exe_.buffers.size() - 1);
  }
  // Two partial rows per part ([parts][2][c]: sums and sums of squares); part p's pair of rows
  // is one tile's, the parts spread over the tiles, so that one vertex per part computes every
  // channel of its rows and no row block is gathered once per channel slice.
  int addPairPartials(const std::string& name, i64 parts, i64 c) {
    Buffer b{name, parts * 2 * c, DType::F32, -1, false};
    exe_.buffers.push_back(b);
    std::vector<TileSlice> m;
    const i64 T = t_.numTiles;
    const i64 start = static_cast<i64>((static_cast<std::uint64_t>(c) * 2654435761ULL) %
                                       static_cast<std::uint64_t>(T));
    for (i64 p = 0; p < parts; ++p) {
      const int tile = static_cast<int>((start + (parts <= T ? p * T / parts : p)) % T);
      m.push_back({tile, p * 2 * c, p * 2 * c + c, 0});
      m.push_back({tile, p * 2 * c + c, (p + 1) * 2 * c, 0});
    }
    exe_.mapping.push_back(std::move(m));
    return static_cast<int>(exe_.buffers.size() - 1);
  }
  // Maps the [c] statistics `outA` and `outB` in runs of `perTile` channels over consecutive
  // tiles (at least their linear mapping's runs are split), so that the combining vertex of each
  // run gathers only its channels of every part.
  void mapStatisticsInRuns(int outA, int outB, i64 c, i64 perTile) {
    const i64 grain = std::max<i64>(1, t_.grainBytes / sizeOf(exe_.buffers[outA].dtype));
    perTile = std::max(grain, perTile / grain * grain);
    std::vector<TileSlice> m;
    const i64 start = exe_.mapping[outA].front().tile;
    for (i64 b = 0, i = 0; b < c; b += perTile, ++i)
      m.push_back({static_cast<int>((start + i) % t_.numTiles), b, std::min(c, b + perTile), 0});
    exe_.mapping[outA] = m;
    exe_.mapping[outB] = std::move(m);
  }

  // A copy of `src` into a layout of blocks: a temporary `name` of `elements` mapped linearly,
  // written in `phase`. Element i lies in block blockOf(i) and copies src's element srcIndex(i),
  // increasing within a block: one vertex per tile slice and block, reading src from its first
  // element's source to its last's.
  int copyInBlocks(const Op& op, int phase, int src, const std::string& name, i64 elements,
                   DType dtype, const std::string& what, const std::function<Range(i64)>& blockOf,
                   const std::function<i64(i64)>& srcIndex) {
    const int buf = addTemporary(name, elements, dtype);
    ComputeSet& cs = newComputeSet(op, phase, what);
    for (const TileSlice& sl : exe_.mapping[buf])
      for (i64 i = sl.begin; i < sl.end;) {
        const i64 e = std::min(sl.end, blockOf(i).end);
        cs.vertices.push_back(
            vertexOn(sl.tile, {{src, srcIndex(i), srcIndex(e - 1) + 1}}, {{buf, i, e}}, {i, e}));
        i = e;
      }
    return buf;
  }
  // A channel-blocked copy [channels/block][pix][bb] of `src` ([.., channels], channels
  // innermost) through copyInBlocks: `srcPixel` maps a pixel of the copy to one of src,
  // increasing.
  int copyInChannelBlocks(const Op& op, int phase, int src, const std::string& name, i64 pix,
                          i64 channels, i64 block, DType dtype, const std::string& what,
                          const std::function<i64(i64)>& srcPixel) {
    return copyInBlocks(
        op, phase, src, name, pix * channels, dtype, what,
        [pix, channels, block](i64 i) {
          const i64 g = i / (block * pix), at = g * block * pix;
          return Range{at, at + std::min(block, channels - g * block) * pix};
        },
        [pix, channels, block, &srcPixel](i64 i) {
          const i64 g = i / (block * pix), bb = std::min(block, channels - g * block);
          const i64 at = g * block * pix;
          return srcPixel((i - at) / bb) * channels + g * block + (i - at) % bb;
        });
  }
  // Phase 1 of a blocked plan: `out` (its own mapping) as the sum of `parts` partials, part p of
  // out's element i at partials' p * partStride + blockedIndex(i). One vertex per run of a tile
  // slice that ends at runEnd(i) (contiguous in out and in every part), its windows in part
  // order; a run whose blockedIndex is negative has no partials and is zero-filled (a vertex
  // with no inputs).
  void sumBlockedPartials(const Op& op, int out, int partials, i64 parts, i64 partStride,
                          const std::function<i64(i64)>& runEnd,
                          const std::function<i64(i64)>& blockedIndex) {
    ComputeSet& cs = newComputeSet(op, 1, "sum_partial_blocks");
    for (const TileSlice& sl : exe_.mapping[out])
      for (i64 i = sl.begin; i < sl.end;) {
        const i64 e = std::min(sl.end, runEnd(i)), at = blockedIndex(i);
        if (at < 0) {  // no partials: zeros
          cs.vertices.push_back(vertexOn(sl.tile, {}, {{out, i, e}}, {i, e}));
          i = e;
          continue;
        }
        std::vector<NeedWindow> ins;
        for (i64 p = 0; p < parts; ++p)
          ins.push_back({partials, p * partStride + at, p * partStride + at + (e - i)});
        cs.vertices.push_back(vertexOn(sl.tile, std::move(ins), {{out, i, e}}, {i, e}, {0, parts}));
        i = e;
      }
  }

  ComputeSet& newComputeSet(const Op& op, int phase, const std::string& what) {
    ComputeSet cs;
    const std::string label =
        op.outputs.empty() ? g_.tensor(op.inputs[0]).name : g_.tensor(op.outputs[0]).name;
    cs.name = fmt::format("{}/{}{}", label, opName(op.kind), what.empty() ? "" : "/" + what);
    cs.op = op.id;
    cs.phase = phaseBase_ + phase;
    exe_.computeSets.push_back(std::move(cs));
    return exe_.computeSets.back();
  }

  Vertex vertexOn(int tile, std::vector<NeedWindow> ins, std::vector<OutRegion> outs, Range work,
                  Range red = {}, int part = 0) {
    Vertex v;
    v.tile = tile;
    v.inputs.reserve(ins.size());
    for (const NeedWindow& w : ins) {
      Window win;
      win.buffer = w.buffer;
      win.begin = w.begin;
      win.end = std::max(w.end, w.begin + 1);
      v.inputs.push_back(win);
    }
    v.outputs = std::move(outs);
    v.work = work;
    v.red = red;
    v.part = part;
    return v;
  }

  // Elementwise-style op: one vertex per slice of the output buffer `out`; `windows` gives the
  // inputs for an output range.
  // With cutAt > 0 a slice is cut into one vertex per run of cutAt-element rows it touches.
  template <typename F>
  void perOutputSlice(const Op& op, int out, F windows, const std::string& what = "",
                      i64 cutAt = 0) {
    ComputeSet& cs = newComputeSet(op, 0, what);
    cs.vertices.reserve(exe_.mapping[out].size());
    for (const TileSlice& s : exe_.mapping[out]) {
      for (i64 b = s.begin; b < s.end;) {
        i64 e = cutAt > 0 ? std::min(s.end, (b / cutAt + 1) * cutAt) : s.end;
        Range r{b, e};
        cs.vertices.push_back(vertexOn(s.tile, windows(r), {{out, b, e}}, r));
        b = e;
      }
    }
  }

  // Reduction split into P parts (partial rows on their own tile groups) then a combining set.
  // `windows(outRange, redRange)`; bytesPerRedUnit is what one unit of the reduced extent adds
  // to a vertex's windows, so P keeps each vertex's windows within the budget. Writes `out`
  // directly when P == 1.
  // cutAt > 0: the vertices of the first set are cut at multiples of cutAt output elements.
  // redBlock > 0: the parts split the ceil(redExtent / redBlock) blocks of the reduced extent
  // (each of redBlock units) and a part's range is whole blocks.
  template <typename F>
  void splitReduction(const Op& op, int out, i64 redExtent, i64 bytesPerRedUnit, F windows,
                      bool combineMax = false, i64 cutAt = 0, i64 redBlock = 0) {
    // The output ranges of one vertex each: r cut at multiples of cutAt.
    auto cuts = [cutAt](Range r, auto&& each) {
      for (i64 b = r.begin; b < r.end;) {
        const i64 e = cutAt > 0 ? std::min(r.end, (b / cutAt + 1) * cutAt) : r.end;
        each(Range{b, e});
        b = e;
      }
    };
    const std::vector<TileSlice> outMap = exe_.mapping[out];  // copy: partials add mappings
    const i64 e = exe_.buffers[out].elements;
    const i64 unit = std::max<i64>(1, redBlock), units = ceilDiv(redExtent, unit);
    i64 parts = conv_plan::reductionParts(e, units, bytesPerRedUnit * unit,
                                          static_cast<i64>(outMap.size()), t_);
    if (parts == 1) {
      ComputeSet& cs = newComputeSet(op, 0, "");
      for (const TileSlice& s : outMap)
        cuts({s.begin, s.end}, [&](Range r) {
          const Range red{0, redExtent};
          cs.vertices.push_back(vertexOn(s.tile, windows(r, red), {{out, r.begin, r.end}}, r, red));
        });
      return;
    }
    // The precision pass may ask for f16 partials (the IPU's "16.16" setting).
    const DType pt = ops::partialsOf(op);
    int partials = addPartials(exe_.buffers[out].name + "/partials", parts, e, pt);
    {
      ComputeSet& cs = newComputeSet(op, 0, "partials");
      const std::vector<TileSlice>& pm = exe_.mapping[partials];
      for (const TileSlice& s : pm) {
        const i64 p = s.begin / e;
        const Range red{std::min(redExtent, unit * (units * p / parts)),
                        std::min(redExtent, unit * (units * (p + 1) / parts))};
        cuts({s.begin - p * e, s.end - p * e}, [&](Range r) {
          cs.vertices.push_back(vertexOn(s.tile, windows(r, red),
                                         {{partials, r.begin + p * e, r.end + p * e}}, r, red,
                                         static_cast<int>(p)));
        });
      }
    }
    // Many parts of a small output (a norm's [C] sums over a large image): the combining vertex
    // of a slice would gather every part's partials of it. Combine groups of partial rows into
    // fewer rows first (more sets of the same phase) until a slice's rows fit the budget.
    const std::string combineName = combineMax ? "max_partials" : "sum_partials";
    auto widest = [this](int buffer) {
      i64 w = 1;
      for (const TileSlice& s : exe_.mapping[buffer]) w = std::max(w, s.end - s.begin);
      return w;
    };
    for (int level = 2; parts > 2; ++level) {
      const i64 bytesPerRow = std::max(widest(partials), widest(out)) * sizeOf(pt);
      const i64 group = windowBudgetBytes() / bytesPerRow;
      if (group < 2 || group >= parts) break;  // rows too wide to group, or all fit already
      const i64 rows = ceilDiv(parts, group);
      const int next =
          addPartials(fmt::format("{}/partials{}", exe_.buffers[out].name, level), rows, e, pt);
      ComputeSet& cs = newComputeSet(op, 1, combineName);
      for (const TileSlice& s : exe_.mapping[next]) {
        const i64 q = s.begin / e, b = s.begin - q * e, en = s.end - q * e;
        std::vector<NeedWindow> ins;
        for (i64 p = q * group; p < std::min(parts, (q + 1) * group); ++p)
          ins.push_back({partials, p * e + b, p * e + en});
        const i64 count = static_cast<i64>(ins.size());
        cs.vertices.push_back(
            vertexOn(s.tile, std::move(ins), {{next, s.begin, s.end}}, {b, en}, {0, count}));
      }
      partials = next;
      parts = rows;
    }
    // The last combine: a slice's rows of every part may still exceed the budget (wide slices,
    // too wide to group: BERT's weight gradients, 38 parts of 2.8K columns, gathered 445 KB on
    // one tile). Then the slices are combined a run of columns at a time, one compute set per
    // run, so a set gathers the rows of one run and frees them. At most kMaxCombineSets: each
    // set repeats every slice's vertex with its `parts` windows (16 sets took BERT-Large's
    // verdict from 8.8 to 11.5 GB of compile memory).
    constexpr i64 kMaxCombineSets = 4;
    i64 widestOut = 1;
    for (const TileSlice& s : outMap) widestOut = std::max(widestOut, s.end - s.begin);
    const i64 run =
        std::max(ceilDiv(widestOut, kMaxCombineSets), windowBudgetBytes() / (parts * sizeOf(pt)));
    for (i64 first = 0; first < widestOut; first += run) {
      ComputeSet& cs = newComputeSet(op, 1, combineName);
      for (const TileSlice& s : outMap) {
        const i64 b = s.begin + first, en = std::min(s.end, b + run);
        if (b >= en) continue;
        std::vector<NeedWindow> ins;
        for (i64 p = 0; p < parts; ++p) ins.push_back({partials, p * e + b, p * e + en});
        cs.vertices.push_back(vertexOn(s.tile, ins, {{out, b, en}}, {b, en}, {0, parts}));
      }
    }
  }

  // Batch-norm style per-channel sums over rows with partials [P][2][C] then a finalize set.
  // Phase 0: one vertex per part (a block of rows, every channel) writes its part's pair of
  // partial rows; `bytesPerRow` (what one row adds to a part's windows, in the stored dtypes)
  // sets P so that a part's windows fit the window budget. Phase 1: the statistics outA/outB
  // are mapped in runs of channels small enough that a run's partials of all P parts fit the
  // budget too, so no tile gathers a whole partials tensor (P x 2C floats: 0.8 MB for the
  // first batch norm's backward of ResNet-50 at micro-batch 20).
  void channelSums(const Op& op, i64 rows, i64 c, i64 bytesPerRow,
                   const std::function<ops::Windows(Range, Range)>& windows, int outA,
                   int outB) override {
    const i64 statSlices = static_cast<i64>(exe_.mapping[outA].size());
    const i64 parts = std::clamp<i64>(std::max(ceilDiv(bytesPerRow * rows, windowBudgetBytes()),
                                               std::min<i64>(16 * statSlices, t_.numTiles)),
                                      1, rows);
    const i64 perTile = std::max<i64>(1, windowBudgetBytes() / (parts * 2 * 4));
    if (perTile < c / statSlices) mapStatisticsInRuns(outA, outB, c, perTile);
    int partials = addPairPartials(exe_.buffers[outA].name + "/partial_sums", parts, c);
    {
      ComputeSet& cs = newComputeSet(op, 0, "channel_sums");
      const Range ch{0, c};
      for (i64 p = 0; p < parts; ++p) {
        Range red{rows * p / parts, rows * (p + 1) / parts};
        const int tile = exe_.sliceOf(partials, p * 2 * c).tile;
        cs.vertices.push_back(vertexOn(
            tile, windows(ch, red),
            {{partials, p * 2 * c, p * 2 * c + c}, {partials, (p * 2 + 1) * c, (p * 2 + 2) * c}},
            ch, red, static_cast<int>(p)));
      }
    }
    ComputeSet& cs = newComputeSet(op, 1, "finalize");
    for (const TileSlice& s : exe_.mapping[outA]) {
      std::vector<NeedWindow> ins;
      for (i64 p = 0; p < parts; ++p) {
        ins.push_back({partials, p * 2 * c + s.begin, p * 2 * c + s.end});
        ins.push_back({partials, (p * 2 + 1) * c + s.begin, (p * 2 + 1) * c + s.end});
      }
      cs.vertices.push_back(vertexOn(s.tile, ins, {{outA, s.begin, s.end}, {outB, s.begin, s.end}},
                                     {s.begin, s.end}, {0, parts}));
    }
  }

  void planOp(const Op& op) {
    if (const ops::OpInfo* info = ops::find(op.kind)) {
      if (info->lowered)
        throw CompileError(fmt::format("internal: {} of '{}' reached the planner unlowered",
                                       info->def.name, g_.tensor(op.inputs.at(0)).name),
                           -1, 0, 0);
      return info->plan(*this, op);
    }
    throw CompileError(
        fmt::format("internal: op '{}' is not a registered op kind", opName(op.kind)), -1, 0, 0);
  }

  // -- program --
  void buildProgram() {
    Program& p = exe_.program;
    p.deviceIterations = exe_.options.deviceIterations;
    for (const Tensor& t : g_.tensors())
      if (t.kind == TensorKind::Input) p.body.push_back({Program::Step::Kind::StreamIn, t.id});
    const int split = exe_.options.updateFirstOp;
    // Outputs stream out after the part that produces them: the micro-batch part's every
    // micro-batch (slot a), the update part's once per step (slot A - 1, e.g. the overflow flag
    // of the reduced gradients).
    auto streamOuts = [&](bool updatePart) {
      for (int o : g_.outputs())
        if ((split >= 0 && g_.tensor(o).producer >= split) == updatePart)
          p.body.push_back({Program::Step::Kind::StreamOut, o});
    };
    p.accumulationSteps = exe_.options.accumulationSteps;
    for (size_t i = 0; i < exe_.computeSets.size(); ++i) {
      if (split >= 0 && p.updateBegin < 0 && exe_.computeSets[i].op >= split) {
        streamOuts(false);
        p.updateBegin = static_cast<int>(p.body.size());
      }
      p.body.push_back({Program::Step::Kind::Execute, static_cast<int>(i)});
    }
    if (p.updateBegin < 0) streamOuts(false);
    streamOuts(true);
  }

  // -- arenas: liveness-based first-fit placement per tile --
  // A buffer's slice in a tile arena.
  struct Item {
    int start, end;  // compute-set indices, inclusive
    i64 bytes;
    i64* offset;
    int buffer;
  };
  // The gather buffers the tiles own (a window's first gatherer on its tile), apart from the
  // items: most of a tile's arena, each live in its compute set only (OneStepRanges).
  struct OwnedGathers {
    struct Gather {
      Window* window;
      i64 bytes;  // beside the window: placing a tile reads its gathers' sizes in a row
    };
    std::vector<std::vector<Gather>> ofSet;  // per compute set: tile by tile, in vertex order
    struct Run {
      int cs;
      std::size_t at, count;  // ofSet[cs][at, at + count)
    };
    std::vector<std::size_t> tileBegin;  // per tile: its runs, in compute-set order
    std::vector<Run> runs;
    std::vector<i64> setBytes;  // per compute set: its gather buffers' bytes on all tiles
  };
  i64 gatherBytes(const Window& w) const {
    return (w.end - w.begin) * sizeOf(exe_.buffers[w.buffer].dtype);
  }
  // Names an arena item in the overflow report (built only then: there are millions of items).
  std::string label(const Item& it) const {
    return fmt::format("'{}'", exe_.buffers[it.buffer].name);
  }
  std::string gatherLabel(const Window& w, int cs) const {
    return fmt::format("'{}' exchange buffer for {}", exe_.buffers[w.buffer].name,
                       exe_.computeSets[cs].name);
  }

  // The slice of `buffer` that holds element `e`, as Executable::sliceOf, trying first the slice
  // found last for that buffer (`hint`) and the next one: a compute set's windows mostly walk
  // a buffer in order, and the binary search over millions of slices was 7% of a verdict.
  const TileSlice& sliceNear(int buffer, i64 e, std::uint32_t& hint) const {
    const std::vector<TileSlice>& m = exe_.mapping[static_cast<size_t>(buffer)];
    auto holds = [&](size_t h) {
      return h < m.size() && m[h].begin <= e && (h + 1 == m.size() || e < m[h + 1].begin);
    };
    for (const size_t h : {size_t{hint}, size_t{hint} + 1})
      if (holds(h)) {
        hint = static_cast<std::uint32_t>(h);
        return m[h];
      }
    const TileSlice& s = exe_.sliceOf(buffer, e);
    hint = static_cast<std::uint32_t>(&s - m.data());
    return s;
  }

  void allocateArenas(PhaseTimer& timer) {
    const int T = static_cast<int>(t_.numTiles);
    const int nCs = static_cast<int>(exe_.computeSets.size());
    const size_t nBuffers = exe_.buffers.size();
    // One pass over every window (threads take compute sets): the liveness of every buffer in
    // compute-set indices, and the gather buffers: a vertex input window not contained in one
    // local slice. Vertices on one tile that need the same window in the same compute set share
    // one buffer and one exchange; each tile counts the gathers it owns (its arena items).
    std::vector<int> first(nBuffers, nCs), last(nBuffers, -1);
    // Per compute set: the tiles that own gathers in it, how many each (in tile order).
    struct TileGathers {
      int tile;
      std::size_t count, at;  // `at`: where they go in the compute set's owned gathers
    };
    std::vector<std::vector<TileGathers>> ownedGathers(nCs);
    std::vector<std::vector<std::pair<Window*, Window*>>> sharedWindows(nCs);  // (dup, owner)
    struct Gather {
      int tile, buffer;
      i64 begin, end;
      std::size_t order;  // position in the compute set: the first of equal windows owns them
      Window* window;
    };
#pragma omp parallel
    {
      std::vector<int> f(nBuffers, nCs), l(nBuffers, -1);
      std::vector<std::uint32_t> hint(nBuffers, 0);
      std::vector<Gather> gathers, byTile;
      std::vector<std::size_t> tileStart(static_cast<size_t>(T) + 1);
#pragma omp for schedule(dynamic, 4) nowait
      for (int c = 0; c < nCs; ++c) {
        ComputeSet& cs = exe_.computeSets[c];
        auto touch = [&](int b) {
          f[b] = std::min(f[b], c);
          l[b] = std::max(l[b], c);
        };
        gathers.clear();
        for (Vertex& v : cs.vertices) {
          for (Window& w : v.inputs) {
            touch(w.buffer);
            const TileSlice& s = sliceNear(w.buffer, w.begin, hint[w.buffer]);
            w.gather = !(s.tile == v.tile && w.end <= s.end);
            w.shared = false;
            if (w.gather) gathers.push_back({v.tile, w.buffer, w.begin, w.end, gathers.size(), &w});
          }
          for (const OutRegion& o : v.outputs) touch(o.buffer);
        }
        // Equal windows side by side: a counting sort by tile (stable, so each tile's windows
        // stay in vertex order), then each tile's few windows sorted (millions in a full step).
        std::fill(tileStart.begin(), tileStart.end(), 0);
        for (const Gather& g : gathers) ++tileStart[static_cast<size_t>(g.tile) + 1];
        for (size_t t = 1; t < tileStart.size(); ++t) tileStart[t] += tileStart[t - 1];
        byTile.resize(gathers.size());
        {
          std::vector<std::size_t> next(tileStart.begin(), tileStart.end() - 1);
          for (const Gather& g : gathers) byTile[next[static_cast<size_t>(g.tile)]++] = g;
        }
        for (size_t t = 0; t + 1 < tileStart.size(); ++t)
          if (tileStart[t + 1] - tileStart[t] > 1)
            std::sort(byTile.begin() + static_cast<std::ptrdiff_t>(tileStart[t]),
                      byTile.begin() + static_cast<std::ptrdiff_t>(tileStart[t + 1]),
                      [](const Gather& a, const Gather& b) {
                        return std::tie(a.buffer, a.begin, a.end, a.order) <
                               std::tie(b.buffer, b.begin, b.end, b.order);
                      });
        Window* owner = nullptr;
        for (std::size_t i = 0; i < byTile.size(); ++i) {
          const Gather& b = byTile[i];
          const Gather* a = i > 0 ? &byTile[i - 1] : nullptr;
          if (a && a->tile == b.tile && a->buffer == b.buffer && a->begin == b.begin &&
              a->end == b.end) {
            b.window->shared = true;
            sharedWindows[c].emplace_back(b.window, owner);
          } else {
            owner = b.window;
            std::vector<TileGathers>& owned = ownedGathers[c];
            if (owned.empty() || owned.back().tile != b.tile) owned.push_back({b.tile, 0, 0});
            ++owned.back().count;
          }
        }
      }
#pragma omp critical
      {
        for (size_t b = 0; b < nBuffers; ++b) {
          first[b] = std::min(first[b], f[b]);
          last[b] = std::max(last[b], l[b]);
        }
      }
    }
    for (const Tensor& t : g_.tensors())
      if (t.kind == TensorKind::Input) first[t.id] = -1;  // streamed in before the first set
    for (int o : g_.outputs()) last[o] = nCs;             // streamed out after the last set
    timer.lap("windows: liveness and gathers");

    // Arena items: every buffer's slices in buffer order (the placement's order of ties).
    // Threads fill them side by side: each part of a tile's list (its slices of a block of
    // buffers) has its place in the list worked out first. The owned gathers: per compute set,
    // tile by tile in vertex order (placed after the items that start in their set).
    exe_.tileMemory.assign(T, {});
    OwnedGathers owned;
    owned.ofSet.resize(nCs);
    owned.setBytes.assign(nCs, 0);
    owned.tileBegin.assign(static_cast<size_t>(T) + 1, 0);
    for (std::vector<TileGathers>& list : ownedGathers) {
      std::size_t at = 0;
      for (TileGathers& g : list) {
        g.at = std::exchange(at, at + g.count);
        ++owned.tileBegin[static_cast<size_t>(g.tile) + 1];
      }
    }
    for (int t = 0; t < T; ++t) owned.tileBegin[t + 1] += owned.tileBegin[t];
    owned.runs.resize(owned.tileBegin[T]);
    {
      std::vector<std::size_t> nextRun(owned.tileBegin.begin(), owned.tileBegin.end() - 1);
      for (int c = 0; c < nCs; ++c)
        for (const TileGathers& g : ownedGathers[c])
          owned.runs[nextRun[g.tile]++] = {c, g.at, g.count};
    }
    std::vector<std::vector<Item>> items(T);
    constexpr size_t kBufferBlocks = 16;
    std::vector<size_t> blockBegin(kBufferBlocks + 1, nBuffers);  // blocks of about equal slices
    {
      size_t slices = 0, seen = 0, block = 0;
      for (const auto& m : exe_.mapping) slices += m.size();
      blockBegin[0] = 0;
      for (size_t b = 0; b < nBuffers; ++b) {
        while (block + 1 < kBufferBlocks && seen >= slices * (block + 1) / kBufferBlocks)
          blockBegin[++block] = b;
        seen += exe_.mapping[b].size();
      }
    }
    // Per block and tile: how many slices, then where the block's slices start in the list.
    std::vector<std::vector<size_t>> blockAt(kBufferBlocks, std::vector<size_t>(T, 0));
#pragma omp parallel for schedule(dynamic, 1)
    for (size_t k = 0; k < kBufferBlocks; ++k)
      for (size_t b = blockBegin[k]; b < blockBegin[k + 1]; ++b)
        for (const TileSlice& s : exe_.mapping[b]) ++blockAt[k][s.tile];
    {
      std::vector<size_t> listed(T, 0);
      for (auto& at : blockAt)
        for (int t = 0; t < T; ++t) listed[t] += std::exchange(at[t], listed[t]);
#pragma omp parallel for schedule(static)
      for (int t = 0; t < T; ++t) items[t].resize(listed[t]);
    }
    // Code and vertex state, always live.
    std::vector<i64> fixed(T, 0);
    // One codelet per (op kind, phase) a tile runs: a flat table per tile.
    int phases = 1;
    for (const ComputeSet& cs : exe_.computeSets) phases = std::max(phases, cs.phase + 1);
    const size_t keys = static_cast<size_t>(ops::kindCount()) * static_cast<size_t>(phases);
    std::vector<char> codelets(static_cast<size_t>(T) * keys, 0);
    // Vertex state: a compute set runs at most one vertex per worker on a tile; the planner's
    // further vertices there are regions on the workers' work lists (a pointer and a size per
    // operand each), as Poplar's multi-region ("2D") and convolution vertices take them; a
    // window the tile gathers once for several regions is one pointer. Counted beside the gather
    // items, each thread with its own sums and codelet table, merged after.
#pragma omp parallel
    {
#pragma omp for schedule(dynamic, 1) nowait
      for (size_t k = 0; k < kBufferBlocks; ++k) {
        std::vector<size_t>& next = blockAt[k];
        for (size_t b = blockBegin[k]; b < blockBegin[k + 1]; ++b) {
          const Buffer& buf = exe_.buffers[b];
          int st = buf.alwaysLive ? -2 : first[b],
              en = buf.alwaysLive ? nCs + 1 : std::max(last[b], first[b]);
          if (!buf.alwaysLive && st > nCs) st = en = 0;  // never touched: still give it a home
          for (TileSlice& s : exe_.mapping[b])
            items[s.tile][next[s.tile]++] = {st, en, (s.end - s.begin) * sizeOf(buf.dtype),
                                             &s.offset, static_cast<int>(b)};
        }
      }
      std::vector<size_t> next(T, 0);
      std::vector<i64> bytes(static_cast<size_t>(T), 0);
      std::vector<char> used(codelets.size(), 0);
      std::vector<int> verticesOnTile(static_cast<size_t>(T), 0);
#pragma omp for schedule(dynamic, 4) nowait
      for (int c = 0; c < nCs; ++c) {
        ComputeSet& cs = exe_.computeSets[c];
        std::vector<OwnedGathers::Gather>& list = owned.ofSet[c];
        for (const TileGathers& g : ownedGathers[c]) next[g.tile] = g.at;
        list.resize(
            ownedGathers[c].empty() ? 0 : ownedGathers[c].back().at + ownedGathers[c].back().count);
        for (Vertex& v : cs.vertices)
          for (Window& w : v.inputs)
            if (w.gather && !w.shared) {
              list[next[v.tile]++] = {&w, gatherBytes(w)};
              owned.setBytes[c] += gatherBytes(w);
            }
        if (isReplicaOp(g_.op(cs.op).kind)) continue;  // no tile code: IPU-Links / host side
        const size_t key = static_cast<size_t>(g_.op(cs.op).kind) * phases + cs.phase;
        for (const Vertex& v : cs.vertices) {
          if (++verticesOnTile[v.tile] <= t_.workersPerTile)
            bytes[v.tile] += t_.vertexStateBytes;
          else {  // an input window another region of the tile gathers too is the worker's
            i64 operands = static_cast<i64>(v.outputs.size());
            for (const Window& w : v.inputs) operands += !(w.gather && w.shared);
            bytes[v.tile] += t_.workListBytesPerOperand * operands;
          }
          used[static_cast<size_t>(v.tile) * keys + key] = 1;
        }
        for (const Vertex& v : cs.vertices) verticesOnTile[v.tile] = 0;
      }
#pragma omp critical
      {
        for (size_t t = 0; t < bytes.size(); ++t) fixed[t] += bytes[t];
        for (size_t k = 0; k < used.size(); ++k) codelets[k] |= used[k];
      }
    }
    for (int t = 0; t < T; ++t)
      fixed[t] += t_.codeBytesPerCodelet *
                  std::count(codelets.begin() + static_cast<std::ptrdiff_t>(t * keys),
                             codelets.begin() + static_cast<std::ptrdiff_t>((t + 1) * keys), 1);

    timer.lap("arena items, code and vertex state");
    exe_.arenaBytes.assign(T, 0);
    // Tiles are placed independently (each writes only its own items and memory record).
#pragma omp parallel for schedule(dynamic, 8)
    for (int tile = 0; tile < T; ++tile) placeTile(tile, items[tile], owned, fixed[tile]);
    for (const auto& list : sharedWindows)
      for (auto& [dup, owner] : list) dup->gatherOffset = owner->gatherOffset;
    timer.lap("first fit");
    describeMemory(items, owned, fixed);
    timer.lap("describe memory");
    checkMemory();
  }

  void placeTile(int tile, std::vector<Item>& items, const OwnedGathers& owned, i64 fixedBytes) {
    TileMemory& mem = exe_.tileMemory[tile];
    i64 alwaysLiveBytes = 0;
    // Always-live first, packed from offset 0.
    for (Item& it : items)
      if (it.start == -2) {
        *it.offset = alwaysLiveBytes;
        alwaysLiveBytes += (it.bytes + 7) / 8 * 8;
      }
    mem.alwaysLive = alwaysLiveBytes + fixedBytes;
    // Not-always-live: first fit among blocks whose lifetimes overlap.
    std::vector<Item*> order;
    std::vector<LiveRange> ranges;
    for (Item& it : items)
      if (it.start != -2) {
        order.push_back(&it);
        ranges.push_back({it.start, it.end, it.bytes});
      }
    // The tile's gather buffers, each live in its compute set only.
    OneStepRanges gathers;
    gathers.begin.push_back(0);
    for (size_t r = owned.tileBegin[tile]; r < owned.tileBegin[tile + 1]; ++r) {
      const OwnedGathers::Run& run = owned.runs[r];
      for (size_t k = run.at; k < run.at + run.count; ++k)
        gathers.bytes.push_back(owned.ofSet[run.cs][k].bytes);
      gathers.steps.push_back(run.cs);
      gathers.begin.push_back(gathers.bytes.size());
    }
    const i64 extent = placeFirstFit(ranges, 8, &gathers);
    // Not-always-live blocks sit above the always-live region.
    for (size_t i = 0; i < order.size(); ++i)
      *order[i]->offset = alwaysLiveBytes + ranges[i].offset;
    for (size_t r = owned.tileBegin[tile], i = 0; r < owned.tileBegin[tile + 1]; ++r) {
      const OwnedGathers::Run& run = owned.runs[r];
      for (size_t k = run.at; k < run.at + run.count; ++k)
        owned.ofSet[run.cs][k].window->gatherOffset = alwaysLiveBytes + gathers.offsets[i++];
    }
    mem.peakNotAlwaysLive = extent;
    exe_.arenaBytes[tile] = alwaysLiveBytes + extent;
  }

  // The fullest tiles' occupants at their peaks and the live bytes at every compute set: what
  // the overflow error names and what reports draw. Linear in the items (difference arrays);
  // labels are formatted only for the few tiles listed.
  void describeMemory(const std::vector<std::vector<Item>>& items, const OwnedGathers& owned,
                      const std::vector<i64>& fixed) {
    constexpr size_t kTiles = 8, kOccupants = 8, kPeakTensors = 10;
    const int T = static_cast<int>(t_.numTiles);
    const int nCs = static_cast<int>(exe_.computeSets.size());
    MemoryDetail& d = exe_.memoryDetail;
    std::vector<int> order(T);
    std::iota(order.begin(), order.end(), 0);
    const size_t shown = std::min<size_t>(kTiles, order.size());
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(shown),
                      order.end(), [&](int a, int b) {
                        const i64 ta = exe_.tileMemory[a].total(), tb = exe_.tileMemory[b].total();
                        return ta != tb ? ta > tb : a < b;
                      });
    // Live bytes per compute set: +bytes at an item's first set, -bytes after its last (sets -1
    // and nCs, the stream copies, count as the first and the last set).
    auto curve = [&](const std::vector<Item>& its, std::vector<i64>& diff) {
      for (const Item& it : its) {
        if (it.start == -2 || nCs == 0) continue;
        const int a = std::clamp(it.start, 0, nCs - 1), b = std::clamp(it.end, 0, nCs - 1);
        diff[a] += it.bytes;
        diff[b + 1] -= it.bytes;
      }
    };
    auto integrate = [](std::vector<i64>& v) {
      for (size_t i = 1; i < v.size(); ++i) v[i] += v[i - 1];
      if (!v.empty()) v.pop_back();
    };
    // A tile's gather buffers of compute set c, as fn(window).
    auto forTileGathers = [&](int tile, auto&& fn) {
      for (size_t r = owned.tileBegin[tile]; r < owned.tileBegin[tile + 1]; ++r) {
        const OwnedGathers::Run& run = owned.runs[r];
        for (size_t k = run.at; k < run.at + run.count; ++k)
          fn(run.cs, *owned.ofSet[run.cs][k].window);
      }
    };
    d.liveBytes.assign(nCs + 1, 0);
    for (const auto& its : items) curve(its, d.liveBytes);
    for (int c = 0; c < nCs; ++c) {
      d.liveBytes[c] += owned.setBytes[c];
      d.liveBytes[c + 1] -= owned.setBytes[c];
    }
    integrate(d.liveBytes);
    d.worstTileLiveBytes.assign(nCs + 1, 0);
    if (T > 0) {
      curve(items[order[0]], d.worstTileLiveBytes);
      forTileGathers(order[0], [&](int c, const Window& w) {
        d.worstTileLiveBytes[c] += gatherBytes(w);
        d.worstTileLiveBytes[c + 1] -= gatherBytes(w);
      });
    }
    integrate(d.worstTileLiveBytes);
    d.peakComputeSet =
        d.liveBytes.empty()
            ? -1
            : static_cast<int>(std::max_element(d.liveBytes.begin(), d.liveBytes.end()) -
                               d.liveBytes.begin());
    d.peakTensors.clear();
    if (d.peakComputeSet >= 0) {
      std::vector<i64> byBuffer(exe_.buffers.size(), 0);
      const int c = d.peakComputeSet;
      for (const auto& its : items)
        for (const Item& it : its)
          if (it.start != -2 && std::clamp(it.start, 0, nCs - 1) <= c &&
              c <= std::clamp(it.end, 0, nCs - 1))
            byBuffer[it.buffer] += it.bytes;
      for (const OwnedGathers::Gather& g : owned.ofSet[c]) byBuffer[g.window->buffer] += g.bytes;
      std::vector<std::pair<i64, int>> top;
      for (size_t b = 0; b < byBuffer.size(); ++b)
        if (byBuffer[b] > 0) top.emplace_back(byBuffer[b], static_cast<int>(b));
      std::sort(top.rbegin(), top.rend());
      for (size_t i = 0; i < std::min(kPeakTensors, top.size()); ++i)
        d.peakTensors.emplace_back(exe_.buffers[top[i].second].name, top[i].first);
    }
    d.worstTiles.clear();
    for (size_t k = 0; k < shown; ++k) {
      const int tile = order[k];
      const auto& its = items[tile];
      TileDetail td;
      td.tile = tile;
      td.memory = exe_.tileMemory[tile];
      // Live bytes at sets -1 (streams in) .. nCs (streams out), as a difference array.
      std::vector<i64> live(static_cast<size_t>(nCs) + 3, 0);
      for (const Item& it : its)
        if (it.start != -2) {
          live[static_cast<size_t>(it.start + 1)] += it.bytes;
          live[static_cast<size_t>(it.end + 2)] -= it.bytes;
        }
      forTileGathers(tile, [&](int c, const Window& w) {
        live[static_cast<size_t>(c + 1)] += gatherBytes(w);
        live[static_cast<size_t>(c + 2)] -= gatherBytes(w);
      });
      i64 peakBytes = -1, running = 0;
      for (size_t k = 0; k + 1 < live.size(); ++k) {
        running += live[k];
        if (running > peakBytes) peakBytes = running, td.peakComputeSet = static_cast<int>(k) - 1;
      }
      std::map<std::pair<std::string, bool>, i64> byLabel;
      for (const Item& it : its)
        if (it.start == -2 || (it.start <= td.peakComputeSet && td.peakComputeSet <= it.end))
          byLabel[{label(it), it.start == -2}] += it.bytes;
      forTileGathers(tile, [&](int c, const Window& w) {
        if (c == td.peakComputeSet) byLabel[{gatherLabel(w, c), false}] += gatherBytes(w);
      });
      td.codeAndVertexState = fixed[tile];
      for (const auto& [key, b] : byLabel) td.occupants.push_back({key.first, b, key.second});
      std::sort(td.occupants.begin(), td.occupants.end(),
                [](const TileOccupant& a, const TileOccupant& b) {
                  return a.bytes != b.bytes ? a.bytes > b.bytes : a.name < b.name;
                });
      if (td.occupants.size() > kOccupants) td.occupants.resize(kOccupants);
      if (td.peakComputeSet >= nCs) td.peakComputeSet = -1;
      d.worstTiles.push_back(std::move(td));
    }
  }

  void checkMemory() {
    const MemoryDetail& d = exe_.memoryDetail;
    if (d.worstTiles.empty()) return;
    const TileDetail& w = d.worstTiles.front();
    const TileMemory& m = w.memory;
    if (m.total() <= t_.bytesPerTile || !exe_.options.checkMemory) return;
    int over = 0;
    for (const TileMemory& tm : exe_.tileMemory) over += tm.total() > t_.bytesPerTile;
    std::string list;
    for (const TileOccupant& o : w.occupants) list += fmt::format("\n    {} {} B", o.name, o.bytes);
    const std::string peakSet = w.peakComputeSet >= 0 ? exe_.computeSets[w.peakComputeSet].name
                                                      : std::string("the host stream copies");
    // The planner ends here: the program planned so far goes with the verdict.
    CompileError error(
        fmt::format("out of tile memory on {}: tile {} needs {} B ({} B always live + {} B peak "
                    "not always live) but has {} B; {} tile(s) overflow. Largest occupants of "
                    "tile {} (peak during {}):{}\n  hint: reduce the micro-batch, use a target "
                    "with more tiles, "
                    "or shard the model over more IPUs",
                    t_.name, w.tile, m.total(), m.alwaysLive, m.peakNotAlwaysLive, t_.bytesPerTile,
                    over, w.tile, peakSet, list),
        w.tile, m.total(), t_.bytesPerTile);
    throw error.withPartial(std::make_shared<const Executable>(std::move(exe_)));
  }

  // -- exchange: copies into gather buffers --
  void planExchanges() {
    // Compute sets are independent: each fills only its own copy list.
#pragma omp parallel for schedule(dynamic, 4)
    for (size_t c = 0; c < exe_.computeSets.size(); ++c) {
      ComputeSet& cs = exe_.computeSets[c];
      for (const Vertex& v : cs.vertices)
        for (const Window& w : v.inputs) {
          if (!w.gather || w.shared) continue;
          i64 es = sizeOf(exe_.buffers[w.buffer].dtype);
          const auto& m = exe_.mapping[w.buffer];
          auto it = std::upper_bound(m.begin(), m.end(), w.begin,
                                     [](i64 e, const TileSlice& s) { return e < s.begin; });
          for (--it; it != m.end() && it->begin < w.end; ++it) {
            i64 b = std::max(w.begin, it->begin), e = std::min(w.end, it->end);
            if (b >= e) continue;
            cs.exchange.push_back({it->tile, v.tile, it->offset + (b - it->begin) * es,
                                   w.gatherOffset + (b - w.begin) * es, (e - b) * es});
          }
        }
    }
  }

  Executable& exe_;
  const Graph& g_;
  const Target& t_;
  int phaseBase_ = 0;  // splitReduction for a registered op: its first phase
};

// Moves every in-place update (optimizer_update, ema_update: ops that write their inputs) to just
// after the last op it depends on: the producers of its inputs and the earlier readers of what it
// writes. A weight's gradient then dies as soon as the update has consumed it instead of living
// until the end of the step (on an IPU that is the difference between fitting or not). It runs
// before the optimizers are lowered, so each update's ops move with it. An update clipped to the
// global gradient norm stays: it waits for every gradient anyway.
void scheduleUpdatesEarly(Graph& g) {
  const auto& ops = g.ops();
  const int n = static_cast<int>(ops.size());
  std::vector<int> lastReader(g.tensors().size(), -1);
  std::vector<std::tuple<int, int, int>> keys;  // (anchor, is update, original position)
  for (int i = 0; i < n; ++i) {
    const Op& op = ops[i];
    std::vector<int> writes;
    for (int w : opDef(op.kind).writesInputs) writes.push_back(op.inputs[w]);
    if (op.kind == OpKind::OptimizerUpdate) {
      const UpdateOperands u = updateOperands(op);
      writes.insert(writes.end(), u.state.begin(), u.state.end());
    }
    if (writes.empty() || op.attrs.getFloat("max_grad_norm", 0.0) > 0.0) {
      keys.emplace_back(i, 0, i);
    } else {
      int anchor = -1;
      for (int t : op.inputs) anchor = std::max(anchor, g.tensor(t).producer);
      for (int w : writes) anchor = std::max(anchor, lastReader[w]);
      keys.emplace_back(anchor, 1, i);
    }
    for (int t : op.inputs) lastReader[t] = i;
  }
  std::sort(keys.begin(), keys.end());
  std::vector<int> order;
  for (const auto& k : keys) order.push_back(std::get<2>(k));
  g.reorderOps(order);
}

}  // namespace

i64 ComputeSet::exchangeBytes() const {
  i64 b = 0;
  for (const ExchangeCopy& c : exchange)
    if (c.srcTile != c.dstTile) b += c.bytes;
  return b;
}

const TileSlice& Executable::sliceOf(int buffer, i64 e) const {
  const auto& m = mapping.at(buffer);
  // Where e would be if the slices were of one size (linear runs, channel blocks: most
  // mappings, some with millions of slices), before the binary search.
  const i64 elements = static_cast<size_t>(buffer) < buffers.size()
                           ? buffers[static_cast<size_t>(buffer)].elements
                           : 0;
  if (elements > 0 && e >= 0 && e < elements) {
    const size_t h = static_cast<size_t>(static_cast<double>(e) / static_cast<double>(elements) *
                                         static_cast<double>(m.size()));
    if (h < m.size() && m[h].begin <= e && (h + 1 == m.size() || e < m[h + 1].begin)) return m[h];
  }
  auto it = std::upper_bound(m.begin(), m.end(), e,
                             [](i64 x, const TileSlice& s) { return x < s.begin; });
  if (it == m.begin()) throw CompileError("internal: element outside mapping", -1, 0, 0);
  return *(--it);
}

std::string Program::describe(const Executable& exe) const {
  std::string s = fmt::format("Repeat({}) {{\n", deviceIterations);
  if (updateBegin >= 0)
    s += fmt::format(" Repeat({}) {{  // gradient accumulation\n", accumulationSteps);
  for (size_t i = 0; i < body.size(); ++i) {
    const Step& st = body[i];
    if (static_cast<int>(i) == updateBegin) s += " }\n";
    switch (st.kind) {
      case Step::Kind::StreamIn:
        s += fmt::format("  StreamCopy(host -> {})\n", exe.buffers[st.index].name);
        break;
      case Step::Kind::StreamOut:
        s += fmt::format("  StreamCopy({} -> host)\n", exe.buffers[st.index].name);
        break;
      case Step::Kind::Execute: {
        const ComputeSet& cs = exe.computeSets[st.index];
        const Op& op = exe.graph.op(cs.op);
        if (op.kind == OpKind::CrossReplicaReduceScatter ||
            op.kind == OpKind::CrossReplicaAllGather) {
          const Tensor& x = exe.graph.tensor(op.inputs[0]);
          s += fmt::format("  {}({}: ring over {} replicas, {} B in)\n",
                           op.kind == OpKind::CrossReplicaAllGather ? "CrossReplicaAllGather"
                                                                    : "CrossReplicaReduceScatter",
                           cs.name, op.attrs.getInt("replicas"), x.bytes());
          break;
        }
        if (op.kind == OpKind::CrossReplicaSum) {
          s += fmt::format("  CrossReplicaSum({}: groups of {} of {} replicas, {} B in)\n", cs.name,
                           op.attrs.getInt("group"), replicasOf(op),
                           exe.graph.tensor(op.inputs[0]).bytes());
          break;
        }
        if (!cs.exchange.empty())
          s += fmt::format("  Exchange({} copies, {} B between tiles)\n  Sync\n",
                           cs.exchange.size(), cs.exchangeBytes());
        s += fmt::format("  Execute({}: {} vertices)\n", cs.name, cs.vertices.size());
        break;
      }
    }
  }
  return s + "}\n";
}

nlohmann::json Executable::report() const {
  nlohmann::json r;
  r["target"] = {
      {"name", target.name}, {"tiles", target.numTiles}, {"bytes_per_tile", target.bytesPerTile}};
  i64 maxTotal = 0, sum = 0;
  int worst = 0;
  std::vector<i64> hist(10, 0);
  for (size_t t = 0; t < tileMemory.size(); ++t) {
    i64 tot = tileMemory[t].total();
    sum += tot;
    if (tot > maxTotal) maxTotal = tot, worst = static_cast<int>(t);
    i64 bin = std::min<i64>(9, tot * 10 / std::max<i64>(1, target.bytesPerTile));
    ++hist[bin];
  }
  i64 vertices = 0, exch = 0, copies = 0;
  for (const ComputeSet& cs : computeSets) {
    vertices += static_cast<i64>(cs.vertices.size());
    exch += cs.exchangeBytes();
    copies += static_cast<i64>(cs.exchange.size());
  }
  r["memory"] = {
      {"max_tile_bytes", maxTotal},
      {"max_tile", worst},
      {"mean_tile_bytes", tileMemory.empty() ? 0.0 : static_cast<double>(sum) / tileMemory.size()},
      {"total_bytes", sum},
      {"fits", maxTotal <= target.bytesPerTile},
      {"histogram_tenths_of_capacity", hist},
      {"max_tile_always_live", tileMemory.empty() ? 0 : tileMemory[worst].alwaysLive},
      {"max_tile_not_always_live", tileMemory.empty() ? 0 : tileMemory[worst].peakNotAlwaysLive}};
  r["program"] = {{"compute_sets", computeSets.size()},
                  {"vertices", vertices},
                  {"exchange_bytes", exch},
                  {"exchange_copies", copies},
                  {"device_iterations", program.deviceIterations},
                  {"ops", graph.ops().size()},
                  {"tensors", graph.tensors().size()}};
  // Optimizer state per replica: replicated tensor sharding keeps 1/R of it.
  i64 stateBytes = optimizerStateBytes, replicas = 1;
  for (const Op& op : graph.ops())
    if (isReplicaOp(op.kind)) replicas = std::max(replicas, replicasOf(op));
  r["replication"] = {
      {"replicas", replicas},
      {"optimizer_state_bytes", stateBytes},
      {"accumulation_steps", program.updateBegin >= 0 ? program.accumulationSteps : 1}};
  r["compile_seconds"] = compileSeconds;
  r["host_kernel_rule"] = hostKernelRule;
  std::vector<std::pair<i64, std::string>> big;
  for (const Buffer& b : buffers) big.emplace_back(b.bytes(), b.name);
  std::sort(big.rbegin(), big.rend());
  nlohmann::json top = nlohmann::json::array();
  for (size_t i = 0; i < std::min<size_t>(10, big.size()); ++i)
    top.push_back({{"name", big[i].second}, {"bytes", big[i].first}});
  r["largest_buffers"] = top;
  return r;
}

Executable compile(Graph graph, const Target& target, const CompileOptions& options) {
  auto t0 = std::chrono::steady_clock::now();
  if (options.deviceIterations < 1) throw CompileError("deviceIterations must be >= 1", -1, 0, 0);
  if (options.accumulationSteps < 1 || (options.accumulationSteps > 1 && options.updateFirstOp < 0))
    throw CompileError(fmt::format("accumulationSteps {} needs >= 1 and, above 1, an "
                                   "updateFirstOp (the replication pass sets both)",
                                   options.accumulationSteps),
                       -1, 0, 0);
  // With a separate update part (replication, accumulation) the updates follow the
  // all-reduce anyway; moving them would take them out of that part.
  if (options.updateFirstOp < 0) scheduleUpdatesEarly(graph);
  // Each optimizer_update becomes its ordinary ops and apply_updates, where it was (after
  // updateFirstOp, the updates' part, so that index stays valid).
  const ExpandedOptimizers lowered = expandOptimizers(graph);
  Executable exe{std::move(graph), target, options, {}, {}, {}, {}, {}, {}, {}, 0.0, {}, {}, 0, {}};
  exe.optimizerStateBytes = lowered.stateBytes;
  std::vector<bool> produced(exe.graph.tensors().size(), false);
  for (int t : lowered.producedTensors) produced[t] = true;
  for (const Op& op : exe.graph.ops())
    exe.optimizerOp.push_back(op.kind == OpKind::ApplyUpdate ||
                              (!op.outputs.empty() && produced[op.outputs[0]]));
  Planner(exe).run();
  exe.compileSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  exe.hostKernelRule = kernels::fused::describe(kernels::fused::activeKernelRule());
  return exe;
}

}  // namespace ipu
