// Compiler: tile mapping covers every tensor, memory overflow errors, compile report, programs.
#include <gtest/gtest.h>
#include <array>
#include <cmath>

#include <limits>
#include <map>
#include <random>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "ipu_backend/compiler/autodiff.h"
#include "ipu_backend/compiler/compiler.h"
#include "ipu_backend/compiler/op_shapes.h"
#include "ipu_backend/engine/engine.h"
#include "ipu_backend/ir/builder.h"
#include "ipu_backend/kernels/fused.h"
#include "ipu_backend/kernels/reference.h"
#include "ipu_backend/ops/op_info.h"
#include "ipu_backend/optimizers/optimizer.h"

namespace ipu {
namespace {

// One step of `exe` in fused mode ([0]) and tile mode ([1]) from the same variable values:
// the values of `read` (outputs) and the gradient of each variable in `grads` (by variable id).
template <class Grads>
std::array<std::map<int, std::vector<float>>, 2> runBothModes(
    const std::shared_ptr<const Executable>& exe,
    const std::vector<std::pair<int, const std::vector<float>*>>& values, int loss,
    const Grads& grads, const std::vector<int>& read = {}) {
  std::array<std::map<int, std::vector<float>>, 2> got;
  for (EngineMode mode : {EngineMode::Fused, EngineMode::Tile}) {
    Engine e(exe, mode);
    for (const auto& [t, v] : values) e.writeTensor(t, v->data(), v->size() * 4);
    float l = 0;
    e.connectOutput(loss, &l);
    e.run();
    auto& out = got[mode == EngineMode::Tile];
    for (int t : read) out[t] = e.readFloats(t);
    for (const auto& [v, gr] : grads) out[v] = e.readFloats(gr);
  }
  return got;
}

// Tile mode within rel x (the fused values' largest magnitude) + abs of fused mode, for each of
// `tensors`; nonZero: that largest magnitude must be positive as well.
void expectTileNearFused(const std::array<std::map<int, std::vector<float>>, 2>& got,
                         const std::vector<int>& tensors, double rel, double abs,
                         bool nonZero = false) {
  for (int v : tensors) {
    const auto &f = got[0].at(v), &tl = got[1].at(v);
    ASSERT_EQ(f.size(), tl.size());
    double scale = 0;
    for (float a : f) scale = std::max(scale, static_cast<double>(std::abs(a)));
    if (nonZero) {
      ASSERT_GT(scale, 0.0);
    }
    for (size_t i = 0; i < f.size(); ++i) ASSERT_NEAR(tl[i], f[i], rel * scale + abs) << i;
  }
}

Graph convGraph(i64 batch) {
  Graph g("conv_stack");
  Builder b(g);
  int x = b.input("images", {batch, 16, 16, 8});
  int w1 = b.variable("conv1_weight", {16, 3, 3, 8});
  int w2 = b.variable("conv2_weight", {16, 3, 3, 16});
  int y = b.relu(b.conv2d(x, w1, Conv2dOptions::make(1, 1), "conv1"), "relu1");
  int z = b.conv2d(y, w2, Conv2dOptions::make(1, 1), "conv2");
  int loss = b.reduceMean(z, {0, 1, 2, 3}, false, "loss");
  g.markOutput(loss);
  appendBackward(g, loss, {w1, w2});
  return g;
}

TEST(Compiler, MappingCoversEveryBufferExactlyOnce) {
  Executable exe = compile(convGraph(2), Target::small(16, 1 << 20));
  for (size_t b = 0; b < exe.buffers.size(); ++b) {
    i64 next = 0;
    for (const TileSlice& s : exe.mapping[b]) {
      EXPECT_EQ(s.begin, next) << exe.buffers[b].name;
      EXPECT_LT(s.begin, s.end);
      EXPECT_GE(s.tile, 0);
      EXPECT_LT(s.tile, 16);
      next = s.end;
    }
    EXPECT_EQ(next, exe.buffers[b].elements) << exe.buffers[b].name;
  }
  // Every vertex writes only its own tile.
  for (const ComputeSet& cs : exe.computeSets)
    for (const Vertex& v : cs.vertices)
      for (const OutRegion& o : v.outputs) {
        const TileSlice& s = exe.sliceOf(o.buffer, o.begin);
        EXPECT_EQ(s.tile, v.tile) << cs.name;
        EXPECT_LE(o.end, s.end) << cs.name;
      }
}

// Weights far larger than one tile's window budget (64 KiB tiles -> 8 KiB per operand window):
// no vertex may gather a whole weight tensor, the convolution output is channel-blocked, and the
// backward passes split their sums into partials. The same graph then trains identically in
// both engine modes (tile mode reads exactly those windows).
TEST(Compiler, LargeWeightsAreSplitSoThatNoVertexGathersThemWhole) {
  Graph g("wide_conv");
  Builder b(g);
  int x = b.variable("features", {2, 6, 6, 64});  // a variable: its gradient is conv backward-data
  int w = b.variable("conv_weight", {96, 3, 3, 64});  // 216 KiB
  int fw = b.variable("fc_weight", {96, 40});         // 15 KiB
  int y = b.relu(b.conv2d(x, w, Conv2dOptions::make(1, 1), "conv"), "relu");
  int pooled = b.reduceMean(y, {1, 2}, false, "pool");
  int logits = b.matmul(pooled, fw, false, false, "fc");
  int loss = b.reduceMean(logits, {0, 1}, false, "loss");
  g.markOutput(loss);
  auto grads = appendBackward(g, loss, {w, fw, x}).grads;
  for (const auto& [v, gr] : grads) g.markOutput(gr);
  // 256 tiles: enough room for the partials that keep every window within the budget (with
  // fewer tiles the compiler trades window size against partials memory).
  const Target t = Target::small(256, 64 << 10);
  CompileOptions opts;
  auto exe = std::make_shared<const Executable>(compile(g, t, opts));
  const i64 budget = t.bytesPerTile / 8;
  const int conv = exe->graph.get("conv");
  bool sawConvBwdDataPartials = false, sawFcPartials = false;
  for (const ComputeSet& cs : exe->computeSets) {
    for (const Vertex& v : cs.vertices)
      for (const Window& win : v.inputs)
        if (win.buffer == w) {
          EXPECT_LE((win.end - win.begin) * 4, budget) << cs.name << " gathers too much weight";
        } else if (win.buffer == fw) {  // tiny output slices: a few B rows, never all of B
          EXPECT_LT(win.end - win.begin, 96 * 40) << cs.name << " gathers too much weight";
        }
    const OpKind k = exe->graph.op(cs.op).kind;
    sawConvBwdDataPartials |= k == OpKind::Conv2dBackwardData && cs.name.ends_with("/partials");
    sawFcPartials |= k == OpKind::MatMul && cs.name.ends_with("/partials");
  }
  EXPECT_TRUE(sawConvBwdDataPartials);
  EXPECT_TRUE(sawFcPartials);
  // Channel-blocked: every slice of the conv output holds a few channels of one pixel.
  for (const TileSlice& s : exe->mapping[conv]) {
    EXPECT_EQ(s.begin / 96, (s.end - 1) / 96);
    EXPECT_LE((s.end - s.begin) * 3 * 3 * 64 * 4, budget);
  }

  std::vector<float> images(2 * 6 * 6 * 64), wv(96 * 3 * 3 * 64), fv(96 * 40);
  for (size_t i = 0; i < images.size(); ++i) images[i] = static_cast<float>((i * 7) % 13) / 13.f;
  for (size_t i = 0; i < wv.size(); ++i) wv[i] = static_cast<float>((i * 5) % 11) / 110.f - 0.05f;
  for (size_t i = 0; i < fv.size(); ++i) fv[i] = static_cast<float>((i * 3) % 7) / 70.f - 0.05f;
  const auto got = runBothModes(exe, {{w, &wv}, {fw, &fv}, {x, &images}}, loss, grads);
  expectTileNearFused(got, {w, fw, x}, 1e-5, 1e-9);
}

// The data gradient of a strided 1x1 convolution with large weights (ResNet-50's projection
// shortcuts) is planned as a forward convolution of dy with transposed weights: no partial rows
// of the whole input gradient, the weights transposed through k-blocks with no vertex reading
// more than a window budget of them, dx channel-blocked. Both engine modes against a plain
// reference: with loss = mean(y), dx[n,h,w,c] = sum_k w[k,c] / |y| at the sampled (even)
// pixels, else 0.
TEST(Compiler, ConvDataGradientOfLargeWeightsUsesTransposedWeights) {
  // 64 input channels: k-blocks of 32 output channels, 2,048 elements, a multiple of a tile's
  // slice of them; 48: k-blocks of 42 channels, 2,016 elements, which tile slices would straddle.
  for (const i64 c : {i64{64}, i64{48}}) {
    SCOPED_TRACE(c);
    Graph g("shortcut");
    Builder b(g);
    const i64 n = 4, h = 8, k = 128;
    int x = b.variable("features", {n, h, h, c});         // its gradient: conv2d_backward_data
    int w = b.variable("shortcut_weight", {k, 1, 1, c});  // 32 KiB, window budget 8 KiB
    int y = b.conv2d(x, w, Conv2dOptions::make(2, 0), "shortcut");
    int loss = b.reduceMean(y, {0, 1, 2, 3}, false, "loss");
    g.markOutput(loss);
    const int dx = appendBackward(g, loss, {x}).grads.at(x);
    g.markOutput(dx);
    const Target t = Target::small(256, 64 << 10);
    auto exe = std::make_shared<const Executable>(compile(g, t, CompileOptions{}));
    const i64 budget = t.bytesPerTile / 8;
    std::set<int> phases;
    for (const ComputeSet& cs : exe->computeSets) {
      if (exe->graph.op(cs.op).kind != OpKind::Conv2dBackwardData) continue;
      phases.insert(cs.phase);
      std::map<int, i64> gathered;  // of w, per tile
      for (const Vertex& v : cs.vertices)
        for (const Window& win : v.inputs)
          if (win.buffer == w) {
            EXPECT_LE((win.end - win.begin) * 4, budget) << cs.name;
            if (win.gather && !win.shared) gathered[v.tile] += (win.end - win.begin) * 4;
          }
      // Each k-block is mapped over tiles of its own: no tile gathers two blocks' windows.
      for (const auto& [tile, bytes] : gathered) EXPECT_LE(bytes, budget) << cs.name << " " << tile;
    }
    EXPECT_EQ(phases, (std::set<int>{2, 3, 4}));  // k-blocks, transpose, dx: no partials
    for (const Buffer& buf : exe->buffers) EXPECT_NE(buf.name, exe->buffers[dx].name + "/partials");
    for (const TileSlice& s : exe->mapping[dx]) EXPECT_EQ(s.begin / c, (s.end - 1) / c);

    std::vector<float> xv(n * h * h * c), wv(k * c);
    for (size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<float>((i * 7) % 13) / 13.f;
    for (size_t i = 0; i < wv.size(); ++i) wv[i] = static_cast<float>((i * 5) % 11) / 110.f - 0.05f;
    // Both modes against the reference: fused mode runs the op's one kernel at the op's first
    // compute set, which here has phase 2.
    for (EngineMode mode : {EngineMode::Tile, EngineMode::Fused}) {
      Engine e(exe, mode);
      e.writeTensor(w, wv.data(), wv.size() * 4);
      e.writeTensor(x, xv.data(), xv.size() * 4);
      float l = 0;
      e.connectOutput(loss, &l);
      e.run();
      const std::vector<float> got = e.readFloats(dx);
      const double outputs = static_cast<double>(n * (h / 2) * (h / 2) * k);
      for (i64 i = 0; i < n * h * h * c; ++i) {
        const i64 ch = i % c, col = (i / c) % h, row = (i / (c * h)) % h;
        double want = 0;
        if (row % 2 == 0 && col % 2 == 0)
          for (i64 kk = 0; kk < k; ++kk) want += wv[static_cast<size_t>(kk * c + ch)] / outputs;
        ASSERT_NEAR(got[static_cast<size_t>(i)], want, 1e-7)
            << (mode == EngineMode::Tile ? "tile " : "fused ") << i;
      }
    }
  }
}

// A grouped convolution (EfficientNet's depthwise 5x5, G16's groups of 16 channels at stride 2):
// a channel's output, data gradient and weight gradient involve only its group's channels, so
// no vertex may read x or dy of other groups. The plans copy x and dy into channel blocks where
// they live (phases 5 and 7: only a pixel whose block two slices share is gathered, and only
// that block's channels), then read one block's rows (y: phase 10, dx: 6, dw: 8 and the sum of
// its partials 9). Unblocked, every vertex gathered the rows of every channel. Both engine
// modes against the plain references (tile mode's y and dx sum in the reference's order).
TEST(Compiler, GroupedConvReadsOnlyItsGroupsChannels) {
  struct Geometry {
    i64 n, h, c, r, groups, stride;
  };
  for (const Geometry geo : {Geometry{2, 10, 48, 5, 48, 1}, Geometry{2, 9, 64, 3, 4, 2}}) {
    Graph g("grouped");
    Builder b(g);
    const i64 cpg = geo.c / geo.groups;
    int x = b.variable("features", {geo.n, geo.h, geo.h, geo.c});
    int w = b.variable("spatial_weight", {geo.c, geo.r, geo.r, cpg});
    int y = b.conv2d(x, w, Conv2dOptions::make(geo.stride, geo.r / 2, geo.groups), "spatial");
    const Shape ys = g.tensor(y).shape;
    int m = b.variable("dy_pattern", ys);  // loss = sum(y * m): dy = m
    int loss = b.reduceSum(b.binary("mul", y, m, "weighted"), {0, 1, 2, 3}, false, "loss");
    g.markOutput(loss);
    g.markOutput(y);
    const auto grads = appendBackward(g, loss, {x, w}).grads;
    const int dx = grads.at(x), dw = grads.at(w);
    g.markOutput(dx);
    g.markOutput(dw);
    const Target t = Target::small(128, 64 << 10);
    auto exe = std::make_shared<const Executable>(compile(g, t, CompileOptions{}));
    const Graph& eg = exe->graph;
    const kernels::Conv2dShape s = convShapeOf(eg, eg.op(eg.tensor(y).producer));
    std::map<OpKind, std::set<int>> phases;
    i64 mostGathered = 0;  // of x, dy or their blocks by a tile in one compute set
    for (const ComputeSet& cs : exe->computeSets) {
      const Op& op = eg.op(cs.op);
      if (op.kind != OpKind::Conv2d && op.kind != OpKind::Conv2dBackwardData &&
          op.kind != OpKind::Conv2dBackwardFilter)
        continue;
      phases[op.kind].insert(cs.phase);
      std::map<int, i64> gathered;
      for (const Vertex& v : cs.vertices)
        for (const Window& win : v.inputs) {
          if (!win.gather || win.buffer == w ||
              exe->buffers[win.buffer].name.find("partials") != std::string::npos)
            continue;
          // A copy into blocks gathers one pixel's channels of one block at most.
          if (cs.phase == 5 || cs.phase == 7) {
            EXPECT_LT(win.end - win.begin, s.c) << cs.name;
          }
          if (!win.shared) gathered[v.tile] += (win.end - win.begin) * 4;
        }
      for (const auto& [tile, bytes] : gathered) mostGathered = std::max(mostGathered, bytes);
    }
    const std::string what = fmt::format("{} channels in {} groups", geo.c, geo.groups);
    EXPECT_EQ(phases[OpKind::Conv2d], (std::set<int>{7, 10})) << what;
    EXPECT_EQ(phases[OpKind::Conv2dBackwardData], (std::set<int>{5, 6})) << what;
    EXPECT_TRUE(phases[OpKind::Conv2dBackwardFilter].count(8)) << what;
    EXPECT_TRUE(phases[OpKind::Conv2dBackwardFilter].count(5)) << what;
    EXPECT_TRUE(phases[OpKind::Conv2dBackwardFilter].count(7)) << what;
    // No tile gathers more than half a window budget in one compute set (the plans' aim; a
    // vertex of the unblocked plans read a filter's span of rows of every channel, 6.9-15 KB
    // here against 4 KiB).
    EXPECT_LE(mostGathered, t.bytesPerTile / 8 / 2) << what;

    std::vector<float> xv(static_cast<size_t>(s.inputElems())),
        wv(static_cast<size_t>(s.weightElems())), mv(static_cast<size_t>(s.outputElems()));
    for (size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<float>((i * 7) % 13) / 13.f;
    for (size_t i = 0; i < wv.size(); ++i) wv[i] = static_cast<float>((i * 5) % 11) / 11.f - 0.5f;
    for (size_t i = 0; i < mv.size(); ++i) mv[i] = static_cast<float>((i * 3) % 17) / 17.f - 0.4f;
    using FW = kernels::Window<float>;
    std::vector<float> wantY(mv.size()), wantDx(xv.size()), wantDw(wv.size());
    kernels::ref::conv2dForward(s, FW::whole(xv.data(), s.inputElems()),
                                FW::whole(wv.data(), s.weightElems()), wantY.data(),
                                {0, s.outputElems()});
    kernels::ref::conv2dBackwardData(s, FW::whole(mv.data(), s.outputElems()),
                                     FW::whole(wv.data(), s.weightElems()), wantDx.data(),
                                     {0, s.inputElems()}, {0, s.k});
    kernels::ref::conv2dBackwardFilter(s, FW::whole(xv.data(), s.inputElems()),
                                       FW::whole(mv.data(), s.outputElems()), wantDw.data(),
                                       {0, s.weightElems()}, {0, s.n * s.outH()});
    for (EngineMode mode : {EngineMode::Tile, EngineMode::Fused}) {
      Engine e(exe, mode);
      e.writeTensor(x, xv.data(), xv.size() * 4);
      e.writeTensor(w, wv.data(), wv.size() * 4);
      e.writeTensor(m, mv.data(), mv.size() * 4);
      e.run();
      const bool tile = mode == EngineMode::Tile;
      for (const auto& [tensor, want] :
           {std::pair{y, &wantY}, std::pair{dx, &wantDx}, std::pair{dw, &wantDw}}) {
        const std::vector<float> got = e.readFloats(tensor);
        ASSERT_EQ(got.size(), want->size());
        for (size_t i = 0; i < want->size(); ++i) {
          if (tile && tensor != dw) {
            ASSERT_EQ(got[i], (*want)[i]) << "tile " << eg.tensor(tensor).name << " " << i;
          } else {  // fused mode, and the weight gradient's partial sums: rounding only
            ASSERT_NEAR(got[i], (*want)[i], 1e-5)
                << (tile ? "tile " : "fused ") << eg.tensor(tensor).name << " " << i;
          }
        }
      }
    }
  }
}

// The data gradient of an ungrouped convolution with many output channels (EfficientNet's 1x1
// expand convs: 448 -> 2688) is split over k with partial rows; a part needs only its k-range of
// dy, but a flat window of dy rows holds every channel. dy is copied into k-blocks first (phase
// 5), so a part (phase 12, its sum 13) gathers only its blocks' rows: unblocked, a tile
// gathered the dy rows of every channel (8,192 and 6,144 B here against 2,048 and 1,344 B). A
// 1x1 and a padded 3x3 convolution, both engine modes against a plain reference.
TEST(Compiler, DenseConvDataGradientSplitOverKReadsOnlyItsChannelsOfDy) {
  struct Case {
    i64 kernel, pad, c, k;
  };
  for (const Case cc : {Case{1, 0, 16, 256}, Case{3, 1, 8, 64}}) {
    SCOPED_TRACE(cc.kernel);
    Graph g("dense_split_k");
    Builder b(g);
    const i64 n = 2, h = 8;
    int x = b.variable("features", {n, h, h, cc.c});
    int w = b.variable("expand_weight", {cc.k, cc.kernel, cc.kernel, cc.c});
    int m = b.variable("dy_pattern", {n, h, h, cc.k});  // loss = sum(y * m): dy = m
    int y = b.conv2d(x, w, Conv2dOptions::make(1, cc.pad), "expand");
    int loss = b.reduceSum(b.binary("mul", y, m, "weighted"), {0, 1, 2, 3}, false, "loss");
    g.markOutput(loss);
    const int dx = appendBackward(g, loss, {x}).grads.at(x);
    g.markOutput(dx);
    const Target t = Target::small(128, 32 << 10);  // window budget 4 KiB, weights 16-18 KiB
    auto exe = std::make_shared<const Executable>(compile(g, t, CompileOptions{}));
    const Graph& eg = exe->graph;
    const kernels::Conv2dShape s = convShapeOf(eg, eg.op(eg.tensor(y).producer));
    std::set<int> phases;
    i64 mostGathered = 0;  // of dy or its blocks, by a tile in the parts' compute set
    for (const ComputeSet& cs : exe->computeSets) {
      if (eg.op(cs.op).kind != OpKind::Conv2dBackwardData) continue;
      phases.insert(cs.phase);
      std::map<int, i64> gathered;
      for (const Vertex& v : cs.vertices)
        for (const Window& win : v.inputs)
          if (win.gather && !win.shared && win.buffer != w &&
              exe->buffers[win.buffer].name.find("partials") == std::string::npos)
            gathered[v.tile] += (win.end - win.begin) * 4;
      for (const auto& [tile, bytes] : gathered) mostGathered = std::max(mostGathered, bytes);
    }
    EXPECT_EQ(phases, (std::set<int>{5, 12, 13}));  // dy k-blocks, partials, their sum
    // A part's tile: its output row's pixels of its blocks (4 KiB / weight row of channels):
    // at most 2 rows x 8 pixels x kb channels; every channel of them unblocked.
    const i64 kb = t.bytesPerTile / 8 / (cc.kernel * cc.kernel * cc.c * 4);
    EXPECT_LE(mostGathered, (cc.kernel + 1) * h * kb * 4) << "kb " << kb;

    std::vector<float> xv(static_cast<size_t>(s.inputElems())),
        wv(static_cast<size_t>(s.weightElems())), mv(static_cast<size_t>(s.outputElems()));
    for (size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<float>((i * 7) % 13) / 13.f;
    for (size_t i = 0; i < wv.size(); ++i) wv[i] = static_cast<float>((i * 5) % 11) / 11.f - 0.5f;
    for (size_t i = 0; i < mv.size(); ++i) mv[i] = static_cast<float>((i * 3) % 17) / 17.f - 0.4f;
    std::vector<double> want(xv.size(), 0.0);
    for (i64 im = 0; im < n; ++im)
      for (i64 oh = 0; oh < h; ++oh)
        for (i64 ow = 0; ow < h; ++ow)
          for (i64 r = 0; r < cc.kernel; ++r)
            for (i64 q = 0; q < cc.kernel; ++q) {
              const i64 ih = oh - cc.pad + r, iw = ow - cc.pad + q;
              if (ih < 0 || ih >= h || iw < 0 || iw >= h) continue;
              for (i64 kk = 0; kk < cc.k; ++kk)
                for (i64 ch = 0; ch < cc.c; ++ch)
                  want[static_cast<size_t>(((im * h + ih) * h + iw) * cc.c + ch)] +=
                      static_cast<double>(
                          mv[static_cast<size_t>(((im * h + oh) * h + ow) * cc.k + kk)]) *
                      wv[static_cast<size_t>(((kk * cc.kernel + r) * cc.kernel + q) * cc.c + ch)];
            }
    const auto got =
        runBothModes(exe, {{x, &xv}, {w, &wv}, {m, &mv}}, loss, std::map<int, int>{{x, dx}});
    for (int mode = 0; mode < 2; ++mode)
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(got[mode].at(x)[i], want[i], 1e-5) << (mode ? "tile " : "fused ") << i;
  }
}

// The weight gradient of a convolution with many input and output channels is planned by blocks
// of both (compiler/conv_plan.h, FilterBlocks): dy and x copied channel-blocked, each tile one
// (part, k-block, c-block) block of partials reading only its block's channels of its part's
// pixels, then the parts summed into dw; no partial of the whole dw per part. A 3x3 convolution
// with padding (x blocked over every pixel) and a 1x1 stride-2 shortcut (x blocked over the
// pixels it reads). Both engine modes against a plain reference: with loss = mean(y * m),
// dw[k,r,s,c] = sum over outputs of x[input pixel, c] * m[output pixel, k] / |y|.
TEST(Compiler, ConvWeightGradientOfManyChannelsIsBlockedOverBoth) {
  struct Case {
    i64 kernel, stride, pad;
  };
  for (const Case cc : {Case{3, 1, 1}, Case{1, 2, 0}}) {
    SCOPED_TRACE(cc.kernel);
    Graph g("blocked_filter");
    Builder b(g);
    const i64 n = 2, h = 8, c = 64, k = 128, oh = (h + 2 * cc.pad - cc.kernel) / cc.stride + 1;
    int x = b.variable("features", {n, h, h, c});
    int w = b.variable("weight", {k, cc.kernel, cc.kernel, c});
    int m = b.variable("mask", {n, oh, oh, k});
    int y = b.conv2d(x, w, Conv2dOptions::make(cc.stride, cc.pad), "conv");
    int loss = b.reduceMean(b.binary("mul", y, m, "masked"), {0, 1, 2, 3}, false, "loss");
    g.markOutput(loss);
    const int dw = appendBackward(g, loss, {w}).grads.at(w);
    g.markOutput(dw);
    const Target t = Target::small(256, 32 << 10);  // window budget 4 KiB
    auto exe = std::make_shared<const Executable>(compile(g, t, CompileOptions{}));
    std::set<int> phases;
    for (const ComputeSet& cs : exe->computeSets)
      if (exe->graph.op(cs.op).kind == OpKind::Conv2dBackwardFilter) phases.insert(cs.phase);
    EXPECT_EQ(phases, (std::set<int>{1, 2, 3, 4}));  // sums, dy blocks, x blocks, blocks
    for (const Buffer& buf : exe->buffers) EXPECT_NE(buf.name, exe->buffers[dw].name + "/partials");

    std::vector<float> xv(n * h * h * c), wv(k * cc.kernel * cc.kernel * c), mv(n * oh * oh * k);
    for (size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<float>((i * 7) % 13) / 13.f;
    for (size_t i = 0; i < wv.size(); ++i) wv[i] = static_cast<float>((i * 5) % 11) / 110.f;
    for (size_t i = 0; i < mv.size(); ++i) mv[i] = static_cast<float>((i * 3) % 17) / 17.f - 0.5f;
    std::vector<double> want(wv.size(), 0.0);
    const double outputs = static_cast<double>(mv.size());
    for (i64 kk = 0; kk < k; ++kk)
      for (i64 r = 0; r < cc.kernel; ++r)
        for (i64 q = 0; q < cc.kernel; ++q)
          for (i64 ch = 0; ch < c; ++ch) {
            double& acc =
                want[static_cast<size_t>(((kk * cc.kernel + r) * cc.kernel + q) * c + ch)];
            for (i64 im = 0; im < n; ++im)
              for (i64 p = 0; p < oh; ++p)
                for (i64 o = 0; o < oh; ++o) {
                  const i64 ih = p * cc.stride - cc.pad + r, iw = o * cc.stride - cc.pad + q;
                  if (ih < 0 || ih >= h || iw < 0 || iw >= h) continue;
                  acc += xv[static_cast<size_t>(((im * h + ih) * h + iw) * c + ch)] *
                         mv[static_cast<size_t>(((im * oh + p) * oh + o) * k + kk)] / outputs;
                }
          }
    const auto got =
        runBothModes(exe, {{x, &xv}, {w, &wv}, {m, &mv}}, loss, std::map<int, int>{{w, dw}});
    for (int mode = 0; mode < 2; ++mode)
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(got[mode].at(w)[i], want[i], 1e-6) << (mode ? "tile " : "fused ") << i;
  }
}

// A forward convolution whose tile would gather every input channel of its pixels beyond a
// window budget is blocked over output channels, input channels and pixels (weights and x
// copied into blocks, partials per input-channel block, then summed): for a 3x3 padded
// convolution and a 1x1 stride-2 one (x subsampled in its copy). y matches a plain double
// reference in both modes.
TEST(Compiler, ConvForwardOfManyChannelsIsBlockedOverInputChannels) {
  struct Case {
    i64 kernel, stride, pad, c, k;
  };
  // The last case leaves short blocks at the ends (the chooser takes 13 of 50 input and 9 of 70
  // output channels per block).
  for (const Case cc : {Case{3, 1, 1, 64, 128}, Case{1, 2, 0, 64, 128}, Case{3, 2, 1, 50, 70}}) {
    SCOPED_TRACE(testing::Message() << cc.kernel << "x" << cc.kernel << " stride " << cc.stride
                                    << ", " << cc.c << " -> " << cc.k << " channels");
    Graph g("blocked_forward");
    Builder b(g);
    const i64 n = 2, h = 8, c = cc.c, k = cc.k;
    const i64 oh = (h + 2 * cc.pad - cc.kernel) / cc.stride + 1;
    int x = b.variable("features", {n, h, h, c});
    int w = b.variable("weight", {k, cc.kernel, cc.kernel, c});
    int y = b.conv2d(x, w, Conv2dOptions::make(cc.stride, cc.pad), "conv");
    int loss = b.reduceMean(y, {0, 1, 2, 3}, false, "loss");
    g.markOutput(loss);
    g.markOutput(y);
    const Target t = Target::small(256, 16 << 10);  // window budget 2 KiB
    CompileOptions opts;
    opts.checkMemory = false;  // the plan and its numbers are under test, not the tiny tiles
    auto exe = std::make_shared<const Executable>(compile(g, t, opts));
    std::set<int> phases;
    for (const ComputeSet& cs : exe->computeSets)
      if (exe->graph.op(cs.op).kind == OpKind::Conv2d) phases.insert(cs.phase);
    EXPECT_EQ(phases, (std::set<int>{1, 2, 3, 4}));  // sums, w blocks, x blocks, blocks
    // No vertex of the block phase reads every input channel of a pixel.
    for (const ComputeSet& cs : exe->computeSets)
      if (exe->graph.op(cs.op).kind == OpKind::Conv2d && cs.phase == 4)
        for (const Vertex& v : cs.vertices) {
          ASSERT_EQ(v.inputs.size(), 2u);
          EXPECT_TRUE(exe->buffers[v.inputs[0].buffer].name.ends_with("/x_blocks"));
          EXPECT_TRUE(exe->buffers[v.inputs[1].buffer].name.ends_with("/weight_blocks"));
          EXPECT_LT(v.inputs[1].end - v.inputs[1].begin, k * cc.kernel * cc.kernel * c / 2);
        }

    std::vector<float> xv(n * h * h * c), wv(k * cc.kernel * cc.kernel * c);
    for (size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<float>((i * 7) % 13) / 13.f - 0.3f;
    for (size_t i = 0; i < wv.size(); ++i) wv[i] = static_cast<float>((i * 5) % 11) / 110.f;
    std::vector<double> want(static_cast<size_t>(n * oh * oh * k), 0.0);
    for (i64 im = 0; im < n; ++im)
      for (i64 p = 0; p < oh; ++p)
        for (i64 o = 0; o < oh; ++o)
          for (i64 kk = 0; kk < k; ++kk) {
            double& acc = want[static_cast<size_t>(((im * oh + p) * oh + o) * k + kk)];
            for (i64 r = 0; r < cc.kernel; ++r)
              for (i64 q = 0; q < cc.kernel; ++q) {
                const i64 ih = p * cc.stride - cc.pad + r, iw = o * cc.stride - cc.pad + q;
                if (ih < 0 || ih >= h || iw < 0 || iw >= h) continue;
                for (i64 ch = 0; ch < c; ++ch)
                  acc += static_cast<double>(
                             xv[static_cast<size_t>(((im * h + ih) * h + iw) * c + ch)]) *
                         wv[static_cast<size_t>(((kk * cc.kernel + r) * cc.kernel + q) * c + ch)];
              }
          }
    const auto got = runBothModes(exe, {{x, &xv}, {w, &wv}}, loss, std::map<int, int>{}, {y});
    for (int mode = 0; mode < 2; ++mode)
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(got[mode].at(y)[i], want[i], 1e-5 * std::max(1.0, std::abs(want[i])))
            << (mode ? "tile " : "fused ") << i;
  }
}

// The transposed-weights data gradient (ResNet-50's projection shortcuts and stride-2 3x3s)
// contracts over every output channel: its tiles read the dy rows of all K channels and K
// weights per input channel. Where that is over two window budgets it is blocked over its
// contraction K as well (compiler/conv_plan.h, DataBlocks): w and dy copied into blocks, each
// tile one (k-block, c-block, part of the pixels) block of partials reading its k-block of dy
// and its block of w, then dx sums the k-blocks (a strided 1x1's pixels that no tap reaches are
// zero-filled). dx matches a plain double reference in both modes.
TEST(Compiler, TransposedDataGradientIsBlockedOverItsContraction) {
  struct Case {
    i64 h, kernel, stride, pad, c, k;
  };
  // The last two leave short blocks at the ends (the chooser takes 13 of 200 output channels
  // per block, and 12 of 90) and odd images.
  for (const Case cc :
       {Case{8, 1, 2, 0, 128, 128}, Case{9, 1, 2, 0, 120, 200}, Case{9, 3, 2, 1, 60, 90}}) {
    SCOPED_TRACE(testing::Message() << cc.kernel << "x" << cc.kernel << " stride " << cc.stride
                                    << ", " << cc.c << " -> " << cc.k << " channels");
    Graph g("blocked_data_gradient");
    Builder b(g);
    const i64 n = 2, h = cc.h, c = cc.c, k = cc.k;
    const i64 oh = (h + 2 * cc.pad - cc.kernel) / cc.stride + 1;
    int x = b.variable("features", {n, h, h, c});
    int w = b.variable("weight", {k, cc.kernel, cc.kernel, c});
    int m = b.variable("dy_pattern", {n, oh, oh, k});  // loss = sum(y * m): dy = m
    int y = b.conv2d(x, w, Conv2dOptions::make(cc.stride, cc.pad), "conv");
    int loss = b.reduceSum(b.binary("mul", y, m, "weighted"), {0, 1, 2, 3}, false, "loss");
    g.markOutput(loss);
    const int dx = appendBackward(g, loss, {x}).grads.at(x);
    g.markOutput(dx);
    const Target t = Target::small(256, 16 << 10);  // window budget 2 KiB
    CompileOptions opts;
    opts.checkMemory = false;  // the plan and its numbers are under test, not the tiny tiles
    auto exe = std::make_shared<const Executable>(compile(g, t, opts));
    std::set<int> phases;
    for (const ComputeSet& cs : exe->computeSets) {
      if (exe->graph.op(cs.op).kind != OpKind::Conv2dBackwardData) continue;
      phases.insert(cs.phase);
      if (cs.phase != 15) continue;
      // The block phase reads a k-block of dy and a block of w, never every output channel.
      for (const Vertex& v : cs.vertices) {
        ASSERT_EQ(v.inputs.size(), 2u);
        EXPECT_TRUE(exe->buffers[v.inputs[0].buffer].name.ends_with("/dy_k_blocks"));
        EXPECT_TRUE(exe->buffers[v.inputs[1].buffer].name.ends_with("/weight_blocks"));
        EXPECT_LE(v.red.size(), k / 4);
        EXPECT_LT(v.inputs[1].end - v.inputs[1].begin, k * cc.kernel * cc.kernel * c / 8);
      }
    }
    // Sums (and zeros), dy k-blocks, w blocks, blocks; the transposed plan's are 2, 3 and 4.
    EXPECT_EQ(phases, (std::set<int>{1, 5, 14, 15}));

    std::vector<float> xv(n * h * h * c), wv(k * cc.kernel * cc.kernel * c), mv(n * oh * oh * k);
    for (size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<float>((i * 7) % 13) / 13.f;
    for (size_t i = 0; i < wv.size(); ++i) wv[i] = static_cast<float>((i * 5) % 11) / 11.f - 0.5f;
    for (size_t i = 0; i < mv.size(); ++i) mv[i] = static_cast<float>((i * 3) % 17) / 17.f - 0.4f;
    std::vector<double> want(xv.size(), 0.0);
    for (i64 im = 0; im < n; ++im)
      for (i64 p = 0; p < oh; ++p)
        for (i64 o = 0; o < oh; ++o)
          for (i64 r = 0; r < cc.kernel; ++r)
            for (i64 q = 0; q < cc.kernel; ++q) {
              const i64 ih = p * cc.stride - cc.pad + r, iw = o * cc.stride - cc.pad + q;
              if (ih < 0 || ih >= h || iw < 0 || iw >= h) continue;
              for (i64 kk = 0; kk < k; ++kk)
                for (i64 ch = 0; ch < c; ++ch)
                  want[static_cast<size_t>(((im * h + ih) * h + iw) * c + ch)] +=
                      static_cast<double>(
                          mv[static_cast<size_t>(((im * oh + p) * oh + o) * k + kk)]) *
                      wv[static_cast<size_t>(((kk * cc.kernel + r) * cc.kernel + q) * c + ch)];
            }
    const auto got =
        runBothModes(exe, {{x, &xv}, {w, &wv}, {m, &mv}}, loss, std::map<int, int>{{x, dx}});
    for (int mode = 0; mode < 2; ++mode)
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(got[mode].at(x)[i], want[i], 1e-5 * std::max(1.0, std::abs(want[i])))
            << (mode ? "tile " : "fused ") << i;
  }
}

// Batch norm over many rows splits its channel sums into many parts. The combining set must not
// gather every part's partial sums on the statistics' tile (P x 2C floats: 0.8 MB for
// ResNet-50's first batch norm backward at micro-batch 20): the statistics are mapped in
// channel runs whose partials of all parts fit the window budget. The step trains identically
// in both modes.
TEST(Compiler, BatchNormPartialSumsAreNeverGatheredWhole) {
  Graph g("bn_many_rows");
  Builder b(g);
  const i64 c = 16;
  int x = b.variable("features", {16, 32, 32, c});  // 16,384 rows
  int gamma = b.variable("gamma", {c}), beta = b.variable("beta", {c});
  int y = b.batchNormTrain(x, gamma, beta, 1e-5, "bn").y;
  int loss = b.reduceMean(b.binary("mul", y, y, "sq"), {0, 1, 2, 3}, false, "loss");
  g.markOutput(loss);
  auto grads = appendBackward(g, loss, {x, gamma, beta}).grads;
  for (const auto& [v, gr] : grads) g.markOutput(gr);
  const Target t = Target::small(64, 64 << 10);
  CompileOptions opts;
  opts.checkMemory = false;
  auto exe = std::make_shared<const Executable>(compile(g, t, opts));
  const i64 budget = t.bytesPerTile / 8;
  int finalizeSets = 0;
  for (const ComputeSet& cs : exe->computeSets) {
    const OpKind k = exe->graph.op(cs.op).kind;
    if ((k != OpKind::BatchNormTrain && k != OpKind::BatchNormBackward) || cs.phase != 1) continue;
    ++finalizeSets;
    std::map<int, i64> gatheredPerTile;
    for (const Vertex& v : cs.vertices)
      for (const Window& w : v.inputs)
        if (exe->buffers[w.buffer].name.ends_with("/partial_sums"))
          gatheredPerTile[v.tile] += (w.end - w.begin) * 4;
    EXPECT_GT(cs.vertices.size(), 1u) << cs.name << ": one tile combines every channel";
    for (const auto& [tile, bytes] : gatheredPerTile)
      EXPECT_LE(bytes, budget) << cs.name << " gathers " << bytes << " B of partials on tile "
                               << tile;
  }
  EXPECT_EQ(finalizeSets, 2);  // forward statistics and backward sums

  std::vector<float> xv(16 * 32 * 32 * c), gv(c), bv(c);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<float>((i * 7) % 13) / 13.f;
  for (size_t i = 0; i < gv.size(); ++i) gv[i] = 0.5f + static_cast<float>(i) / 16.f, bv[i] = 0.1f;
  const auto got = runBothModes(exe, {{x, &xv}, {gamma, &gv}, {beta, &bv}}, loss, grads);
  expectTileNearFused(got, {x, gamma, beta}, 1e-4, 1e-7);
}

// Group norm with samples larger than a vertex's window budget (EfficientNet-B4's first stage:
// 6.9 MB per sample on a Mk2): its per-(sample, group) sums are split over the positions, so no
// vertex of the forward or the backward gathers a whole sample (one vertex per sample gathered
// 35 MB there). Tile and fused modes give the same output and gradients.
TEST(Compiler, GroupNormSplitsItsSampleSumsOverTiles) {
  Graph g("group_norm_large_samples");
  Builder b(g);
  const i64 c = 8, groups = 2;
  int x = b.variable("features", {2, 12, 16, c});  // 6 KiB per sample
  int gamma = b.variable("gamma", {c}), beta = b.variable("beta", {c});
  Attrs a;
  a.set("groups", groups);
  a.set("eps", 1e-5);
  int y = ops::add(g, "group_norm", {x, gamma, beta}, a, {"gn", "gn_mean", "gn_rstd"})[0];
  int loss = b.reduceMean(b.binary("mul", y, b.relu(y, "r"), "sq"), {0, 1, 2, 3}, false, "loss");
  g.markOutput(loss);
  g.markOutput(y);
  auto grads = appendBackward(g, loss, {x, gamma, beta}).grads;
  for (const auto& [v, gr] : grads) g.markOutput(gr);
  const Target t = Target::small(64, 16 << 10);
  CompileOptions opts;
  opts.checkMemory = false;
  auto exe = std::make_shared<const Executable>(compile(g, t, opts));
  const i64 budget = t.bytesPerTile / 8;  // 2 KiB
  int sets = 0;
  for (const ComputeSet& cs : exe->computeSets) {
    const OpKind k = exe->graph.op(cs.op).kind;
    if (k != ops::kindNamed("group_norm") && k != ops::kindNamed("group_norm_grad")) continue;
    ++sets;
    for (const Vertex& v : cs.vertices)
      for (const Window& w : v.inputs)
        EXPECT_LE((w.end - w.begin) * sizeOf(exe->buffers[w.buffer].dtype), budget)
            << cs.name << " gathers " << exe->buffers[w.buffer].name << " [" << w.begin << ", "
            << w.end << ")";
  }
  EXPECT_GT(sets, 4);

  std::vector<float> xv(2 * 12 * 16 * c), gv(c), bv(c);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<float>((i * 7) % 13) / 13.f + 0.3f;
  for (size_t i = 0; i < gv.size(); ++i) gv[i] = 0.5f + static_cast<float>(i) / 16.f, bv[i] = 0.1f;
  const auto got = runBothModes(exe, {{x, &xv}, {gamma, &gv}, {beta, &bv}}, loss, grads, {y});
  expectTileNearFused(got, {y, x, gamma, beta}, 1e-5, 1e-7, /*nonZero=*/true);
}

// A spatial mean [N, H, W, C] -> [N, C] (squeeze-excite) with samples larger than a window
// budget: the parts of its split reduction read only their positions of one sample; a vertex
// whose outputs spanned two samples gathered everything between them (6.9 MB in
// EfficientNet-B4 G16's first stage). Tile and fused modes agree.
TEST(Compiler, SpatialMeanReadsOneSampleAtATime) {
  Graph g("spatial_mean");
  Builder b(g);
  int x = b.variable("features", {3, 16, 16, 8});  // 8 KiB per sample
  int y = b.reduceMean(x, {1, 2}, false, "pooled");
  g.markOutput(y);
  const Target t = Target::small(16, 16 << 10);
  CompileOptions opts;
  opts.checkMemory = false;
  auto exe = std::make_shared<const Executable>(compile(g, t, opts));
  const i64 budget = t.bytesPerTile / 8;
  for (const ComputeSet& cs : exe->computeSets)
    for (const Vertex& v : cs.vertices)
      for (const Window& w : v.inputs) {
        if (w.buffer == x) {
          EXPECT_LE((w.end - w.begin) * 4, budget) << cs.name;
        }
      }
  std::vector<float> xv(3 * 16 * 16 * 8);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<float>((i * 7) % 13) / 13.f;
  std::vector<float> got[2];
  for (EngineMode mode : {EngineMode::Fused, EngineMode::Tile}) {
    Engine e(exe, mode);
    e.writeTensor(x, xv.data(), xv.size() * 4);
    e.run();
    got[mode == EngineMode::Tile] = e.readFloats(y);
  }
  ASSERT_EQ(got[0].size(), 24u);
  for (size_t i = 0; i < got[0].size(); ++i) {
    double ref = 0;
    for (i64 q = 0; q < 256; ++q) ref += xv[static_cast<size_t>((i / 8) * 2048 + q * 8 + i % 8)];
    EXPECT_NEAR(got[0][i], ref / 256, 1e-5) << i;
    EXPECT_NEAR(got[1][i], got[0][i], 1e-6) << i;
  }
}

// A per-channel sum over many positions: hundreds of parts of a small output. Their partial
// rows are combined in groups (more than one combining set) so that no vertex gathers every
// part's row (here 256 x 64 B against a 1 KiB budget); tile mode still equals fused mode.
TEST(Compiler, ManyPartialRowsAreCombinedInGroups) {
  Graph g("channel_sum");
  Builder b(g);
  int x = b.variable("features", {4, 32, 32, 16});
  int y = b.reduceSum(x, {0, 1, 2}, false, "sums");
  g.markOutput(y);
  const Target t = Target::small(64, 8 << 10);
  CompileOptions opts;
  opts.checkMemory = false;
  auto exe = std::make_shared<const Executable>(compile(g, t, opts));
  const i64 budget = t.bytesPerTile / 8;
  int combiningSets = 0;
  for (const ComputeSet& cs : exe->computeSets) {
    combiningSets += cs.name.ends_with("/sum_partials");
    for (const Vertex& v : cs.vertices) {
      i64 bytes = 0;
      for (const Window& w : v.inputs) bytes += (w.end - w.begin) * 4;
      EXPECT_LE(bytes, budget) << cs.name << " on tile " << v.tile;
    }
  }
  EXPECT_GE(combiningSets, 2);
  std::vector<float> xv(4 * 32 * 32 * 16);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<float>((i * 7) % 13) / 13.f;
  std::vector<float> got[2];
  for (EngineMode mode : {EngineMode::Fused, EngineMode::Tile}) {
    Engine e(exe, mode);
    e.writeTensor(x, xv.data(), xv.size() * 4);
    e.run();
    got[mode == EngineMode::Tile] = e.readFloats(y);
  }
  ASSERT_EQ(got[0].size(), 16u);
  for (size_t c = 0; c < 16; ++c) {
    double ref = 0;
    for (size_t i = c; i < xv.size(); i += 16) ref += xv[i];
    EXPECT_NEAR(got[0][c], ref, 1e-5 * ref) << c;
    EXPECT_NEAR(got[1][c], got[0][c], 1e-5 * ref) << c;
  }
}

// A x B^T with B [512, 256] of 1 KiB rows (a dense layer read transposed) on 64 KiB tiles: with
// a linear output mapping a tile held a whole output row and gathered all of B (512 KiB). The
// output is blocked (a tile: a few columns of a block of rows), so a tile gathers its columns'
// B rows once for all its vertices plus its A rows; the product is unchanged in both modes.
TEST(Compiler, TransposedLargeWeightMatMulGathersAColumnBlockPerTile) {
  Graph g("dense_transposed");
  Builder b(g);
  int a = b.variable("a", {64, 256});
  int w = b.variable("w", {512, 256});
  int y = b.matmul(a, w, false, true, "y");
  g.markOutput(y);
  const Target t = Target::small(64, 64 << 10);
  CompileOptions opts;
  opts.checkMemory = false;
  auto exe = std::make_shared<const Executable>(compile(g, t, opts));
  for (const ComputeSet& cs : exe->computeSets) {
    std::map<int, std::set<std::tuple<int, i64, i64>>> windows;  // per tile, distinct windows
    for (const Vertex& v : cs.vertices)
      for (const Window& win : v.inputs)
        if (win.gather) windows[v.tile].insert({win.buffer, win.begin, win.end});
    for (const auto& [tile, ws] : windows) {
      i64 bytes = 0;
      for (const auto& [buffer, begin, end] : ws) bytes += (end - begin) * 4;
      EXPECT_LE(bytes, t.bytesPerTile) << cs.name << " on tile " << tile;
    }
  }
  std::vector<float> av(64 * 256), wv(512 * 256);
  for (size_t i = 0; i < av.size(); ++i) av[i] = static_cast<float>((i * 7) % 13) / 13.f - 0.5f;
  for (size_t i = 0; i < wv.size(); ++i) wv[i] = static_cast<float>((i * 5) % 11) / 11.f - 0.5f;
  std::vector<float> got[2];
  for (EngineMode mode : {EngineMode::Fused, EngineMode::Tile}) {
    Engine e(exe, mode);
    e.writeTensor(a, av.data(), av.size() * 4);
    e.writeTensor(w, wv.data(), wv.size() * 4);
    e.run();
    got[mode == EngineMode::Tile] = e.readFloats(y);
  }
  ASSERT_EQ(got[0].size(), 64u * 512);
  for (size_t i = 0; i < got[0].size(); i += 97) {
    double ref = 0;
    for (size_t k = 0; k < 256; ++k) ref += double(av[i / 512 * 256 + k]) * wv[i % 512 * 256 + k];
    EXPECT_NEAR(got[0][i], ref, 1e-4) << i;
  }
  for (size_t i = 0; i < got[0].size(); ++i) ASSERT_NEAR(got[1][i], got[0][i], 1e-4) << i;
}

// BERT's attention heads: [B, S, heads, d] -> [B, heads, S, d]. A tile's output slice covers a
// few rows s of one head, d elements apart by `heads * d` in x: one bounding window per vertex
// gathered `heads` times what the vertex reads (983 KB on a Mk2 tile for BERT-Large); the
// transpose now gathers each row's d elements.
TEST(Compiler, HeadTransposeGathersOnlyTheRowsItReads) {
  Graph g("heads");
  Builder b(g);
  const i64 B = 2, S = 64, heads = 16, d = 16;
  int x = b.variable("x", {B, S, heads, d});
  int y = b.transpose(x, {0, 2, 1, 3}, "y");
  g.markOutput(y);
  const Target t = Target::small(64, 64 << 10);
  CompileOptions opts;
  opts.checkMemory = false;
  auto exe = std::make_shared<const Executable>(compile(g, t, opts));
  for (const ComputeSet& cs : exe->computeSets) {
    std::map<int, i64> gathered, written;  // per tile, elements
    for (const Vertex& v : cs.vertices) {
      written[v.tile] += v.work.size();
      for (const Window& win : v.inputs)
        if (win.gather && !win.shared) gathered[v.tile] += win.end - win.begin;
    }
    for (const auto& [tile, n] : gathered)
      EXPECT_LE(n, 2 * written[tile]) << cs.name << " on tile " << tile;
  }
  std::vector<float> xv(static_cast<size_t>(B * S * heads * d));
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<float>(i % 1000) * 0.25f;
  std::vector<float> got[2];
  for (EngineMode mode : {EngineMode::Fused, EngineMode::Tile}) {
    Engine e(exe, mode);
    e.writeTensor(x, xv.data(), xv.size() * 4);
    e.run();
    got[mode == EngineMode::Tile] = e.readFloats(y);
  }
  ASSERT_EQ(got[0].size(), xv.size());
  for (i64 bb = 0; bb < B; ++bb)
    for (i64 h = 0; h < heads; ++h)
      for (i64 s = 0; s < S; ++s)
        for (i64 k = 0; k < d; ++k) {
          const size_t o = static_cast<size_t>(((bb * heads + h) * S + s) * d + k);
          const size_t i = static_cast<size_t>(((bb * S + s) * heads + h) * d + k);
          ASSERT_EQ(got[0][o], xv[i]) << o;
          ASSERT_EQ(got[1][o], xv[i]) << o;
        }
}

// Attention's dV = probs^T x dcontext: A [batch, K, M] read transposed. A vertex of output rows
// i0..i1 of one batch reads column run i0..i1 of every row k of A; one bounding window
// gathered all M columns of those rows (786 KB on a Mk2 tile for BERT-Large).
TEST(Compiler, TransposedOperandMatMulGathersOnlyTheColumnsItReads) {
  Graph g("dv");
  Builder b(g);
  const i64 batch = 4, K = 64, M = 64, N = 8;
  int p = b.variable("probs", {batch, K, M});
  int dc = b.variable("dcontext", {batch, K, N});
  int y = b.matmul(p, dc, true, false, "dv");
  g.markOutput(y);
  const Target t = Target::small(64, 64 << 10);
  CompileOptions opts;
  opts.checkMemory = false;
  auto exe = std::make_shared<const Executable>(compile(g, t, opts));
  for (const ComputeSet& cs : exe->computeSets) {
    std::map<int, i64> gathered, rows;  // per tile: elements of probs, output rows written
    for (const Vertex& v : cs.vertices) {
      rows[v.tile] += (v.work.size() + N - 1) / N;
      for (const Window& win : v.inputs)
        if (win.buffer == p && win.gather && !win.shared) gathered[v.tile] += win.end - win.begin;
    }
    for (const auto& [tile, n] : gathered)
      EXPECT_LE(n, 2 * K * (rows[tile] + 1)) << cs.name << " on tile " << tile;
  }
  std::vector<float> pv(static_cast<size_t>(batch * K * M)), dv(static_cast<size_t>(batch * K * N));
  for (size_t i = 0; i < pv.size(); ++i) pv[i] = static_cast<float>((i * 7) % 13) / 13.f - 0.5f;
  for (size_t i = 0; i < dv.size(); ++i) dv[i] = static_cast<float>((i * 5) % 11) / 11.f - 0.5f;
  std::vector<float> got[2];
  for (EngineMode mode : {EngineMode::Fused, EngineMode::Tile}) {
    Engine e(exe, mode);
    e.writeTensor(p, pv.data(), pv.size() * 4);
    e.writeTensor(dc, dv.data(), dv.size() * 4);
    e.run();
    got[mode == EngineMode::Tile] = e.readFloats(y);
  }
  ASSERT_EQ(got[0].size(), static_cast<size_t>(batch * M * N));
  for (i64 bt = 0; bt < batch; ++bt)
    for (i64 i = 0; i < M; ++i)
      for (i64 j = 0; j < N; ++j) {
        double ref = 0;
        for (i64 k = 0; k < K; ++k)
          ref += double(pv[static_cast<size_t>((bt * K + k) * M + i)]) *
                 dv[static_cast<size_t>((bt * K + k) * N + j)];
        const size_t o = static_cast<size_t>((bt * M + i) * N + j);
        ASSERT_NEAR(got[0][o], ref, 1e-4) << o;
        ASSERT_NEAR(got[1][o], got[0][o], 1e-4) << o;
      }
}

// BERT's decoder input gradient dy [R, V] x E [V, H]: E too large for a tile, so the sum over V
// is split into parts, and a part's vertex of many output rows needs the part's run of every dy
// row. One bounding window held whole dy rows (4.7 MB on a Mk2 tile for BERT-Large).
TEST(Compiler, SplitSumMatMulGathersOnlyItsPartOfEachRow) {
  Graph g("decoder_input_grad");
  Builder b(g);
  const i64 R = 16, V = 2048, H = 64;
  int dy = b.variable("dy", {R, V});
  int e = b.variable("e", {V, H});
  int y = b.matmul(dy, e, false, false, "dm");
  g.markOutput(y);
  const Target t = Target::small(16, 64 << 10);
  CompileOptions opts;
  opts.checkMemory = false;
  auto exe = std::make_shared<const Executable>(compile(g, t, opts));
  bool split = false;
  for (const ComputeSet& cs : exe->computeSets)
    for (const Vertex& v : cs.vertices) {
      if (v.red.size() == 0 || v.red.size() == V) continue;
      split = true;
      const i64 rows = (v.work.end - 1) / H - v.work.begin / H + 1;
      i64 read = 0;
      for (const Window& win : v.inputs)
        if (win.buffer == dy) read += win.end - win.begin;
      EXPECT_LE(read, 2 * rows * v.red.size()) << cs.name << " on tile " << v.tile;
    }
  EXPECT_TRUE(split) << "the sum over V should be split into parts";
  std::vector<float> dv(static_cast<size_t>(R * V)), ev(static_cast<size_t>(V * H));
  for (size_t i = 0; i < dv.size(); ++i) dv[i] = static_cast<float>((i * 7) % 13) / 13.f - 0.5f;
  for (size_t i = 0; i < ev.size(); ++i) ev[i] = static_cast<float>((i * 5) % 11) / 11.f - 0.5f;
  std::vector<float> got[2];
  for (EngineMode mode : {EngineMode::Fused, EngineMode::Tile}) {
    Engine en(exe, mode);
    en.writeTensor(dy, dv.data(), dv.size() * 4);
    en.writeTensor(e, ev.data(), ev.size() * 4);
    en.run();
    got[mode == EngineMode::Tile] = en.readFloats(y);
  }
  ASSERT_EQ(got[0].size(), static_cast<size_t>(R * H));
  for (i64 i = 0; i < R; ++i)
    for (i64 j = 0; j < H; ++j) {
      double ref = 0;
      for (i64 k = 0; k < V; ++k)
        ref += double(dv[static_cast<size_t>(i * V + k)]) * ev[static_cast<size_t>(k * H + j)];
      const size_t o = static_cast<size_t>(i * H + j);
      ASSERT_NEAR(got[0][o], ref, 1e-3) << o;
      ASSERT_NEAR(got[1][o], got[0][o], 1e-3) << o;
    }
}

// A sum split into many parts over wide output slices (BERT's weight gradients: 38 parts of
// 2.8K columns, 445 KB of partial rows gathered by one combining tile): the combine runs a run
// of columns at a time, one compute set each, so no set gathers much more than a window budget.
TEST(Compiler, WideSplitSumsAreCombinedARunOfColumnsAtATime) {
  Graph g("wide_split_sum");
  Builder b(g);
  const i64 M = 64, K = 2048, N = 64;
  int a = b.variable("a", {M, K});
  int w = b.variable("w", {K, N});
  int y = b.matmul(a, w, false, false, "y");
  g.markOutput(y);
  const Target t = Target::small(16, 64 << 10);
  CompileOptions opts;
  opts.checkMemory = false;
  auto exe = std::make_shared<const Executable>(compile(g, t, opts));
  int combineSets = 0;
  for (const ComputeSet& cs : exe->computeSets) {
    if (cs.phase != 1) continue;
    ++combineSets;
    std::map<int, i64> gathered;  // per tile, bytes of partial rows
    for (const Vertex& v : cs.vertices)
      for (const Window& win : v.inputs)
        if (win.gather && !win.shared) gathered[v.tile] += (win.end - win.begin) * 4;
    for (const auto& [tile, bytes] : gathered)
      EXPECT_LE(bytes, 2 * t.bytesPerTile / 8) << cs.name << " on tile " << tile;
  }
  EXPECT_GT(combineSets, 1);
  std::vector<float> av(static_cast<size_t>(M * K)), wv(static_cast<size_t>(K * N));
  for (size_t i = 0; i < av.size(); ++i) av[i] = static_cast<float>((i * 7) % 13) / 13.f - 0.5f;
  for (size_t i = 0; i < wv.size(); ++i) wv[i] = static_cast<float>((i * 5) % 11) / 11.f - 0.5f;
  std::vector<float> got[2];
  for (EngineMode mode : {EngineMode::Fused, EngineMode::Tile}) {
    Engine en(exe, mode);
    en.writeTensor(a, av.data(), av.size() * 4);
    en.writeTensor(w, wv.data(), wv.size() * 4);
    en.run();
    got[mode == EngineMode::Tile] = en.readFloats(y);
  }
  ASSERT_EQ(got[0].size(), static_cast<size_t>(M * N));
  for (size_t i = 0; i < got[0].size(); ++i) ASSERT_NEAR(got[1][i], got[0][i], 1e-3) << i;
}

// BERT's dense layers backward (dx = dy x W^T over 4,096 features, dW = x^T dy over 1,024
// tokens) and forward: both output dimensions wide and a long sum. The row- and column-blocked
// plans gathered whole operand rows (442 KB of f16 on a Mk2 tile for BERT-Large's FFN input
// gradient, 434 KB of partials and dy rows for its weight gradient); blocks of rows x columns
// over a part of the sum gather rb + cb rows of the part. Scaled down to a 64-tile target: what a
// tile gathers in a compute set stays near the 3-D optimum, and tile mode equals fused mode.
TEST(Compiler, WideMatMulsAreBlockedOverRowsColumnsAndTheSum) {
  struct Case {
    const char* name;
    i64 aRows, aCols, bRows, bCols;
    bool transA, transB;
  };
  const Case cases[] = {{"dx = dy W^T", 256, 1024, 256, 1024, false, true},
                        {"dW = x^T dy", 256, 256, 256, 1024, true, false},
                        {"y = x W", 256, 256, 256, 1024, false, false}};
  const Target t = Target::small(64, 64 << 10);
  for (const Case& c : cases) {
    Graph g("wide_matmul");
    Builder b(g);
    int a = b.variable("a", {c.aRows, c.aCols});
    int w = b.variable("w", {c.bRows, c.bCols});
    int y = b.matmul(a, w, c.transA, c.transB, "y");
    g.markOutput(y);
    CompileOptions opts;
    opts.checkMemory = false;
    auto exe = std::make_shared<const Executable>(compile(g, t, opts));
    i64 most = 0;
    for (const ComputeSet& cs : exe->computeSets) {
      std::map<int, i64> gathered;  // per tile
      for (const Vertex& v : cs.vertices)
        for (const Window& win : v.inputs)
          if (win.gather && !win.shared)
            gathered[v.tile] += (win.end - win.begin) * sizeOf(exe->buffers[win.buffer].dtype);
      for (const auto& [tile, bytes] : gathered) most = std::max(most, bytes);
    }
    // Blocks of a tile's share of the MACs, m x n x k = MNK / T: m k + k n operands at best,
    // 2 (MNK / T)^(2/3) f32 elements (82.6 KB here; the row and column plans gathered 135-262 KB).
    const double macs = static_cast<double>(c.aRows * c.aCols) * (c.transB ? c.bRows : c.bCols);
    const double best = 2 * std::pow(macs / static_cast<double>(t.numTiles), 2.0 / 3.0) * 4;
    EXPECT_LE(static_cast<double>(most), 1.3 * best)
        << c.name << ": the most a tile gathers in a compute set";
    std::vector<float> av(static_cast<size_t>(c.aRows * c.aCols)),
        wv(static_cast<size_t>(c.bRows * c.bCols));
    for (size_t i = 0; i < av.size(); ++i) av[i] = static_cast<float>((i * 7) % 13) / 13.f - 0.5f;
    for (size_t i = 0; i < wv.size(); ++i) wv[i] = static_cast<float>((i * 5) % 11) / 11.f - 0.5f;
    std::vector<float> got[2];
    for (EngineMode mode : {EngineMode::Fused, EngineMode::Tile}) {
      Engine en(exe, mode);
      en.writeTensor(a, av.data(), av.size() * 4);
      en.writeTensor(w, wv.data(), wv.size() * 4);
      en.run();
      got[mode == EngineMode::Tile] = en.readFloats(y);
    }
    for (size_t i = 0; i < got[0].size(); ++i)
      ASSERT_NEAR(got[1][i], got[0][i], 1e-3) << c.name << " element " << i;
  }
}

// The most one tile gathers in one compute set of `exe` (bytes in the buffers' stored types),
// over the compute sets whose name contains `what`.
i64 mostGatheredOnATile(const Executable& exe, const std::string& what = "") {
  i64 most = 0;
  for (const ComputeSet& cs : exe.computeSets) {
    if (cs.name.find(what) == std::string::npos) continue;
    std::map<int, i64> gathered;  // per tile
    for (const Vertex& v : cs.vertices)
      for (const Window& win : v.inputs)
        if (win.gather && !win.shared)
          gathered[v.tile] += (win.end - win.begin) * sizeOf(exe.buffers[win.buffer].dtype);
    for (const auto& [tile, bytes] : gathered) most = std::max(most, bytes);
  }
  return most;
}

// A wide embedding gradient (BERT-Large's word embeddings: 1,024 updates of 1,024 columns into
// 30,912 rows) is scattered in column blocks, as popops' multiUpdateAdd splits the table over
// columns: a tile reads the updates' columns of its group, not whole update rows, and holds no
// partial tables. The sums are f32 in index order rounded once, as the fused kernel takes them:
// tile mode equals fused mode and the exact sums (the values are multiples of 1/8) to the bit.
TEST(Compiler, WideEmbeddingGradientsAreScatteredInColumnBlocks) {
  const i64 rows = 512, width = 128, lookups = 256;
  const Target t = Target::small(64, 64 << 10);
  Graph g("embedding_gradient");
  Builder b(g);
  const int upd = b.variable("updates", {lookups, width}, DType::F16);
  const int idx = b.variable("indices", {lookups}, DType::I32);
  Attrs at;
  at.set("rows", rows);
  at.set("partials", std::string("f16"));
  const int y = ops::add(g, "scatter_add", {upd, idx}, at, {"table_grad"})[0];
  g.markOutput(y);
  CompileOptions opts;
  opts.checkMemory = false;
  auto exe = std::make_shared<const Executable>(compile(g, t, opts));
  bool columns = false;
  for (const ComputeSet& cs : exe->computeSets)
    columns |= cs.name.find("scatter_columns") != std::string::npos;
  ASSERT_TRUE(columns) << "the scatter should be planned in column blocks";
  for (const Buffer& buf : exe->buffers)
    EXPECT_EQ(buf.name.find("partials"), std::string::npos) << buf.name;
  // A tile's updates: 16 groups of 8 columns (4 KB of f16) and the indices (1 KB); its rows read
  // back (8 rows, 2 KB). The split over the indices gathered 43 whole update rows (11 KB) and held
  // 6 partial slices (12 KB).
  EXPECT_LE(mostGatheredOnATile(*exe), lookups * width * 2 / 16 + lookups * 4)
      << "the most a tile gathers in a compute set";

  std::vector<float> uv(static_cast<size_t>(lookups * width));
  for (size_t i = 0; i < uv.size(); ++i) uv[i] = static_cast<float>(int(i * 7919 % 17) - 8) / 8.f;
  std::vector<std::int32_t> iv(static_cast<size_t>(lookups));
  for (i64 k = 0; k < lookups; ++k)
    iv[static_cast<size_t>(k)] = static_cast<std::int32_t>((k * 37) % 61);
  std::vector<float> exact(static_cast<size_t>(rows * width), 0.f);
  for (i64 k = 0; k < lookups; ++k)
    for (i64 j = 0; j < width; ++j)
      exact[static_cast<size_t>(iv[static_cast<size_t>(k)] * width + j)] +=
          uv[static_cast<size_t>(k * width + j)];
  for (EngineMode mode : {EngineMode::Fused, EngineMode::Tile}) {
    Engine en(exe, mode);
    en.writeTensor("updates", uv);
    en.writeTensor(idx, iv.data(), iv.size() * 4);
    en.run();
    const std::vector<float> got = en.readFloats(y);
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(got[i], exact[i]) << engineModeName(mode) << " element " << i;
  }
}

// The lookup itself (gather) of a wide table: split over the table's rows, every part wrote a
// partial of the whole output (BERT-Large: about 210 parts, 299,596 B of partials and 299,008 B of
// table rows on one Mk2 tile). In column groups a tile copies its own rows column-block-major,
// reads one run of its group's block and writes the lookups' columns of its group (exact
// copies: tile mode equals fused mode to the bit).
TEST(Compiler, WideEmbeddingLookupsAreGatheredInColumnBlocks) {
  const i64 rows = 1024, width = 128, lookups = 256;
  const Target t = Target::small(64, 64 << 10);
  Graph g("embedding_lookup");
  Builder b(g);
  const int table = b.variable("table", {rows, width}, DType::F16);
  const int idx = b.variable("indices", {lookups}, DType::I32);
  Attrs at;
  at.set("partials", std::string("f16"));
  const int y = ops::add(g, "gather", {table, idx}, at, {"looked_up"})[0];
  g.markOutput(y);
  CompileOptions opts;
  opts.checkMemory = false;
  auto exe = std::make_shared<const Executable>(compile(g, t, opts));
  bool columns = false;
  for (const ComputeSet& cs : exe->computeSets)
    columns |= cs.name.find("lookup_columns") != std::string::npos;
  ASSERT_TRUE(columns) << "the lookup should be planned in column blocks";
  // A tile's table slice (4 KB) and the indices (1 KB) at most; the split over rows gathered 64
  // whole table rows (16 KB) per part and held 16 partial slices of the output.
  EXPECT_LE(mostGatheredOnATile(*exe), rows * width * 2 / t.numTiles + lookups * 4)
      << "the most a tile gathers in a compute set";
  i64 partialBytes = 0;
  for (const Buffer& buf : exe->buffers)
    if (buf.name.find("partials") != std::string::npos) partialBytes += buf.bytes();
  // Partials of a tile: its group's columns of the lookups (4 KB), where the split held 16
  // partial slices of the output (16 KB).
  EXPECT_LE(partialBytes / t.numTiles, rows * width * 2 / t.numTiles) << "partials per tile";

  std::vector<float> tv(static_cast<size_t>(rows * width));
  for (size_t i = 0; i < tv.size(); ++i)
    tv[i] = static_cast<float>(int(i * 7919 % 997) - 498) / 64.f;
  std::vector<std::int32_t> iv(static_cast<size_t>(lookups));
  for (i64 k = 0; k < lookups; ++k)
    iv[static_cast<size_t>(k)] = static_cast<std::int32_t>((k * 389) % rows);
  for (EngineMode mode : {EngineMode::Fused, EngineMode::Tile}) {
    Engine en(exe, mode);
    en.writeTensor("table", tv);
    en.writeTensor(idx, iv.data(), iv.size() * 4);
    en.run();
    const std::vector<float> got = en.readFloats(y);
    for (i64 k = 0; k < lookups; ++k)
      for (i64 j = 0; j < width; ++j)
        ASSERT_EQ(got[static_cast<size_t>(k * width + j)],
                  tv[static_cast<size_t>(iv[static_cast<size_t>(k)] * width + j)])
            << engineModeName(mode) << " lookup " << k << " column " << j;
  }
}

// Attention's batched matmuls (scores Q K^T, context P V, 32 heads of [512, 64] in BERT-Large):
// a vertex reads its batch of B whole, and a tile whose slice of the output crossed a batch
// boundary gathered two batches (139,776 B of V on an Mk2 tile). The output is mapped a block
// of tiles per batch, so every tile reads B of one batch only.
TEST(Compiler, BatchedMatMulsReadOneBatchOfBPerTile) {
  struct Case {
    const char* name;
    Shape a, b;
    bool transB;
  };
  // f16 B batches of 8 KB: within an 8 KB window budget stored, not as f32 (the scores were
  // split by rows of B's batches, the context over k).
  const Case cases[] = {{"scores = Q K^T", {6, 64, 64}, {6, 64, 64}, true},
                        {"context = P V", {6, 64, 64}, {6, 64, 64}, false}};
  const Target t = Target::small(64, 64 << 10);
  for (const Case& c : cases) {
    Graph g("attention");
    Builder b(g);
    const int a = b.variable("a", c.a, DType::F16);
    const int w = b.variable("b", c.b, DType::F16);
    const int y = b.matmul(a, w, false, c.transB, "y");
    g.markOutput(y);
    CompileOptions opts;
    opts.checkMemory = false;
    auto exe = std::make_shared<const Executable>(compile(g, t, opts));
    const i64 batchElems = c.b[1] * c.b[2];
    for (const ComputeSet& cs : exe->computeSets) {
      std::map<int, std::set<i64>> batches;  // per tile, the batches of B it reads
      for (const Vertex& v : cs.vertices)
        for (const Window& win : v.inputs)
          if (win.buffer == w)
            for (i64 bt = win.begin / batchElems; bt <= (win.end - 1) / batchElems; ++bt)
              batches[v.tile].insert(bt);
      for (const auto& [tile, read] : batches)
        EXPECT_EQ(read.size(), 1u) << c.name << ": " << cs.name << " on tile " << tile;
    }
    std::vector<float> av(static_cast<size_t>(numElements(c.a))),
        wv(static_cast<size_t>(numElements(c.b)));
    for (size_t i = 0; i < av.size(); ++i) av[i] = static_cast<float>(int(i * 7 % 9) - 4) / 8.f;
    for (size_t i = 0; i < wv.size(); ++i) wv[i] = static_cast<float>(int(i * 5 % 9) - 4) / 8.f;
    std::vector<float> got[2];
    for (EngineMode mode : {EngineMode::Fused, EngineMode::Tile}) {
      Engine en(exe, mode);
      en.writeTensor("a", av);
      en.writeTensor("b", wv);
      en.run();
      got[mode == EngineMode::Tile] = en.readFloats(y);
    }
    // Sums of 64 multiples of 1/64 below 16 in magnitude: exact in f16, so both modes agree.
    const i64 m = c.a[1], k = c.a[2], n = c.transB ? c.b[1] : c.b[2];
    for (i64 bt = 0; bt < c.a[0]; ++bt)
      for (i64 i = 0; i < m; ++i)
        for (i64 j = 0; j < n; ++j) {
          double exact = 0;
          for (i64 kk = 0; kk < k; ++kk)
            exact +=
                av[static_cast<size_t>((bt * m + i) * k + kk)] *
                wv[static_cast<size_t>(c.transB ? (bt * n + j) * k + kk : (bt * k + kk) * n + j)];
          const size_t o = static_cast<size_t>((bt * m + i) * n + j);
          ASSERT_EQ(got[0][o], exact) << c.name << " fused element " << o;
          ASSERT_EQ(got[1][o], exact) << c.name << " tile element " << o;
        }
  }
}

// Layer norm's row statistics ([R] f32) are small: mapped linearly they sat on a few tiles, each
// vertex reading 64 rows of x (BERT-Large: 131,072 B of f16 rows gathered on one Mk2 tile).
// Spread in blocks of rows that fit a quarter of a window budget (here one 2 KB row: 64 KB tiles),
// a statistics vertex reads that many rows.
TEST(Compiler, LayerNormStatisticsAreSpreadOverTheTiles) {
  const i64 rows = 256, width = 512;
  const Target t = Target::small(64, 64 << 10);
  Graph g("layer_norm");
  Builder b(g);
  const int x = b.variable("x", {rows, width});
  const int gamma = b.variable("gamma", {width});
  const int beta = b.variable("beta", {width});
  const int y =
      ops::add(g, "layer_norm", {x, gamma, beta}, Attrs{{"eps", 1e-5}}, {"y", "mean", "rstd"})[0];
  g.markOutput(y);
  CompileOptions opts;
  opts.checkMemory = false;
  auto exe = std::make_shared<const Executable>(compile(g, t, opts));
  i64 most = 0;  // x bytes a statistics vertex reads
  for (const ComputeSet& cs : exe->computeSets)
    if (cs.phase == 0)
      for (const Vertex& v : cs.vertices)
        for (const Window& win : v.inputs)
          if (win.buffer == x) most = std::max(most, (win.end - win.begin) * 4);
  EXPECT_LE(most, std::max<i64>(rows / t.numTiles, (64 << 10) / 8 / 4 / (width * 4)) * width * 4)
      << "x rows a statistics vertex reads";
  std::vector<float> xv(static_cast<size_t>(rows * width)), gv(width, 1.5f), bv(width, 0.25f);
  for (size_t i = 0; i < xv.size(); ++i)
    xv[i] = static_cast<float>(int(i * 7919 % 101) - 50) / 16.f;
  std::vector<float> got[2];
  for (EngineMode mode : {EngineMode::Fused, EngineMode::Tile}) {
    Engine en(exe, mode);
    en.writeTensor("x", xv);
    en.writeTensor("gamma", gv);
    en.writeTensor("beta", bv);
    en.run();
    got[mode == EngineMode::Tile] = en.readFloats(y);
  }
  for (size_t i = 0; i < got[0].size(); ++i)
    ASSERT_NEAR(got[1][i], got[0][i], 1e-5) << "element " << i;
}

// BERT's max-logit metric: max over the vocabulary of [rows, V] logits, the sum split over V. A
// part's vertex of many rows reads its part of each row; one bounding window held whole rows
// (4.7 MB of BERT-Large's logits on one tile).
TEST(Compiler, SplitRowReductionGathersOnlyItsPartOfEachRow) {
  Graph g("max_logit");
  Builder b(g);
  const i64 R = 64, V = 4096;
  int x = b.variable("logits", {R, V});
  int y = b.reduce("max", x, {1}, false, "max_logit");
  g.markOutput(y);
  const Target t = Target::small(16, 64 << 10);
  CompileOptions opts;
  opts.checkMemory = false;
  auto exe = std::make_shared<const Executable>(compile(g, t, opts));
  bool split = false;
  for (const ComputeSet& cs : exe->computeSets)
    for (const Vertex& v : cs.vertices) {
      if (cs.phase != 0 || v.red.size() == V) continue;
      split = true;
      i64 read = 0;
      for (const Window& win : v.inputs) read += win.end - win.begin;
      EXPECT_LE(read, 2 * v.work.size() * v.red.size()) << cs.name << " on tile " << v.tile;
    }
  EXPECT_TRUE(split) << "the max over V should be split into parts";
  std::vector<float> xv(static_cast<size_t>(R * V));
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<float>((i * 7919) % 10007) * 0.01f;
  std::vector<float> got[2];
  for (EngineMode mode : {EngineMode::Fused, EngineMode::Tile}) {
    Engine en(exe, mode);
    en.writeTensor(x, xv.data(), xv.size() * 4);
    en.run();
    got[mode == EngineMode::Tile] = en.readFloats(y);
  }
  ASSERT_EQ(got[0].size(), static_cast<size_t>(R));
  for (i64 r = 0; r < R; ++r) {
    const float ref = *std::max_element(xv.begin() + r * V, xv.begin() + (r + 1) * V);
    ASSERT_EQ(got[0][static_cast<size_t>(r)], ref) << r;
    ASSERT_EQ(got[1][static_cast<size_t>(r)], ref) << r;
  }
}

// Forty layers' biases of one size, each with its optimizer state named after it: a weight and
// its state share one mapping (their update stays tile-local), while different weights start on
// different tiles (one start tile per size piled every layer's biases onto the same tiles).
TEST(Compiler, EqualSizedWeightsSpreadOverTilesWithTheirState) {
  Graph g("many_biases");
  Builder b(g);
  const int layers = 40;
  std::vector<int> weights, state;
  int sum = b.input("x", {256});
  for (int l = 0; l < layers; ++l) {
    const std::string name = "layer_" + std::to_string(l) + "/bias";
    weights.push_back(b.variable(name, {256}));
    state.push_back(b.variable(name + "/momentum", {256}));
    sum = b.binary("add", sum, b.binary("add", weights.back(), state.back()));
  }
  g.markOutput(sum);
  const Target t = Target::small(64, 64 << 10);
  const Executable exe = compile(g, t);
  std::map<int, i64> perTile;
  for (int l = 0; l < layers; ++l) {
    const auto &mw = exe.mapping[weights[l]], &ms = exe.mapping[state[l]];
    ASSERT_EQ(mw.size(), ms.size());
    for (size_t i = 0; i < mw.size(); ++i) {
      EXPECT_EQ(mw[i].tile, ms[i].tile) << l;
      EXPECT_EQ(mw[i].begin, ms[i].begin) << l;
      perTile[mw[i].tile] += (mw[i].end - mw[i].begin) * 8;
    }
  }
  // 80 KiB of variables over 64 tiles: 1.25 KiB per tile on average; all on 4 tiles: 20 KiB.
  i64 most = 0;
  for (const auto& [tile, bytes] : perTile) most = std::max(most, bytes);
  EXPECT_GT(perTile.size(), 32u);
  EXPECT_LE(most, 6 * 1024);
}

// reduceBounds (the input span a reduction vertex reads) walks the digits of its ranges instead
// of scanning every index: the same bounds as the scan for every shape, axis set and range.
TEST(Compiler, ReduceBoundsEqualTheScanOfEveryIndex) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    kernels::ReduceShape s;
    const int rank = 1 + static_cast<int>(rng() % 4);
    for (int d = 0; d < rank; ++d) {
      s.inDims.push_back(1 + static_cast<i64>(rng() % 5));
      s.reduced.push_back(rng() % 2 == 0);
    }
    std::vector<i64> stride(static_cast<size_t>(rank), 1);
    for (int d = rank - 1; d-- > 0;) stride[d] = stride[d + 1] * s.inDims[d + 1];
    auto digitsOf = [&](i64 flat, bool reducedDims) {
      i64 idx = 0;
      for (int d = rank; d-- > 0;) {
        if (s.reduced[d] != reducedDims) continue;
        idx += (flat % s.inDims[d]) * stride[d];
        flat /= s.inDims[d];
      }
      return idx;
    };
    auto randomRange = [&](i64 n) {
      const i64 a = static_cast<i64>(rng() % n), b = static_cast<i64>(rng() % n);
      return Range{std::min(a, b), std::max(a, b) + 1};
    };
    const Range out = randomRange(s.outElems()), red = randomRange(s.reducedCount());
    i64 lo = std::numeric_limits<i64>::max(), hi = -1;
    for (i64 o = out.begin; o < out.end; ++o)
      for (i64 q = red.begin; q < red.end; ++q) {
        lo = std::min(lo, digitsOf(o, false) + digitsOf(q, true));
        hi = std::max(hi, digitsOf(o, false) + digitsOf(q, true));
      }
    const Range b = reduceBounds(s, out, red);
    EXPECT_EQ(b.begin, lo) << trial;
    EXPECT_EQ(b.end, hi + 1) << trial;
  }
}

// broadcastBounds (the span of a broadcast operand that a vertex reads) walks the digits of its
// output range instead of scanning every element: the same bounds as the scan for every pair of
// broadcast-compatible shapes and every range.
TEST(Compiler, BroadcastBoundsEqualTheScanOfEveryElement) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    const int rank = 1 + static_cast<int>(rng() % 5);
    std::vector<i64> aDims, bDims;
    for (int d = 0; d < rank; ++d) {
      const i64 n = 1 + static_cast<i64>(rng() % 5);
      aDims.push_back(rng() % 3 == 0 ? 1 : n);
      bDims.push_back(rng() % 3 == 0 ? 1 : n);
    }
    const kernels::BroadcastShape s = kernels::BroadcastShape::make(aDims, bDims);
    const i64 n = s.outElems();
    const i64 x = static_cast<i64>(rng() % n), y = static_cast<i64>(rng() % n);
    const Range out{std::min(x, y), std::max(x, y) + 1};
    for (const auto& [strides, dims] :
         {std::pair{s.aStrides, aDims}, std::pair{s.bStrides, bDims}}) {
      const i64 inElems = numElements(dims);
      i64 lo = inElems, hi = 0;
      for (i64 o = out.begin; o < out.end; ++o) {
        i64 rem = o, idx = 0;
        for (int d = s.rank - 1; d >= 0; --d) {
          idx += (rem % s.outDims[d]) * strides[d];
          rem /= s.outDims[d];
        }
        lo = std::min(lo, idx);
        hi = std::max(hi, idx + 1);
      }
      if (inElems == n) lo = out.begin, hi = out.end;  // same shape: element for element
      const Range b = broadcastBounds(s, strides, out, inElems);
      EXPECT_EQ(b.begin, lo) << trial;
      EXPECT_EQ(b.end, hi) << trial;
    }
  }
}

// A channel-blocked convolution: each tile computes a block of pixels for a few output
// channels. Its vertices read one window of input rows per tile (the rows of all its output
// rows), not one per output row (a 3x3 window's rows overlap those of the next output row).
TEST(Compiler, ConvolutionTileGathersItsInputRowsOnce) {
  Graph g("strided_conv");
  Builder b(g);
  int x = b.variable("features", {2, 14, 14, 64});
  int w = b.variable("conv_weight", {96, 3, 3, 64});  // 216 KiB: channel-blocked
  int y = b.conv2d(x, w, Conv2dOptions::make(2, 1), "conv");
  g.markOutput(b.reduceMean(y, {0, 1, 2, 3}, false, "loss"));
  CompileOptions opts;
  opts.checkMemory = false;
  // 256 KiB tiles: a tile of the split gathers about 50 KB, under two window budgets, so the
  // convolution keeps the split (not the blocked plan over input channels).
  const Executable exe = compile(g, Target::small(64, 256 << 10), opts);
  const int conv = exe.graph.get("conv");
  ASSERT_LT(exe.mapping[conv].size(), 64u * 2 * 7 * 7 * 96);
  ASSERT_GT(exe.mapping[conv].size(), 64u);  // channel-blocked: several slices per tile
  for (const ComputeSet& cs : exe.computeSets) {
    if (exe.graph.op(cs.op).kind != OpKind::Conv2d) continue;
    std::map<int, std::set<std::pair<i64, i64>>> windows;
    for (const Vertex& v : cs.vertices)
      for (const Window& win : v.inputs)
        if (win.buffer == x && win.gather) windows[v.tile].insert({win.begin, win.end});
    for (const auto& [tile, ws] : windows) EXPECT_EQ(ws.size(), 1u) << "tile " << tile;
  }
}

// BERT-Large's masked-LM loss on a Mk2: 2 packs x 78 masked slots over the 30,522-word
// vocabulary (19 MB of logits, a row 122 KB). The loss terms [156] fill two tiles; a vertex per
// slice of them gathered 78 rows (9.5 MB) onto each. The rows are now split into parts: no
// vertex of the loss gathers more than its window budget or one row, the step fits the tiles,
// and both engine modes give the same loss and gradient.
TEST(Compiler, MaskedLmLossSplitsItsRowsOverTiles) {
  constexpr i64 kRows = 156, kVocab = 30522;
  Graph g("masked_lm");
  Builder b(g);
  const int logits = b.variable("logits", {kRows, kVocab});
  const int labels = b.input("labels", {kRows}, DType::I32);
  const int weights = b.input("weights", {kRows});
  const int terms = ops::add(g, "masked_lm_loss", {logits, labels, weights}, {}, {"terms"})[0];
  const int loss = b.reduceSum(terms, {0}, false, "loss");
  g.markOutput(loss);
  const int grad = appendBackward(g, loss, {logits}).grads.at(logits);
  g.markOutput(grad);
  auto exe = std::make_shared<const Executable>(compile(g, Target::mk2()));  // checks memory
  const i64 rowBytes = kVocab * 4, budget = exe->target.bytesPerTile / 8;
  for (const ComputeSet& cs : exe->computeSets) {
    if (exe->graph.op(cs.op).kind != ops::kindNamed("masked_lm_loss")) continue;
    for (const Vertex& v : cs.vertices)
      for (const Window& w : v.inputs) {
        if (w.buffer == logits) {
          EXPECT_LE((w.end - w.begin) * 4, std::max(budget, rowBytes)) << cs.name;
        }
      }
  }
  i64 worst = 0;
  for (const TileMemory& m : exe->tileMemory) worst = std::max(worst, m.total());
  EXPECT_LT(worst, 3 * rowBytes);

  std::vector<float> x(static_cast<size_t>(kRows * kVocab));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7919) % 1000) / 250.f - 2;
  std::vector<std::int32_t> lb(kRows);
  std::vector<float> wv(kRows);
  for (i64 p = 0; p < kRows; ++p) {
    lb[p] = static_cast<std::int32_t>((p * 7717) % kVocab);
    wv[p] = p % 5 == 4 ? 0.0f : 1.0f;  // unused slots
  }
  float l[2];
  std::vector<float> dx[2];
  for (EngineMode mode : {EngineMode::Fused, EngineMode::Tile}) {
    const int m = mode == EngineMode::Tile;
    Engine e(exe, mode);
    e.writeTensor(logits, x.data(), x.size() * 4);
    e.connectInput(labels, lb.data());
    e.connectInput(weights, wv.data());
    e.connectOutput(loss, &l[m]);
    e.run();
    dx[m] = e.readFloats(grad);
  }
  EXPECT_GT(l[0], 1.0f);
  EXPECT_NEAR(l[1], l[0], 1e-6 * l[0]);
  ASSERT_EQ(dx[0].size(), dx[1].size());
  for (size_t i = 0; i < dx[0].size(); ++i) ASSERT_NEAR(dx[1][i], dx[0][i], 1e-9) << i;
}

TEST(Compiler, InPlaceUpdatesRunRightAfterTheirLastDependency) {
  Graph g("two_layers");
  Builder b(g);
  int x = b.input("x", {4, 8});
  int w1 = b.variable("w1", {8, 8}), w2 = b.variable("w2", {8, 2});
  int h = b.relu(b.matmul(x, w1, false, false, "h"), "relu");
  int loss = b.reduceMean(b.matmul(h, w2, false, false, "out"), {0, 1}, false, "loss");
  g.markOutput(loss);
  auto grads = appendBackward(g, loss, {w1, w2}).grads;
  int lr = b.input("lr", {});
  appendSgdUpdate(g, grads, lr, SgdOptions{});
  Executable exe = compile(g, Target::small(16, 1 << 20));
  // w2's update (its write, apply_update) follows every op that reads w2 (the backward matmul
  // for dh among them) but runs before the gradient of w1 is computed, not at the end of the
  // step.
  int updW2 = -1;
  for (const Op& op : exe.graph.ops())
    if (op.kind == OpKind::ApplyUpdate && op.inputs[0] == w2) updW2 = op.id;
  ASSERT_GE(updW2, 0);
  for (const Op& op : exe.graph.ops())
    for (int t : op.inputs) {
      EXPECT_FALSE(op.id != updW2 && t == w2 && op.id > updW2) << op.id;
    }
  EXPECT_LT(updW2, exe.graph.tensor(grads.at(w1)).producer);
}

TEST(Compiler, OverflowNamesTileBytesCapacityAndOccupants) {
  // 16 tiles x 48 KiB cannot hold a batch of 8 (the images alone are 64 KiB).
  const Target tiny = Target::small(16, 48 * 1024);
  try {
    compile(convGraph(8), tiny);
    FAIL() << "expected the graph not to fit";
  } catch (const CompileError& e) {
    std::string m = e.what();
    EXPECT_GE(e.tile(), 0);
    EXPECT_GT(e.bytes(), e.capacity());
    EXPECT_EQ(e.capacity(), 48 * 1024);
    EXPECT_NE(m.find("tile " + std::to_string(e.tile()) + " needs " + std::to_string(e.bytes())),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("has 49152 B"), std::string::npos) << m;
    EXPECT_NE(m.find("Largest occupants"), std::string::npos) << m;
    // The occupants are named tensors with their sizes.
    EXPECT_TRUE(m.find("'images'") != std::string::npos || m.find("'conv1'") != std::string::npos ||
                m.find("'relu1'") != std::string::npos || m.find("'conv2'") != std::string::npos)
        << m;
  }
  // The same graph fits a larger target, and the report says so.
  Executable ok = compile(convGraph(8), Target::small(64, 256 * 1024));
  auto r = ok.report();
  EXPECT_TRUE(r["memory"]["fits"].get<bool>());
  EXPECT_LE(r["memory"]["max_tile_bytes"].get<i64>(), 256 * 1024);
}

TEST(Compiler, ReportCountsVerticesComputeSetsAndExchange) {
  Executable exe = compile(convGraph(2), Target::small(16, 1 << 20));
  auto r = exe.report();
  EXPECT_EQ(r["program"]["compute_sets"].get<size_t>(), exe.computeSets.size());
  EXPECT_GT(r["program"]["vertices"].get<i64>(), static_cast<i64>(exe.computeSets.size()));
  EXPECT_GT(r["program"]["exchange_bytes"].get<i64>(), 0);  // conv halos and weights move
  EXPECT_EQ(r["memory"]["histogram_tenths_of_capacity"].size(), 10u);
  EXPECT_NE(exe.program.describe(exe).find("Execute(conv1/conv2d"), std::string::npos);
  // The fused engine's kernel rule, fixed at compile time for this host's ISA.
  EXPECT_EQ(r["host_kernel_rule"].get<std::string>(),
            kernels::fused::describe(kernels::fused::activeKernelRule()));
  EXPECT_EQ(r["host_kernel_rule"].get<std::string>().find("isa "), 0u);
}

TEST(Compiler, DeviceIterationsRepeatTheStep) {
  // D iterations in one run equal D separate runs (a counter that accumulates its input).
  Graph g("accumulate");
  Builder b(g);
  int w = b.variable("w", {4});
  int x = b.input("x", {4});
  int lr = b.input("lr", {});
  int loss = b.reduceSum(b.mul(w, x), {0}, false, "loss");
  g.markOutput(loss);
  auto grads = appendBackward(g, loss, {w}).grads;
  SgdOptions o;
  o.momentum = 0.0;
  appendSgdUpdate(g, grads, lr, o);
  CompileOptions co;
  co.deviceIterations = 3;
  auto exe3 = std::make_shared<Executable>(compile(g, Target::small(4, 1 << 16), co));
  auto exe1 = std::make_shared<Executable>(compile(g, Target::small(4, 1 << 16)));
  std::vector<float> xs = {1, 2, 3, 4, 2, 2, 2, 2, -1, 0, 1, 0};
  std::vector<float> lrs = {0.1f, 0.2f, 0.3f}, losses3(3), losses1(3);
  Engine e3(exe3), e1(exe1);
  for (Engine* e : {&e3, &e1}) {
    e->writeTensor("w", {1, 1, 1, 1});
    e->writeTensor("w/momentum", {0, 0, 0, 0});
  }
  e3.connectInput(exe3->graph.get("x"), xs.data());
  e3.connectInput(exe3->graph.get("lr"), lrs.data());
  e3.connectOutput(exe3->graph.get("loss"), losses3.data());
  e3.run();
  for (int i = 0; i < 3; ++i) {
    e1.connectInput(exe1->graph.get("x"), xs.data() + 4 * i);
    e1.connectInput(exe1->graph.get("lr"), lrs.data() + i);
    e1.connectOutput(exe1->graph.get("loss"), losses1.data() + i);
    e1.run();
  }
  EXPECT_EQ(losses1, losses3);
  EXPECT_EQ(e1.readFloats("w"), e3.readFloats("w"));
}

TEST(Engine, UnconnectedInputIsAClearError) {
  Graph g("g");
  Builder b(g);
  int x = b.input("images", {2, 2});
  g.markOutput(b.relu(x, "y"));
  auto exe = std::make_shared<Executable>(compile(std::move(g), Target::small(2, 1 << 16)));
  Engine e(exe);
  try {
    e.run();
    FAIL();
  } catch (const std::runtime_error& err) {
    EXPECT_NE(std::string(err.what()).find("'images' f32[2,2] is not connected"), std::string::npos)
        << err.what();
  }
}

}  // namespace
}  // namespace ipu
