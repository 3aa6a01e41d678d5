#include "ipu_backend/compiler/first_fit.h"

#include <algorithm>

namespace ipu {

i64 placeFirstFit(std::vector<LiveRange>& ranges, i64 alignment) {
  auto rounded = [alignment](i64 b) { return (b + alignment - 1) / alignment * alignment; };
  std::vector<LiveRange*> order;
  order.reserve(ranges.size());
  for (LiveRange& r : ranges) order.push_back(&r);
  std::stable_sort(order.begin(), order.end(),
                   [](const LiveRange* a, const LiveRange* b) { return a->start < b->start; });
  std::vector<LiveRange*> active;  // sorted by offset
  i64 extent = 0;
  for (LiveRange* r : order) {
    active.erase(std::remove_if(active.begin(), active.end(),
                                [&](const LiveRange* a) { return a->end < r->start; }),
                 active.end());
    const i64 size = rounded(r->bytes);
    i64 pos = 0;
    for (const LiveRange* a : active) {
      if (a->offset - pos >= size) break;
      pos = std::max(pos, a->offset + rounded(a->bytes));
    }
    r->offset = pos;
    extent = std::max(extent, pos + size);
    active.insert(std::upper_bound(
                      active.begin(), active.end(), r,
                      [](const LiveRange* a, const LiveRange* b) { return a->offset < b->offset; }),
                  r);
  }
  return extent;
}

}  // namespace ipu
