// The target description: one struct holding every hardware figure the compiler, the engine and
// the cost model use. Mk2 defaults come from the GC200 datasheet figures (docs: IPU facts).
#pragma once

#include <cstdint>
#include <string>

namespace ipu {

struct Target {
  std::string name = "IPU-Mk2 (GC200)";
  std::int64_t numTiles = 1472;
  std::int64_t bytesPerTile = 624 * 1024;  // 897 MiB per IPU in all
  int workersPerTile = 6;                  // barrel-scheduled worker contexts (+1 supervisor)
  double clockHz = 1.33e9;
  // Arithmetic per tile per cycle (multiply-accumulates), from the peak TFLOPS figures.
  double fp32MacsPerCycle = 16;      // 62.5 TFLOPS fp32
  double fp16MacsPerCycle = 64;      // 250 TFLOPS fp16 with fp16 partials
  double fp16Fp32MacsPerCycle = 32;  // ~125 TFLOPS fp16 with fp32 partials
  double tileMemBytesPerCycle = 24;  // on-tile load/store bandwidth (47.5 TB/s per IPU)
  double exchangeBytesPerCycle = 4;  // per tile, on-chip all-to-all exchange (8 TB/s per IPU)
  // Consecutive tiles sharing one exchange bus (a "super tile"): data that both tiles of a pair
  // receive from the same sender arrives for both in the same cycles, i.e. at twice
  // exchangeBytesPerCycle for each (poplibs' exchange estimators: supportsExchangeBusSharing(),
  // getTilesPerSharedExchangeBus() == 2, "double-width exchange"). 1: no sharing.
  int tilesPerSharedExchangeBus = 2;
  double syncCycles = 150;            // one on-chip BSP sync (an estimate, see cost model notes)
  double ipuLinkBytesPerSec = 320e9;  // 10 IPU-Links per IPU in all
  double hostLinkBytesPerSec = 64e9;  // PCIe Gen4 x16 equivalent through the M2000 gateway
  // Fixed per-tile costs the compiler reserves (code and vertex state estimates).
  std::int64_t codeBytesPerCodelet = 1024;  // per distinct kernel type used on a tile
  std::int64_t vertexStateBytes = 48;       // per vertex on a tile (up to one per worker)
  // Per operand of each further region a compute set's workers process on a tile (a 32-bit
  // pointer and a size in their work lists).
  std::int64_t workListBytesPerOperand = 8;
  // Smallest unit the planner maps onto a tile, in bytes (Poplar maps in grains; 8 bytes keeps
  // 64-bit loads aligned for f32 and f16 alike).
  std::int64_t grainBytes = 8;
  // Below this many bytes a tensor stays on as few tiles as possible (spreading tiny tensors
  // costs more in exchange than it saves).
  std::int64_t minBytesPerTile = 256;

  static Target mk2() { return Target{}; }
  // A small target for tests: few tiles, little memory, same per-tile rates.
  static Target small(std::int64_t tiles, std::int64_t bytesPerTile) {
    Target t;
    t.name = "test target (" + std::to_string(tiles) + " tiles x " + std::to_string(bytesPerTile) +
             " B)";
    t.numTiles = tiles;
    t.bytesPerTile = bytesPerTile;
    return t;
  }
  std::int64_t totalBytes() const { return numTiles * bytesPerTile; }
};

}  // namespace ipu
