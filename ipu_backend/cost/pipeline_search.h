// Automatic split points: given a training graph (a model at a micro-batch and precision), a
// schedule and S IPUs, find the S - 1 split points that fit every IPU and minimise the modeled
// time of the slowest stage (forward + backward of one micro-batch, cost_model.h), one stage per
// IPU. No published configuration had this: Graphcore's were placed by hand.
//
// Method: one compile of the unpipelined step (memory unchecked) prices every forward op
// together with its backward ops (Op::gradientOf); the compiler plans each op from its own
// tensors, so a stage's time is the sum over its ops. A dynamic programme over the candidate cut
// points finds the partition with the smallest slowest stage (ties: the earliest cuts, so the
// answer is deterministic). The winner is compiled as a pipeline: an IPU that overflows rules out
// its stage's range of ops, and every range containing it, as that stage or an earlier one
// (earlier stages stash more micro-batches), and the search runs again.
#pragma once

#include <string>
#include <vector>

#include "ipu_backend/compiler/pipeline.h"
#include "ipu_backend/cost/pipeline_cost.h"

namespace ipu::cost {

struct AutoSplit {
  std::vector<std::string> splits;
  pipeline::PipelinedExecutable pipeline;
  PipelineStepCost cost;
  double slowestStageSeconds = 0;  // the objective: max over stages of forward + backward
  int placementsCompiled = 0;      // pipelines compiled until one fitted
  std::string describe() const;    // placement, each IPU's memory, each stage's modeled time
};

// `options`: the schedule, G, R (its splits and stage map are ignored: one stage per IPU; the
// memory is always checked).
// `candidates`: output names after which a stage may end (empty: after every forward op).
// Throws pipeline::PipelineError when no placement fits.
AutoSplit autoSplit(const Graph& training, const Target& ipu, int ipus,
                    const pipeline::PipelineOptions& options, const CostOptions& cost = {},
                    const std::vector<std::string>& candidates = {});

// The modeled time of each stage (forward + backward of one micro-batch) of a compiled pipeline:
// the quantity autoSplit minimises the largest of.
std::vector<double> stageSeconds(const PipelineStepCost& c);

}  // namespace ipu::cost
