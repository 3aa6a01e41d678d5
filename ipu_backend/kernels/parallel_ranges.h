// How the fused loops split work over the OpenMP team: contiguous ranges, one per thread, and
// one thread below kParallelMin elements (there a parallel region costs more than it saves).
#pragma once

#include <omp.h>

#include <algorithm>

#include "ipu_backend/kernels/fused.h"
#include "ipu_backend/kernels/onednn_common.h"

namespace ipu::kernels::fused::detail {

constexpr i64 kParallelMin = 1 << 14;

// The team for `items` independent items holding `elements` elements in all.
inline int teamFor(i64 items, i64 elements) {
  return elements < kParallelMin || items < 2 ? 1 : std::max(1, numThreads());
}

// Calls f(t, begin, end) for thread t's range [n t / team, n (t + 1) / team) of [0, n), on
// `team` OpenMP threads (serially on the caller for a team of 1). Every thread is called, an
// empty range included, so per-thread partials are always written.
template <typename F>
void forThreadRanges(int team, i64 n, F&& f) {
  syncThreads();
  if (team <= 1) {
    f(0, i64{0}, n);
    return;
  }
#pragma omp parallel num_threads(team)
  {
    const i64 t = omp_get_thread_num(), nt = omp_get_num_threads();
    f(static_cast<int>(t), n * t / nt, n * (t + 1) / nt);
  }
}

}  // namespace ipu::kernels::fused::detail
