#include "ipu_backend/cost/pipeline_cost.h"

#include <algorithm>
#include <array>
#include <set>

namespace ipu::cost {

using pipeline::Phase;
using pipeline::Schedule;

PipelineStepCost estimatePipelineStep(const pipeline::PipelinedExecutable& pe,
                                      const CostOptions& opts) {
  PipelineStepCost c;
  const int N = pe.stages, G = pe.options.accumulation;
  std::vector<double> segmentSeconds(pe.segments.size(), 0.0);
  // The same split into compute, exchange and sync.
  std::vector<std::array<double, 3>> segmentParts(pe.segments.size(), {0.0, 0.0, 0.0});
  std::vector<double> syncSeconds(pe.programs.size(), 0.0);
  for (const auto& prog : pe.programs) {
    const Executable& exe = *prog.exe;
    const StepCost sc = estimateStep(exe, opts);
    std::vector<int> segmentOfOp(exe.graph.ops().size(), -1);
    for (size_t s = 0; s < pe.segments.size(); ++s)
      if (pe.segments[s].ipu == prog.ipu)
        for (int o = pe.segments[s].firstOp; o < pe.segments[s].endOp; ++o)
          segmentOfOp[static_cast<size_t>(o)] = static_cast<int>(s);
    for (size_t k = 0; k < exe.computeSets.size(); ++k)
      if (const int s = segmentOfOp[static_cast<size_t>(exe.computeSets[k].op)]; s >= 0) {
        const ComputeSetCost& cs = sc.computeSets[k];
        const double hz = exe.target.clockHz;
        segmentSeconds[static_cast<size_t>(s)] += cs.total() / hz;
        auto& parts = segmentParts[static_cast<size_t>(s)];
        parts[0] += cs.computeCycles / hz;
        parts[1] += cs.exchangeCycles / hz;
        parts[2] += cs.syncCycles / hz;
      }
    syncSeconds[static_cast<size_t>(prog.ipu)] = exe.target.syncCycles / exe.target.clockHz;
  }
  for (int s = 0; s < N; ++s) {
    c.forwardSeconds.push_back(segmentSeconds[static_cast<size_t>(pe.forwardSegment[s])]);
    c.backwardSeconds.push_back(segmentSeconds[static_cast<size_t>(pe.backwardSegment[s])]);
    if (c.forwardSeconds[s] + c.backwardSeconds[s] >
        c.forwardSeconds[c.slowestStage] + c.backwardSeconds[c.slowestStage])
      c.slowestStage = s;
  }
  // Per IPU per micro-batch: stash traffic and the bytes it sends to other IPUs (once per
  // tensor and receiving IPU).
  const size_t I = pe.programs.size();
  c.stashSeconds.assign(I, 0.0);
  c.copySeconds.assign(I, 0.0);
  std::vector<double> fwdCopy(I, 0.0), bwdCopy(I, 0.0);
  std::set<std::pair<int, int>> crossings;
  for (const auto& tr : pe.transfers) {
    if (tr.fromSegment < 0) continue;
    const auto& from = pe.segments[static_cast<size_t>(tr.fromSegment)];
    const auto& to = pe.segments[static_cast<size_t>(tr.toSegment)];
    if (from.phase == Phase::Update || to.phase == Phase::Update) continue;
    const Target& t = pe.programs[static_cast<size_t>(to.ipu)].exe->target;
    if (from.phase == Phase::Forward && to.phase == Phase::Backward)
      c.stashSeconds[static_cast<size_t>(to.ipu)] +=
          2.0 * static_cast<double>(tr.bytes) /
          (t.tileMemBytesPerCycle * static_cast<double>(t.numTiles) * t.clockHz);
    if (tr.interIpu && crossings.insert({tr.tensor, to.ipu}).second) {
      const double s = static_cast<double>(tr.bytes) / t.ipuLinkBytesPerSec;
      c.copySeconds[static_cast<size_t>(from.ipu)] += s;
      (from.phase == Phase::Forward ? fwdCopy : bwdCopy)[static_cast<size_t>(from.ipu)] += s;
    }
  }
  c.ipuSeconds.assign(I, 0.0);
  c.ipuComputeSeconds.assign(I, 0.0);
  c.ipuExchangeSeconds.assign(I, 0.0);
  c.ipuSyncSeconds.assign(I, 0.0);
  for (int s = 0; s < N; ++s) {
    const size_t ipu = static_cast<size_t>(pe.stageIpu[s]);
    c.ipuSeconds[ipu] += c.forwardSeconds[s] + c.backwardSeconds[s];
    for (int seg : {pe.forwardSegment[s], pe.backwardSegment[s]}) {
      const auto& parts = segmentParts[static_cast<size_t>(seg)];
      c.ipuComputeSeconds[ipu] += parts[0];
      c.ipuExchangeSeconds[ipu] += parts[1];
      c.ipuSyncSeconds[ipu] += parts[2];
    }
  }
  for (size_t i = 0; i < I; ++i) c.ipuSeconds[i] += c.stashSeconds[i];
  const double sync = syncSeconds.empty() ? 0.0 : syncSeconds[0];
  const double slowestIpu = *std::max_element(c.ipuSeconds.begin(), c.ipuSeconds.end());
  const double slowestCopy = *std::max_element(c.copySeconds.begin(), c.copySeconds.end());
  switch (pe.options.schedule) {
    case Schedule::Grouped:
      c.cycles = G + 2 * N - 2;
      c.cycleSeconds = slowestIpu + slowestCopy + (N > 1 ? sync : 0.0);
      break;
    case Schedule::Interleaved: {
      c.cycles = G + N - 1;
      double ticks = 0;
      for (int parity = 0; parity < 2; ++parity) {
        double tick = 0, copy = 0;
        for (int s = 0; s < N; ++s) {
          const bool forward = s % 2 == parity;
          const size_t ipu = static_cast<size_t>(pe.stageIpu[s]);
          tick = std::max(tick, (forward ? c.forwardSeconds[s] : c.backwardSeconds[s]) +
                                    c.stashSeconds[ipu] / 2);
          copy = std::max(copy, forward ? fwdCopy[ipu] : bwdCopy[ipu]);
        }
        ticks += tick + copy + (N > 1 ? sync : 0.0);
      }
      c.cycleSeconds = ticks;
      break;
    }
    case Schedule::Sequential: {
      c.cycles = G;
      double sum = 0;
      for (double s : c.ipuSeconds) sum += s;
      for (double s : c.copySeconds) sum += s;
      c.cycleSeconds = sum + 2.0 * (N - 1) * sync;
      break;
    }
  }
  std::vector<double> updatePerIpu(I, 0.0);
  for (int u : pe.updateSegments)
    updatePerIpu[static_cast<size_t>(pe.segments[static_cast<size_t>(u)].ipu)] +=
        segmentSeconds[static_cast<size_t>(u)];
  c.updateSeconds = *std::max_element(updatePerIpu.begin(), updatePerIpu.end());
  const Target& t0 = pe.programs.front().exe->target;
  c.updateSeconds += static_cast<double>(pe.interIpuBytesPerStep()) / t0.ipuLinkBytesPerSec;
  // Off-chip optimizer state: read and written back once per step by every IPU at once over
  // its streaming-memory link (no measured figure: the host link's bandwidth stands in).
  i64 offChip = 0;
  for (const pipeline::IpuProgram& p : pe.programs)
    offChip = std::max(offChip, p.offChipStateBytes);
  c.offChipStateSeconds = 2.0 * static_cast<double>(offChip) / t0.hostLinkBytesPerSec;
  c.updateSeconds += c.offChipStateSeconds;
  c.rampFraction = c.cycles > 0 ? static_cast<double>(c.cycles - G) / c.cycles : 0.0;
  c.seconds = c.cycles * c.cycleSeconds + c.updateSeconds;
  return c;
}

nlohmann::json PipelineStepCost::report() const {
  return {{"forward_seconds", forwardSeconds},
          {"backward_seconds", backwardSeconds},
          {"ipu_seconds", ipuSeconds},
          {"ipu_compute_seconds", ipuComputeSeconds},
          {"ipu_exchange_seconds", ipuExchangeSeconds},
          {"ipu_sync_seconds", ipuSyncSeconds},
          {"stash_seconds", stashSeconds},
          {"copy_seconds", copySeconds},
          {"cycles", cycles},
          {"cycle_seconds", cycleSeconds},
          {"ramp_fraction", rampFraction},
          {"update_seconds", updateSeconds},
          {"off_chip_state_seconds", offChipStateSeconds},
          {"seconds", seconds},
          {"slowest_stage", slowestStage}};
}

}  // namespace ipu::cost
