// First-fit placement of buffers over their lifetimes: the tile arenas of the compiler and the
// fused engine's host arena share it.
#pragma once

#include <vector>

#include "ipu_backend/ir/graph.h"

namespace ipu {

struct LiveRange {
  i64 start = 0, end = 0;  // first and last step the buffer is live in (inclusive)
  i64 bytes = 0;
  i64 offset = 0;  // set by placeFirstFit
};

// Ranges live at one step only, placed after the ranges that start at that step (a tile's gather
// buffers of a compute set: most of a tile's arena items, held apart from the slices' ranges).
// Step k's ranges are bytes[begin[k], begin[k + 1]), in order; placeFirstFit sets offsets.
struct OneStepRanges {
  std::vector<i64> steps;     // ascending, distinct
  std::vector<size_t> begin;  // steps.size() + 1
  std::vector<i64> bytes;
  std::vector<i64> offsets;
};

// Sweeps the ranges in start order (stable: callers order ties) and puts each at the lowest
// offset, a multiple of `alignment`, that no range live at the same time occupies. Returns the
// extent: the bytes the placement needs. The `oneStep` ranges take the offsets they would get
// listed after the ranges of their step's start (and before any later start) in `ranges`.
i64 placeFirstFit(std::vector<LiveRange>& ranges, i64 alignment, OneStepRanges* oneStep = nullptr);

}  // namespace ipu
