// Pipelining: one replica spans several IPUs. The forward ops are cut into stages at split points
// (Graphcore's `pipeline_splits`, or layer counts as `layers_per_ipu`), every backward op goes
// to the stage of the forward op it differentiates (Op::gradientOf) and every update op to the
// stage of the weight it writes; a stage -> IPU map may put several stages on one IPU.
//
// Each IPU gets its own program: the ops of its stages cut out of the (replicated, lowered)
// training graph, compiled and tile-memory checked on one IPU on its own (a CompileError names
// the IPU). Its ops form segments that the pipeline schedule runs per micro-batch: the forward
// of a stage, the backward of a stage, and once per step the update ops (runs of consecutive
// update ops on one IPU). A tensor a segment reads from another segment is an input of the
// reader's program: from another IPU it is an inter-IPU copy (IPU-Links), from the same IPU's
// forward it is an activation stash, a FIFO of the schedule's depth that is planned in that
// IPU's memory as the variable `<tensor>/stash`.
//
// Schedules (TensorFlow's IPU pipelining; facts in ../shared/docs/PIPELINING_FACTS.md):
//   grouped (default)  forwards of a cycle together, then backwards; cycles G + 2N - 2;
//                      G must be a multiple of L = 2N and at least L; stash depth 2(N-1-s)
//   interleaved        each IPU alternates one forward and one backward; cycles G + N - 1
//                      (two passes each); L = N; stash depth N-1-s; refuses two stages on one
//                      IPU in training
//   sequential         one micro-batch through every stage and back at a time, G cycles; no
//                      rule on G; no stash
// The weight update runs once per step, after ramp-down.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ipu_backend/compiler/compiler.h"
#include "ipu_backend/compiler/recompute.h"

namespace ipu::pipeline {

// A placement or schedule the pipeline cannot run, found before anything runs.
class PipelineError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// An IPU of the pipeline whose tile memory overflows: the CompileError of its program (the tile,
// its bytes and occupants), which IPU and which stages.
class IpuDoesNotFit : public CompileError {
 public:
  IpuDoesNotFit(const CompileError& e, const std::string& msg, int ipu, std::vector<int> stages)
      : CompileError(msg, e.tile(), e.bytes(), e.capacity()),
        ipu_(ipu),
        stages_(std::move(stages)) {
    withPartial(e.partial());
  }
  int ipu() const { return ipu_; }
  const std::vector<int>& stages() const { return stages_; }

 private:
  int ipu_;
  std::vector<int> stages_;
};

enum class Schedule { Grouped, Interleaved, Sequential };
std::string_view scheduleName(Schedule s);
Schedule parseSchedule(std::string_view s);  // "grouped" | "interleaved" | "sequential"

struct PipelineOptions {
  // Stage boundaries in forward order: stage k ends after the last forward op with an output
  // named splits[k] or starting with splits[k] + "/", "_" or "." (a layer's name prefix, e.g.
  // "stage2_unit1", "features.2.1"). N = splits + 1.
  std::vector<std::string> splits;
  // Stage -> IPU (several stages may share one IPU); empty: stage s on IPU s.
  std::vector<int> stageIpu;
  int ipus = 0;  // IPUs per replica; 0: as many as the map uses
  Schedule schedule = Schedule::Grouped;
  int accumulation = 1;  // G: micro-batches per weight update
  int replicas = 1;      // R: data-parallel copies of the whole pipeline
  bool shardOptimizerState = false;
  // Gradient accumulators in the weight's dtype (replication::ReplicationOptions; Graphcore's
  // BERT: PopART's default accum_type, f16 for f16 weights).
  bool accumulateInWeightDType = false;
  bool checkMemory = true;  // false: plan and report every IPU, even one that overflows
  // false: stop every IPU's compile at its tile memory (a fit verdict; price the exchange with
  // cost::ExchangeModel::Planned). Such a pipeline cannot run.
  bool planExchanges = true;
  // Recomputation (Graphcore's "recompute all forward pipeline stages"): every stage but the
  // last runs its forward again at the start of its backward, from the tensors that cross the
  // stage boundaries (its inputs, and its outputs where its backward reads them) and the
  // explicit `checkpoints` (tensor names of the forward). Only those are stashed; the rest of a
  // stage's activations live from its recomputation to its backward. Same bits as without.
  bool recompute = false;
  std::vector<std::string> checkpoints;
  // Optimizer state in streaming memory (Graphcore's `offload_weight_update_variables`, BERT on
  // POD16): the variables only the update reads and writes (optimizer slots, weight averages)
  // are planned as usual but not counted in the tile memory the verdict checks; the update
  // streams them in and out once per step (priced by cost::estimatePipelineStep). The
  // streaming buffers of the update itself are not modeled.
  bool optimizerStateOffChip = false;
};

// Whether a forward op's output `name` is covered by split point `split` (equal, or `split`
// followed by '/', '_' or '.').
bool splitMatches(const std::string& name, const std::string& split);

// Graphcore's `layers_per_ipu`: layer names in forward order (each a tensor-name prefix) and the
// number of layers per stage -> the split points. Throws PipelineError when the counts do not
// add up to the layers.
std::vector<std::string> splitsFromLayerCounts(const std::vector<std::string>& layers,
                                               const std::vector<int>& layersPerStage);

// The schedule's overlap length L and the smallest accumulation count it accepts for N stages
// (1 for sequential), and the activation stash depth of forward stage s.
int overlapLength(Schedule s, int stages);
int smallestAccumulation(Schedule s, int stages);
int stashDepth(Schedule s, int stages, int stage);
// Refuses G or a stage -> IPU map the schedule does not run, naming the rule and the smallest
// valid G.
void checkSchedule(Schedule s, int stages, const std::vector<int>& stageIpu, int accumulation);

enum class Phase { Forward, Backward, Update };
std::string_view phaseName(Phase p);

// One unit of work of the schedule: a stage's forward or backward for micro-batch m (or the
// update part for m = -1).
struct SegmentRun {
  int segment = 0;
  int microBatch = 0;
};
// The runs of a step in host order, grouped in pipeline cycles (ramp-up, steady state,
// ramp-down; the update runs are not included). `forward[s]` / `backward[s]` are the segment ids
// of stage s.
std::vector<std::vector<SegmentRun>> scheduleCycles(Schedule s, int stages, int accumulation,
                                                    const std::vector<int>& forward,
                                                    const std::vector<int>& backward);

struct Segment {
  Phase phase = Phase::Forward;
  int stage = -1;  // -1: an update run
  int ipu = 0;
  int firstOp = 0, endOp = 0;  // ops [firstOp, endOp) of the IPU's program
  // Tensors (global ids) the segment reads from other segments (written before it runs) and
  // those it produces for other segments (read after it runs).
  std::vector<int> receives, sends;
};

struct IpuProgram {
  int ipu = 0;
  std::vector<int> stages;
  std::shared_ptr<const Executable> exe;
  std::vector<int> globalOf;             // program tensor id -> training-graph tensor id
  std::unordered_map<int, int> localOf;  // training-graph tensor id -> program tensor id
  i64 stashBytes = 0;                    // FIFO slots of this IPU's activation stashes
  i64 peakTileBytes = 0;                 // fullest tile (stashes included)
  int worstTile = 0;
  i64 offChipStateBytes = 0;  // optimizer state kept in streaming memory (not in peakTileBytes)
};

struct Transfer {
  int tensor = -1;  // training-graph id
  int fromSegment = 0, toSegment = 0;
  i64 bytes = 0;
  bool interIpu = false;  // IPU-Link copy; false: a stash (or a hand-over) on one IPU
};

struct PipelinedExecutable {
  Graph graph;  // the replicated, lowered training graph the IPU programs were cut from
  PipelineOptions options;
  int stages = 1;
  int ipus = 1;
  std::vector<int> stageIpu;
  std::vector<int> opStage;    // per training-graph op
  std::vector<Phase> opPhase;  // per training-graph op
  std::vector<Segment> segments;
  std::vector<int> forwardSegment, backwardSegment;  // per stage
  std::vector<int> updateSegments;                   // in program order
  std::vector<IpuProgram> programs;                  // per IPU
  std::vector<Transfer> transfers;
  std::vector<std::string> zeroInitialised;  // variables the replication pass created (start at 0)
  std::vector<int> graphInputs;              // training-graph host inputs (per micro-batch)
  std::vector<int> graphOutputs;             // training-graph outputs
  RecomputationReport recomputation;         // what PipelineOptions::recompute copied

  // Bytes copied between IPUs per micro-batch (forward and backward), and once per step.
  i64 interIpuBytesPerMicroBatch() const;
  i64 interIpuBytesPerStep() const;
  std::string describe() const;  // placement, per-IPU memory, stashes, copies
};

// Cuts `training` (forward + autodiff backward + optimizer updates) into a pipeline and compiles
// every IPU's program for `ipu` (one IPU). Throws PipelineError for a bad placement or schedule,
// CompileError naming the IPU when one does not fit.
PipelinedExecutable compilePipeline(const Graph& training, const Target& ipu,
                                    const PipelineOptions& options);

}  // namespace ipu::pipeline
