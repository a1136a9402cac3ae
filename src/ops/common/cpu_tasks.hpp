// Internal: independent CPU tasks in an OpenMP team, for ops whose tasks call a GEMM engine
// (matmul's output tiles, attention's heads).
#pragma once

#include <cstdint>
#include <exception>

#include "ember/core/denormals.hpp"

namespace ember::ops::cpu {

// f(i) for i in [0, n), one task at a time per thread (schedule(dynamic, 1)), every thread in the
// caller's floating-point mode. Always a parallel region, even for one task: the GEMM engines
// then run single-threaded, so results do not depend on the thread count. An exception thrown by
// f (a library's error) is rethrown after the region, the first one if several fail: one must
// not leave an OpenMP region.
template <class F>
void parallel_tasks(int64_t n, F&& f) {
  std::exception_ptr failure;
  const bool flush_mode = ember::detail::flush_denormals_now();
#pragma omp parallel
  {
    const ember::detail::CpuFloatScope float_scope(flush_mode);
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < n; ++i) {
      try {
        f(i);
      } catch (...) {
#pragma omp critical(ember_parallel_task_failure)
        if (!failure) failure = std::current_exception();
      }
    }
  }
  if (failure) std::rethrow_exception(failure);
}

}  // namespace ember::ops::cpu
