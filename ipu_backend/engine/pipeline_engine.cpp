#include "ipu_backend/engine/pipeline_engine.h"

#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

namespace ipu::pipeline {

PipelineEngine::PipelineEngine(std::shared_ptr<const PipelinedExecutable> pe, EngineMode mode,
                               ReplicaContext replica)
    : pe_(std::move(pe)) {
  for (const IpuProgram& p : pe_->programs)
    engines_.push_back(std::make_unique<Engine>(p.exe, mode, replica,
                                                /*microBatchesInterleaved=*/true));
  const size_t nTensors = pe_->graph.tensors().size();
  inputs_.assign(nTensors, nullptr);
  outputs_.assign(nTensors, nullptr);
  transfersFrom_.resize(pe_->segments.size());
  transfersTo_.resize(pe_->segments.size());
  for (size_t k = 0; k < pe_->transfers.size(); ++k) {
    const Transfer& t = pe_->transfers[k];
    if (t.fromSegment >= 0) transfersFrom_[static_cast<size_t>(t.fromSegment)].push_back(k);
    transfersTo_[static_cast<size_t>(t.toSegment)].push_back(k);
  }
  stashDepth_.assign(static_cast<size_t>(pe_->stages), 0);
  inFlight_.assign(pe_->transfers.size(), 0);
}

std::pair<int, int> PipelineEngine::locate(const std::string& name) const {
  const int t = pe_->graph.find(name);
  if (t >= 0)
    for (const IpuProgram& p : pe_->programs)
      if (auto it = p.localOf.find(t);
          it != p.localOf.end() && pe_->graph.tensor(t).kind == TensorKind::Variable)
        return {p.ipu, it->second};
  throw std::invalid_argument(
      fmt::format("pipeline '{}': no variable named '{}' on any IPU", pe_->graph.name(), name));
}

void PipelineEngine::connectInput(const std::string& name, const void* data) {
  const int t = pe_->graph.find(name);
  if (t < 0 || pe_->graph.tensor(t).kind != TensorKind::Input)
    throw std::invalid_argument(
        fmt::format("pipeline '{}': '{}' is not a host input", pe_->graph.name(), name));
  inputs_[static_cast<size_t>(t)] = data;
}

void PipelineEngine::connectOutput(const std::string& name, void* data) {
  const int t = pe_->graph.find(name);
  const auto& outs = pe_->graphOutputs;
  if (t < 0 || std::find(outs.begin(), outs.end(), t) == outs.end())
    throw std::invalid_argument(
        fmt::format("pipeline '{}': '{}' is not a graph output", pe_->graph.name(), name));
  outputs_[static_cast<size_t>(t)] = data;
}

void PipelineEngine::writeTensor(const std::string& name, const std::vector<float>& v) {
  const auto [ipu, local] = locate(name);
  engines_[static_cast<size_t>(ipu)]->writeTensor(
      pe_->programs[static_cast<size_t>(ipu)].exe->graph.tensor(local).name, v);
}

void PipelineEngine::writeTensor(const std::string& name, const void* data, size_t bytes) {
  const auto [ipu, local] = locate(name);
  engines_[static_cast<size_t>(ipu)]->writeTensor(local, data, bytes);
}

std::vector<float> PipelineEngine::readFloats(const std::string& name) const {
  const auto [ipu, local] = locate(name);
  return engines_[static_cast<size_t>(ipu)]->readFloats(local);
}

void PipelineEngine::setRoundingSeed(std::uint64_t seed) {
  for (auto& e : engines_) e->setRoundingSeed(seed);
}

void PipelineEngine::runSegment(int segment, int microBatch) {
  const Segment& seg = pe_->segments[static_cast<size_t>(segment)];
  const IpuProgram& prog = pe_->programs[static_cast<size_t>(seg.ipu)];
  Engine& e = *engines_[static_cast<size_t>(seg.ipu)];
  const int G = pe_->options.accumulation;
  const bool update = seg.phase == Phase::Update;
  const int slot = update ? G - 1 : microBatch;
  // Receives: host inputs of this micro-batch, copies and stashes from other segments.
  for (size_t k : transfersTo_[static_cast<size_t>(segment)]) {
    const Transfer& tr = pe_->transfers[k];
    const Tensor& T = pe_->graph.tensor(tr.tensor);
    const int local = prog.localOf.at(tr.tensor);
    if (tr.fromSegment < 0) {
      const void* in = inputs_[static_cast<size_t>(tr.tensor)];
      if (!in)
        throw std::runtime_error(
            fmt::format("pipeline: input stream '{}' {}{} is not connected "
                        "(call connectInput)",
                        T.name, dtypeName(T.dtype), shapeStr(T.shape)));
      e.writeTensor(local, static_cast<const std::byte*>(in) + slot * T.bytes(),
                    static_cast<size_t>(T.bytes()));
      continue;
    }
    auto it = buffers_.find({k, update ? -1 : microBatch});
    if (it == buffers_.end())
      throw std::logic_error(
          fmt::format("pipeline: the {} of stage {} (micro-batch {}) runs before '{}' reached it",
                      phaseName(seg.phase), seg.stage, microBatch, T.name));
    e.writeTensor(local, it->second.data(), it->second.size());
    if (!update) {
      buffers_.erase(it);
      --inFlight_[k];
    }
  }
  e.runSegment(seg.firstOp, seg.endOp, step_ + static_cast<std::uint64_t>(update ? G : microBatch));
  // Sends: every reader's copy of what this segment produced, and the graph's outputs.
  std::map<int, std::vector<std::byte>> produced;
  for (int t : seg.sends) {
    std::vector<std::byte>& bytes = produced[t];
    bytes.resize(static_cast<size_t>(pe_->graph.tensor(t).bytes()));
    e.readTensor(prog.localOf.at(t), bytes.data(), bytes.size());
    if (void* out = outputs_[static_cast<size_t>(t)])
      std::memcpy(static_cast<std::byte*>(out) + slot * static_cast<i64>(bytes.size()),
                  bytes.data(), bytes.size());
  }
  for (size_t k : transfersFrom_[static_cast<size_t>(segment)]) {
    const Transfer& tr = pe_->transfers[k];
    const bool toUpdate = pe_->segments[static_cast<size_t>(tr.toSegment)].phase == Phase::Update;
    buffers_[{k, toUpdate ? -1 : microBatch}] = produced.at(tr.tensor);
    if (toUpdate) continue;
    ++inFlight_[k];
    const Segment& to = pe_->segments[static_cast<size_t>(tr.toSegment)];
    if (seg.phase == Phase::Forward && to.phase == Phase::Backward && to.stage == seg.stage)
      stashDepth_[static_cast<size_t>(seg.stage)] =
          std::max(stashDepth_[static_cast<size_t>(seg.stage)], inFlight_[k] - 1);
  }
}

void PipelineEngine::run() {
  const PipelinedExecutable& pe = *pe_;
  const auto cycles = scheduleCycles(pe.options.schedule, pe.stages, pe.options.accumulation,
                                     pe.forwardSegment, pe.backwardSegment);
  for (const auto& cycle : cycles)
    for (const SegmentRun& r : cycle) runSegment(r.segment, r.microBatch);
  // The weight update once, after ramp-down.
  for (int u : pe.updateSegments) runSegment(u, -1);
  for (auto it = buffers_.begin(); it != buffers_.end();)
    it = it->first.second == -1 ? buffers_.erase(it) : std::next(it);
  if (!buffers_.empty())
    throw std::logic_error(
        fmt::format("pipeline: {} values were sent but never read in a step", buffers_.size()));
  step_ += static_cast<std::uint64_t>(pe.options.accumulation) + 1;
}

}  // namespace ipu::pipeline
