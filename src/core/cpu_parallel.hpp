// Internal: parallel_for, the CPU backend's OpenMP loop of independent iterations, for every
// layer above core (the ops, the optimizers' steps, gradient clipping).
#pragma once

#include <cstdint>

#include "ember/core/denormals.hpp"

namespace ember::detail {

// f(i) for i in [0, n): in an OpenMP team when `parallel` (else on the calling thread), each
// thread taking one contiguous range of i (schedule(static)), every thread in the caller's
// floating-point mode (denormals.hpp). f must not throw: an exception must not leave an OpenMP
// region. Loops that want `omp simd` or a reduction clause write their region out instead.
template <class F>
void parallel_for(int64_t n, bool parallel, F&& f) {
  const bool flush_mode = flush_denormals_now();
#pragma omp parallel if (parallel)
  {
    const CpuFloatScope float_scope(flush_mode);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; ++i) f(i);
  }
}

}  // namespace ember::detail
