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
//
// `nowait`, here and in every such region of ember's but those with a reduction clause: the loop's
// own barrier would be a second one, since the scope's destructor keeps GCC from merging it into
// the region's end; each thread only restores its own floating-point bits after the loop. The extra
// barrier cost about as much as a 1 MiB loop itself on a 2-core Zen 3 VM (90 us against 160 with
// OpenMP's default wait policy, 175 against 290 with OMP_WAIT_POLICY=passive).
template <class F>
void parallel_for(int64_t n, bool parallel, F&& f) {
  const bool flush_mode = flush_denormals_now();
#pragma omp parallel if (parallel)
  {
    const CpuFloatScope float_scope(flush_mode);
#pragma omp for schedule(static) nowait
    for (int64_t i = 0; i < n; ++i) f(i);
  }
}

}  // namespace ember::detail
