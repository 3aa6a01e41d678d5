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

// Sweeps the ranges in start order (stable: callers order ties) and puts each at the lowest
// offset, a multiple of `alignment`, that no range live at the same time occupies. Returns the
// extent: the bytes the placement needs.
i64 placeFirstFit(std::vector<LiveRange>& ranges, i64 alignment);

}  // namespace ipu
