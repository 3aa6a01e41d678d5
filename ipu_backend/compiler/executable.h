// What the compiler produces: tile mappings of every buffer, compute sets of vertices with their
// statically planned exchanges, per-tile arena layouts, the BSP program, and the memory report.
// Both engine modes run this same structure.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ipu_backend/ir/graph.h"
#include "ipu_backend/kernels/kernel_types.h"
#include "ipu_backend/target/target.h"

namespace ipu {

using kernels::Range;

// A buffer is anything that lives in tile memory: an IR tensor, or a compiler temporary
// (partial sums of a split reduction, gather buffers are separate: see Window).
struct Buffer {
  std::string name;
  i64 elements = 0;
  DType dtype = DType::F32;
  int tensor = -1;          // IR tensor id, or -1 for a temporary
  bool alwaysLive = false;  // variables: live for the whole program
  i64 bytes() const { return elements * sizeOf(dtype); }
};

// A contiguous run of a buffer's elements held by one tile, at `offset` bytes into its arena.
struct TileSlice {
  int tile = 0;
  i64 begin = 0, end = 0;  // element range
  i64 offset = 0;          // byte offset in the tile arena
};

// Where a vertex reads one input from. If `gather` is false the window lies inside one slice on
// the vertex's own tile and is read in place; otherwise the exchange fills a gather buffer of
// (end - begin) elements at `gatherOffset` in the vertex's tile arena before the compute phase.
// (The flags sit beside `buffer` so that a window is 32 bytes: a full step has tens of millions.)
struct Window {
  int buffer = -1;
  bool gather = false;
  bool shared = false;  // another vertex on the same tile gathers the same window: reuse it
  i64 begin = 0, end = 0;
  i64 gatherOffset = 0;
};

// One output region of a vertex: elements [begin, end) of `buffer`, inside one slice on the
// vertex's tile (so a vertex only ever writes its own tile's memory).
struct OutRegion {
  int buffer = -1;
  i64 begin = 0, end = 0;
};

struct Vertex {
  int tile = 0;
  int part = 0;  // which partial (row of a partials buffer) this vertex writes
  std::vector<Window> inputs;
  std::vector<OutRegion> outputs;
  Range work;  // op-specific: output elements / channels / samples this vertex computes
  Range red;   // op-specific reduction sub-range for partials (empty: none)
};

// A statically scheduled copy between tile arenas (src and dst byte offsets).
struct ExchangeCopy {
  int srcTile = 0, dstTile = 0;
  i64 srcOffset = 0, dstOffset = 0;
  i64 bytes = 0;
};

// One BSP superstep group: exchange (copies) -> sync -> compute (vertices).
struct ComputeSet {
  std::string name;
  int op = -1;    // IR op id
  int phase = 0;  // ops with several phases (split reductions, batch norm) have several sets
  std::vector<Vertex> vertices;
  std::vector<ExchangeCopy> exchange;
  i64 exchangeBytes() const;
};

// The program: per device iteration, host stream copies in, the compute sets in order, stream
// copies out; the whole body repeats `deviceIterations` times per host call.
struct Program {
  struct Step {
    enum class Kind { StreamIn, Execute, StreamOut } kind;
    int index;  // buffer id for streams, compute-set id for Execute
  };
  int deviceIterations = 1;
  std::vector<Step> body;
  // Gradient accumulation: body[0, updateBegin) (streams, forward, backward, accumulation) runs
  // accumulationSteps times per device iteration, then body[updateBegin, end) (cross-replica
  // reduction, optimizer) once. Streams then hold deviceIterations x accumulationSteps tensors.
  // updateBegin < 0: the whole body runs once per device iteration.
  int accumulationSteps = 1;
  int updateBegin = -1;
  std::string describe(const struct Executable& exe) const;
};

struct TileMemory {
  i64 alwaysLive = 0;  // variables, code, vertex state
  i64 peakNotAlwaysLive = 0;
  i64 total() const { return alwaysLive + peakNotAlwaysLive; }
};

// Who holds a tile's memory at its peak: what the overflow error lists, kept for reports.
struct TileOccupant {
  std::string name;  // "'tensor'" or "'tensor' exchange buffer for <compute set>"
  i64 bytes = 0;
  bool alwaysLive = false;
};
struct TileDetail {
  int tile = 0;
  int peakComputeSet = -1;  // -1: the host stream copies (before the first set)
  TileMemory memory;
  i64 codeAndVertexState = 0;           // part of memory.alwaysLive
  std::vector<TileOccupant> occupants;  // buffers, largest first, the top few
};
// Tile memory over the program, for reports: what the per-tile arenas held at each compute set.
struct MemoryDetail {
  std::vector<i64> liveBytes;           // per compute set: not-always-live bytes, all tiles
  std::vector<i64> worstTileLiveBytes;  // per compute set: the same on the fullest tile
  int peakComputeSet = -1;              // argmax of liveBytes
  // The tensors that make the peak (summed over tiles, exchange buffers under their tensor).
  std::vector<std::pair<std::string, i64>> peakTensors;
  std::vector<TileDetail> worstTiles;  // the fullest tiles, fullest first
};

struct CompileOptions {
  int deviceIterations = 1;
  bool checkMemory = true;  // false: report only (the report still says which tiles overflow)
  // false: stop after the tile memory (mappings, vertices, arenas): a fit verdict. The exchange
  // copies change no tile's bytes; without them the program cannot run and its exchange is
  // priced from the windows (cost::ExchangeModel other than AsCompiled).
  bool planExchanges = true;
  // Ops from updateFirstOp on form the once-per-step update part of the program (see Program);
  // -1: none. Set by the replication pass (ipu_backend/replication).
  int accumulationSteps = 1;
  int updateFirstOp = -1;
};

struct Executable {
  Graph graph;
  Target target;
  CompileOptions options;
  std::vector<Buffer> buffers;                  // [0, graph.tensors().size()) are the IR tensors
  std::vector<std::vector<TileSlice>> mapping;  // per buffer, sorted by begin
  std::vector<ComputeSet> computeSets;
  std::vector<int> opFirstComputeSet;  // per IR op
  std::vector<TileMemory> tileMemory;  // per tile
  std::vector<i64> arenaBytes;         // per tile: bytes the tile engine allocates
  Program program;
  double compileSeconds = 0;
  // The fused engine's kernel rule for this host's ISA (kernels::fused::describe), fixed here.
  std::string hostKernelRule;
  std::vector<bool> optimizerOp;  // per IR op: part of a lowered optimizer update
  i64 optimizerStateBytes = 0;    // per replica (sharded state: this replica's chunks)
  MemoryDetail memoryDetail;      // occupants of the fullest tiles, live bytes over the program
  // Per IR tensor: the id stochastic rounding keys its writes on. Empty: the tensor's own id. A
  // pipeline IPU's program keys on the training graph's ids, so that it rounds as the
  // unpipelined program does (ipu_backend/compiler/pipeline.h).
  std::vector<int> roundingKeys = {};

  // JSON compile report: per-tile memory (max, mean, histogram), vertex and compute-set counts,
  // exchange bytes, the largest buffers.
  nlohmann::json report() const;
  // The slice of `buffer` that holds element `e`.
  const TileSlice& sliceOf(int buffer, i64 e) const;
};

}  // namespace ipu
