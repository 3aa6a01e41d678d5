// Runs one replica of a pipelined program (ipu_backend/compiler/pipeline.h) on the host: one
// Engine per IPU (fused or tile mode), the schedule's cycles stage by stage over the
// micro-batches, then the update part once per step. What a segment reads from another one goes
// through real buffers keyed by micro-batch: the inter-IPU copies and the activation stashes
// (FIFOs whose occupancy the engine measures). With several replicas each replica's engine joins
// the same Collective (threads or MPI, as replication does): the update parts run in the same
// order on every replica, so the collectives pair up.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ipu_backend/compiler/pipeline.h"
#include "ipu_backend/engine/engine.h"

namespace ipu::pipeline {

class PipelineEngine {
 public:
  PipelineEngine(std::shared_ptr<const PipelinedExecutable> pe, EngineMode mode = EngineMode::Fused,
                 ReplicaContext replica = {});

  const PipelinedExecutable& executable() const { return *pe_; }
  Engine& engine(int ipu) { return *engines_.at(static_cast<size_t>(ipu)); }

  // Host inputs of the training graph by name: G micro-batch tensors back to back per run().
  void connectInput(const std::string& name, const void* data);
  // Outputs of the training graph: G slots per run() (an output of the update part fills slot
  // G - 1, as Engine does).
  void connectOutput(const std::string& name, void* data);
  // A variable (weight, state) on the IPU that holds it.
  void writeTensor(const std::string& name, const std::vector<float>& v);
  void writeTensor(const std::string& name, const void* data, size_t bytes);
  std::vector<float> readFloats(const std::string& name) const;

  void setRoundingSeed(std::uint64_t seed);

  // One training step: the schedule's cycles over G micro-batches, then the weight update.
  void run();

  // Per stage s: the most micro-batches whose activations (from the forward of s, for the
  // backward of s) were held at once beyond the live one, measured while running: the schedule's
  // stash depth.
  const std::vector<int>& measuredStashDepth() const { return stashDepth_; }

 private:
  void runSegment(int segment, int microBatch);
  std::pair<int, int> locate(const std::string& name) const;  // (IPU, program tensor)

  std::shared_ptr<const PipelinedExecutable> pe_;
  std::vector<std::unique_ptr<Engine>> engines_;
  std::vector<const void*> inputs_;  // per training-graph tensor
  std::vector<void*> outputs_;       // per training-graph tensor
  // In-flight values: (transfer, micro-batch) -> bytes (micro-batch -1: an update's reader).
  std::map<std::pair<size_t, int>, std::vector<std::byte>> buffers_;
  std::vector<std::vector<size_t>> transfersFrom_, transfersTo_;  // per segment
  std::vector<int> stashDepth_;
  std::vector<int> inFlight_;  // per transfer
  std::uint64_t step_ = 0;
};

}  // namespace ipu::pipeline
