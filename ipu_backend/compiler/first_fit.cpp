#include "ipu_backend/compiler/first_fit.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <queue>

namespace ipu {
namespace {

// The ranges live at one moment, sorted by offset, in chunks that remember their largest gap.
// Live ranges never overlap (each was placed in a gap), so a first-fit query walks the chunks and
// looks inside only the one whose gap fits: about n/B + B steps instead of n. (A full ResNet-50
// step has ~15,000 ranges per tile, ~1,400 live at once; the plain scan was 90% of the compile.)
class ActiveSet {
 public:
  explicit ActiveSet(i64 alignment) : alignment_(alignment) {}

  i64 rounded(i64 b) const { return (b + alignment_ - 1) / alignment_ * alignment_; }

  // A free gap: bytes [begin, limit) between live ranges (limit < 0: above the last), at
  // position k of chunk c.
  struct Gap {
    size_t c, k;
    i64 begin, limit;
  };
  // The lowest gap with `size` free bytes.
  Gap lowestGap(i64 size) const {
    i64 prevEnd = 0;
    for (size_t c = 0; c < chunks_.size(); ++c) {
      const Chunk& ch = chunks_[c];
      if (ch.v.front().offset - prevEnd >= size) return {c, 0, prevEnd, ch.v.front().offset};
      if (ch.maxGap >= size)
        for (size_t k = 1; k < ch.v.size(); ++k)
          if (ch.v[k].offset - ch.v[k - 1].end >= size)
            return {c, k, ch.v[k - 1].end, ch.v[k].offset};
      prevEnd = ch.v.back().end;
    }
    return {chunks_.empty() ? 0 : chunks_.size() - 1, chunks_.empty() ? 0 : chunks_.back().v.size(),
            prevEnd, -1};
  }

  // Places `n` ranges of `size` bytes one after another, each at the lowest offset free then:
  // each gap the walk reaches takes as many as fit, packed from its start (an earlier gap held
  // none before and holds none after), and they occupy it as one entry (they end together when
  // the caller's run shares an end). Calls placed(offset, bytes) per entry.
  // at(q, offset) sets the offset of the run's q-th range.
  template <typename At, typename F>
  void placeRun(size_t n, i64 size, At&& at, F&& placed) {
    for (size_t done = 0; done < n;) {
      const Gap g = lowestGap(size);
      const size_t fit = g.limit < 0
                             ? n - done
                             : std::min(n - done, static_cast<size_t>((g.limit - g.begin) / size));
      for (size_t q = 0; q < fit; ++q) at(done + q, g.begin + static_cast<i64>(q) * size);
      if (chunks_.empty()) chunks_.emplace_back();
      insert(g.c, g.k, g.begin, static_cast<i64>(fit) * size);
      placed(g.begin, static_cast<i64>(fit) * size);
      done += fit;
    }
  }

  // Takes out the range at `offset` (each live range has its own offset).
  void erase(i64 offset) {
    auto c = std::upper_bound(chunks_.begin(), chunks_.end(), offset,
                              [](i64 o, const Chunk& ch) { return o < ch.v.front().offset; });
    --c;
    std::vector<Entry>& v = c->v;
    auto it = std::lower_bound(v.begin(), v.end(), offset,
                               [](const Entry& e, i64 o) { return e.offset < o; });
    const size_t k = static_cast<size_t>(it - v.begin());
    // Inside, the two gaps around it merge into a larger one; at an end of the chunk one
    // internal gap goes, and it may have been the largest.
    const bool inside = k > 0 && k + 1 < v.size();
    const i64 lost = k == 0 ? (v.size() > 1 ? v[1].offset - v[0].end : -1)
                            : (k + 1 == v.size() ? v[k].offset - v[k - 1].end : -1);
    v.erase(it);
    if (v.empty()) {
      chunks_.erase(c);
    } else if (inside) {
      c->maxGap = std::max(c->maxGap, v[k].offset - v[k - 1].end);
    } else if (lost == c->maxGap) {
      refresh(*c);
    }
  }

 private:
  static constexpr size_t kChunk = 64;
  struct Entry {
    i64 offset, end;  // the bytes [offset, end) a range (or a run of ranges) occupies, rounded
  };
  struct Chunk {
    std::vector<Entry> v;
    i64 maxGap = 0;  // largest gap between consecutive ranges inside the chunk
  };

  static void refresh(Chunk& ch) {
    ch.maxGap = 0;
    for (size_t k = 1; k < ch.v.size(); ++k)
      ch.maxGap = std::max(ch.maxGap, ch.v[k].offset - ch.v[k - 1].end);
  }

  void insert(size_t c, size_t k, i64 offset, i64 size) {
    Chunk& ch = chunks_[c];
    // The gap r lands in (inside the chunk, k in 1..n-1) splits in two smaller ones; at either
    // end of the chunk it adds one internal gap.
    const bool inside = k > 0 && k < ch.v.size();
    const i64 split = inside ? ch.v[k].offset - ch.v[k - 1].end : -1;
    ch.v.insert(ch.v.begin() + static_cast<std::ptrdiff_t>(k), Entry{offset, offset + size});
    if (ch.v.size() > 2 * kChunk) {
      Chunk tail;
      tail.v.assign(ch.v.begin() + kChunk, ch.v.end());
      ch.v.resize(kChunk);
      refresh(tail);
      refresh(ch);
      chunks_.insert(chunks_.begin() + static_cast<std::ptrdiff_t>(c) + 1, std::move(tail));
    } else if (inside) {
      if (split == ch.maxGap) refresh(ch);
    } else if (ch.v.size() > 1) {
      const i64 added = k == 0 ? ch.v[1].offset - ch.v[0].end : ch.v[k].offset - ch.v[k - 1].end;
      ch.maxGap = std::max(ch.maxGap, added);
    }
  }

  i64 alignment_;
  std::vector<Chunk> chunks_;
};

}  // namespace

i64 placeFirstFit(std::vector<LiveRange>& ranges, i64 alignment, OneStepRanges* oneStep) {
  // Start order, stable: a counting sort when the starts span few values (compute-set indices in
  // the tile arenas), else a merge sort.
  std::vector<LiveRange*> order(ranges.size());
  i64 lo = 0, hi = -1;
  if (!ranges.empty()) {
    const auto [a, b] = std::minmax_element(
        ranges.begin(), ranges.end(),
        [](const LiveRange& x, const LiveRange& y) { return x.start < y.start; });
    lo = a->start, hi = b->start;
  }
  if (hi - lo < 4 * static_cast<i64>(ranges.size()) + 64) {
    std::vector<size_t> at(static_cast<size_t>(hi - lo + 2), 0);
    for (const LiveRange& r : ranges) ++at[static_cast<size_t>(r.start - lo + 1)];
    for (size_t k = 1; k < at.size(); ++k) at[k] += at[k - 1];
    for (LiveRange& r : ranges) order[at[static_cast<size_t>(r.start - lo)]++] = &r;
  } else {
    for (size_t k = 0; k < ranges.size(); ++k) order[k] = &ranges[k];
    std::stable_sort(order.begin(), order.end(),
                     [](const LiveRange* a, const LiveRange* b) { return a->start < b->start; });
  }
  ActiveSet active(alignment);
  // (end, offset) of the live entries, earliest end first: each entry is taken out once, when
  // the sweep passes its end.
  using Live = std::pair<i64, i64>;
  std::priority_queue<Live, std::vector<Live>, std::greater<>> ends;
  i64 extent = 0;
  auto endBefore = [&](i64 step) {
    while (!ends.empty() && ends.top().first < step) {
      active.erase(ends.top().second);
      ends.pop();
    }
  };
  // The one-step ranges of steps before `step`, each step's after the ranges that start there
  // (the sweep has placed those): they end before anything else is placed, so they are taken
  // out at once and move no other range.
  size_t nextStep = 0;
  std::vector<i64> placedHere;
  auto oneStepBefore = [&](i64 step) {
    for (; oneStep && nextStep < oneStep->steps.size() && oneStep->steps[nextStep] < step;
         ++nextStep) {
      endBefore(oneStep->steps[nextStep]);
      const size_t first = oneStep->begin[nextStep], last = oneStep->begin[nextStep + 1];
      placedHere.clear();
      for (size_t i = first; i < last;) {
        const i64 size = active.rounded(oneStep->bytes[i]);
        size_t j = i + 1;
        while (j < last && active.rounded(oneStep->bytes[j]) == size) ++j;
        if (size == 0) {
          for (size_t k = i; k < j; ++k) oneStep->offsets[k] = 0;
        } else {
          active.placeRun(
              j - i, size, [&](size_t q, i64 offset) { oneStep->offsets[i + q] = offset; },
              [&](i64 offset, i64 bytes) {
                extent = std::max(extent, offset + bytes);
                placedHere.push_back(offset);
              });
        }
        i = j;
      }
      for (i64 offset : placedHere) active.erase(offset);
    }
  };
  if (oneStep) oneStep->offsets.assign(oneStep->bytes.size(), 0);
  for (size_t i = 0; i < order.size();) {
    LiveRange* r = order[i];
    oneStepBefore(r->start);
    endBefore(r->start);
    const i64 size = active.rounded(r->bytes);
    // The run of ranges after r with its lifetime and size (a tile's slices of one buffer:
    // thousands in a full step) is placed in one walk.
    size_t j = i + 1;
    while (j < order.size() && order[j]->start == r->start && order[j]->end == r->end &&
           active.rounded(order[j]->bytes) == size)
      ++j;
    if (size == 0) {  // occupies nothing: offset 0, as the lowest offset that fits
      for (size_t k = i; k < j; ++k) order[k]->offset = 0;
    } else {
      active.placeRun(
          j - i, size, [&](size_t q, i64 offset) { order[i + q]->offset = offset; },
          [&](i64 offset, i64 bytes) {
            extent = std::max(extent, offset + bytes);
            ends.push({r->end, offset});
          });
    }
    i = j;
  }
  oneStepBefore(std::numeric_limits<i64>::max());
  return extent;
}

}  // namespace ipu
