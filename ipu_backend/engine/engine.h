// The engine runs a compiled Executable on the CPU host, in one of two modes over the same
// program:
//   Tile  - each vertex reads and writes only its own tile's arena; exchanges are real copies
//           between arenas; reference kernels. The literal IPU semantics, slow, for verification.
//   Fused - the vertices of one op run as one host kernel (oneDNN or vectorised loops) on whole
//           tensors. Fast; agrees with Tile within floating-point tolerance.
// All memory is allocated once, at construction: nothing is allocated per step.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ipu_backend/compiler/executable.h"
#include "ipu_backend/replication/collective.h"

namespace ipu {

enum class EngineMode { Tile, Fused };
std::string_view engineModeName(EngineMode m);
EngineMode parseEngineMode(std::string_view s);  // "tile" | "fused"; throws on anything else

class Engine {
 public:
  // `replica`: which replica this engine runs and the Collective joining it to the others
  // (needed when the program has cross-replica ops for more than one replica).
  // `microBatchesInterleaved`: the caller runs segments of the program for several
  // micro-batches in turn (a pipeline stage's forward of micro-batch m+1 before its backward of
  // m), so no host fusion may keep state from a forward kernel to its backward.
  Engine(std::shared_ptr<const Executable> exe, EngineMode mode = EngineMode::Fused,
         ReplicaContext replica = {}, bool microBatchesInterleaved = false);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const Executable& executable() const { return *exe_; }
  EngineMode mode() const { return mode_; }

  // Host access to a tensor's current contents. Variables (weights, optimizer state) and graph
  // outputs always hold their value; other activations only while live, as on the device (their
  // tile memory is reused): mark a tensor as a graph output to read it after run().
  // `bytes` must equal the tensor's size.
  void writeTensor(int tensor, const void* data, size_t bytes);
  void readTensor(int tensor, void* data, size_t bytes) const;
  void writeTensor(const std::string& name, const std::vector<float>& v);
  std::vector<float> readFloats(const std::string& name) const;
  std::vector<float> readFloats(int tensor) const;

  // Host streams. Inputs are read and outputs written at run(): the host buffer holds one
  // tensor per device iteration, back to back (deviceIterations x tensor bytes). The pointer
  // must stay valid until the next connect.
  void connectInput(int tensor, const void* data);
  void connectOutput(int tensor, void* data);

  // Seed of the stochastic rounding of 16-bit writes (ops with stochastic_rounding=true): the
  // rounding of step s is a pure function of (seed, s, tensor, element), hence deterministic
  // and the same in both modes.
  void setRoundingSeed(std::uint64_t seed);

  // Bytes the engine holds for tensors: fused mode's arena (activations share memory by
  // lifetime; variables, streams and outputs have their own) plus its 16-bit scratch, or tile
  // mode's tile arenas. Kernel workspaces (oneDNN scratchpads, reorders) are not counted.
  std::int64_t tensorMemoryBytes() const;

  // Fused mode: ops whose work another op's kernel does in the same pass (batch norm + ReLU,
  // their backward, residual add + ReLU; engine/host_fusion.h). 0 in tile mode.
  int hostFusedOps() const;

  // Fused mode: host seconds per op, summed over the run() calls made while profiling is on
  // (indexed by op id; empty until profiling is enabled). Tile mode does not profile.
  // cpuTime: the process's CPU seconds (every thread's) instead of wall seconds, which on a
  // loaded host time-slicing inflates far less.
  void setProfiling(bool on, bool cpuTime = false);
  const std::vector<double>& opSeconds() const;

  // Runs the program once: deviceIterations training steps (each of accumulationSteps
  // micro-batches when the program accumulates gradients).
  void run();
  // Runs the compute sets of ops [firstOp, endOp) once, without host streams (the caller writes
  // their inputs and reads their results): one segment of a pipelined program
  // (ipu_backend/engine/pipeline_engine.h). `step` keys the stochastic rounding as run()'s
  // step counter would (one count per micro-batch and one per update part).
  void runSegment(int firstOp, int endOp, std::uint64_t step);

 private:
  struct Impl;
  std::shared_ptr<const Executable> exe_;
  EngineMode mode_;
  ReplicaContext replica_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ipu
