// Cycle cost model of a compiled Executable on its Target, in the spirit of poplibs' performance
// estimation: every BSP superstep costs compute (the slowest tile) + sync + exchange (the busiest
// tile's port), host stream copies cost bytes over the host link, and the step is their sum.
//
// Calibration: only hardware specifications (ipu_backend/target/target.h, docs: IPU facts) and
// a few per-vertex overheads that are named estimates below. Nothing is fitted to measured or
// published times; the published MLPerf times are the hold-out (tests/cost/validation_test.cpp).
//
// Rules (and why):
//  * Worker split. A vertex's work divides over up to `workersPerTile` (6) worker contexts in
//    units (output elements for convolutions and matmuls, vectors for elementwise ops). The
//    tile is barrel scheduled: each worker issues one instruction every 6th cycle, so a vertex
//    costs 6 x (instructions of its busiest worker). Evenly split over 6 workers this is the
//    tile's full rate (16/32/64 MACs per cycle); a vertex with a single unit of work runs at 1/6
//    of it. This is the rule poplibs' cycle estimators use ("max over workers x numWorkers").
//  * Vertices of one compute set on one tile run one after another (each is a supervisor-style
//    vertex using all workers), so a tile's compute cycles are the sum of its vertices' cycles;
//    the compute phase lasts as long as the slowest tile.
//  * Convolutions/matmuls run on the AMP unit at the precision's MAC rate; the contraction
//    dimension is consumed in groups (AMP input-channel grain), so a contraction shorter than the
//    grain wastes the rest (conv0 with 3 input channels runs at 3/8 of the rate in fp32).
//  * Elementwise, reduction, normalisation and optimizer vertices cost the larger of their
//    instruction count (vector width 2 x f32 or 4 x f16 per 64-bit instruction, more
//    instructions per vector for transcendentals) and their bytes over the tile memory bandwidth.
//  * Exchange: per tile, bytes received and bytes sent (separate ports, each
//    `exchangeBytesPerCycle`), the busier port bounding the phase; copies of the same source
//    bytes to several tiles are one send (the exchange fabric broadcasts), and bytes that both
//    tiles of an exchange-bus pair receive from one source arrive for both at once (half the
//    receive cycles each). Phase time is the busiest tile's.
//  * One sync per compute set (Poplar synchronises before every Execute).
//  * Host streams: bytes per device iteration over the per-IPU host bandwidth; overlapped with
//    device compute (Poplar prefetches streams) or serialised, by option.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ipu_backend/compiler/executable.h"
#include "ipu_backend/cost/collectives.h"

namespace ipu::cost {

// Arithmetic precision of convolutions/matmuls, named as Graphcore names them:
// "32.32" fp32, "16.16" fp16 with fp16 partials, "16.32" fp16 with fp32 partials.
enum class Precision { F32, F16F16, F16F32 };
Precision parsePrecision(const std::string& s);  // "32.32" | "16.16" | "16.32"
std::string precisionName(Precision p);

// How exchange bytes are obtained for convolution and matmul compute sets.
enum class ExchangeModel {
  // Exactly the copies the compiler planned. The emulator's planner splits convolutions by
  // output slice only, so every tile gathers the whole weight tensor: a faithful price of this
  // compiler, far above what Poplar's conv planner would move.
  AsCompiled,
  // Convolutions and matmuls move what a planner splitting output channels over sK tile
  // groups and positions over T/sK would move per tile: A*sK/T + W/sK bytes (A: activation-side
  // operands, W: weight-side tensor) at the best sK (sqrt(W*T/A), clamped to [1, T]), priced on
  // their multiplying phase; that split has no contraction split, so their other phases
  // (operand blocks, transposes, partial sums) move nothing. Other compute sets move their
  // compiled windows, except that elementwise vertices read only the
  // elements of same-sized operands that match their outputs (the compiler's bounding windows
  // fall back to the whole operand for slices above 8,192 elements, so every tile of a large
  // residual add gathers the whole other operand).
  Planned,
};

struct CostOptions {
  Precision precision = Precision::F32;
  // With a 16.x precision, price f32 float buffers as 2-byte halves (the IR is f32 today while
  // the MLPerf runs being modelled store activations, weights and gradients in fp16).
  bool halfStorage = true;
  ExchangeModel exchange = ExchangeModel::AsCompiled;
  bool multicast = true;  // one send for copies of the same source bytes to several tiles
  // Bytes that both tiles of an exchange-bus pair (Target::tilesPerSharedExchangeBus) receive
  // from the same source cost each of them half their receive cycles; planned convolutions and
  // matmuls lay out their output-channel groups on consecutive tiles, so the activations they
  // broadcast arrive at the doubled rate when the groups come in pairs (poplibs' conv planner).
  bool exchangeBusSharing = true;
  bool overlapHostIo = true;   // stream copies overlap device compute (prefetch)
  double hostBytesPerSec = 0;  // per IPU; 0: target.hostLinkBytesPerSec
  // Worker-side setup of one vertex, in worker instructions (loop setup, pointer unpacking):
  // an estimate in the range poplibs' vertex cycle estimators use (tens of instructions).
  double vertexSetupInstructions = 10;
  // Cross-replica ops (cross_replica_reduce_scatter / all_gather) are priced as the two halves of
  // allReduceSeconds over the op's replicas: 1 IPU per replica, POD64s of 64 IPUs joined by
  // GW-Links beyond 64 replicas (PodShape::pod).
  CollectiveOptions collectives = {};
};

struct ComputeSetCost {
  std::string name;
  OpKind kind = OpKind::Constant;
  int phase = 0;
  double computeCycles = 0;   // slowest tile
  double exchangeCycles = 0;  // busiest tile port
  double syncCycles = 0;
  double macs = 0;  // whole set
  int busiestTile = 0;
  // Tile balance of the compute phase: the mean over all the IPU's tiles (idle ones count as 0)
  // and the tiles with work; computeCycles / meanTileComputeCycles is the imbalance.
  double meanTileComputeCycles = 0;
  int tilesUsed = 0;
  bool optimizer = false;  // a lowered optimizer op's set: runs once per step, not per micro-batch
  double total() const { return computeCycles + exchangeCycles + syncCycles; }
};

struct StepCost {
  double computeCycles = 0, exchangeCycles = 0, syncCycles = 0;
  double deviceCycles = 0;      // sum of the three, one device iteration
  double optimizerCycles = 0;   // part of deviceCycles in lowered optimizer ops (per step, not per
                                // micro-batch, under gradient accumulation)
  double collectiveCycles = 0;  // part of exchangeCycles: cross-replica reduce-scatter and
                                // all-gather over IPU-Links / GW-Links (once per step)
  double hostBytes = 0;         // streamed per device iteration
  double hostSeconds = 0;
  double deviceSeconds = 0;
  double seconds = 0;  // per device iteration, host I/O overlapped or added
  double macs = 0;
  double achievedFlops = 0;  // 2 x MACs / seconds
  double peakFlops = 0;      // 2 x MAC rate x tiles x clock
  double utilisation = 0;    // achieved / peak
  std::vector<ComputeSetCost> computeSets;
  nlohmann::json report(int topSets = 20) const;
};

StepCost estimateStep(const Executable& exe, const CostOptions& opts = {});

// A step's cycles summed per op kind and phase (where the exchange goes), most exchange first.
struct KindCycles {
  OpKind kind = OpKind::Constant;
  int phase = 0;
  int sets = 0;
  double computeCycles = 0, exchangeCycles = 0, syncCycles = 0;
};
std::vector<KindCycles> cyclesByKind(const StepCost& sc);

// Compiles `g` for `target` in segments of `opsPerSegment` consecutive ops (0: whole graph) and
// sums their costs, once per option set: for graphs whose single compile does not fit in host
// memory (full ResNet-50 for 1,472 tiles needs ~14 GB, mostly exchange copies). Exact for the
// present compiler, whose tile mappings depend only on each buffer's size and type and whose
// vertices and exchanges depend only on the op and those mappings (tests/cost checks that the
// segmented and the whole estimate agree). Host bytes are those of the whole graph's streams.
std::vector<StepCost> estimateGraph(const Graph& g, const Target& target,
                                    const std::vector<CostOptions>& opts, int opsPerSegment);

// MAC rate per tile per cycle of a precision on a target.
double macsPerCycle(const Target& t, Precision p);

}  // namespace ipu::cost
