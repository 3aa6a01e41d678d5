// Compiler: tile mapping covers every tensor, memory overflow errors, compile report, programs.
#include <gtest/gtest.h>

#include "ipu_backend/compiler/autodiff.h"
#include "ipu_backend/compiler/compiler.h"
#include "ipu_backend/engine/engine.h"
#include "ipu_backend/ir/builder.h"

namespace ipu {
namespace {

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
