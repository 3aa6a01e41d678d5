// Per-step time of a pipelined replica (ipu_backend/compiler/pipeline.h) from the cost model of
// each IPU's program (cost_model.h):
//   * every segment (a stage's forward or backward for one micro-batch, the update part) is the
//     sum of its compute sets' compute + exchange + sync;
//   * an IPU that hosts several stages runs them one after another;
//   * inter-IPU copies (PopART's C fragments) run every cycle on every IPU in parallel: per
//     cycle, the largest number of bytes an IPU sends per micro-batch over its IPU-Links
//     (Target::ipuLinkBytesPerSec) plus one sync;
//   * activation stashes: each stashed tensor is written into its FIFO and read back once per
//     micro-batch at the tile memory bandwidth (the IPU's tiles x tileMemBytesPerCycle);
//   * grouped: every cycle each IPU runs its stages' forward and backward (of different
//     micro-batches) and the copies; G + 2N - 2 cycles, PopART's G + P - 1 with P = 2N - 1
//     stages after autodiff (ramp-up and ramp-down P - 1 cycles each). The longest stage
//     bounds the cycle;
//   * interleaved: a cycle is two ticks, each IPU running a forward in one and a backward in the
//     other (by the parity of its stage), every tick as long as its slowest IPU, copies after
//     each tick; G + N - 1 cycles;
//   * sequential: no overlap: per micro-batch every stage forward and backward in turn with a
//     copy at every boundary; G micro-batches;
//   * the update part once per step after ramp-down: the slowest IPU's update ops (the cross-
//     replica collectives inside it are priced by the cost model as for replication), plus,
//     with the optimizer state off-chip, its bytes read and written at the host link's rate.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "ipu_backend/compiler/pipeline.h"
#include "ipu_backend/cost/cost_model.h"

namespace ipu::cost {

struct PipelineStepCost {
  std::vector<double> forwardSeconds, backwardSeconds;  // per stage, one micro-batch
  std::vector<double> ipuSeconds;  // per IPU: its stages' forward + backward + stash traffic
  // The compute, exchange and sync parts of the forward + backward in ipuSeconds (per IPU).
  std::vector<double> ipuComputeSeconds, ipuExchangeSeconds, ipuSyncSeconds;
  std::vector<double> stashSeconds;  // per IPU: stash traffic per micro-batch
  std::vector<double> copySeconds;   // per IPU: inter-IPU bytes it sends per micro-batch
  int cycles = 0;                    // pipeline cycles per step (ramp-up to ramp-down)
  double cycleSeconds = 0;           // one cycle in the steady state
  double rampFraction = 0;           // share of cycles not in the steady state
  double updateSeconds = 0;          // once per step (off-chip state traffic included)
  double offChipStateSeconds = 0;    // optimizer state streamed in and out, slowest IPU
  double seconds = 0;                // one step: cycles x cycleSeconds + update
  int slowestStage = 0;              // argmax of forward + backward
  nlohmann::json report() const;
};

PipelineStepCost estimatePipelineStep(const pipeline::PipelinedExecutable& pe,
                                      const CostOptions& opts = {});

}  // namespace ipu::cost
