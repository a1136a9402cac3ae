// Internal: the CPU ops' OpenMP loops: parallel_for (core's) for loops of independent iterations,
// RowScratch for their per-thread buffers, and parallel_tasks for tasks that call a GEMM engine
// (matmul's output tiles, attention's heads).
#pragma once

#include <omp.h>

#include <cstdint>
#include <exception>
#include <vector>

#include "core/cpu_parallel.hpp"
#include "ember/core/denormals.hpp"

namespace ember::ops::cpu {

using ember::detail::parallel_for;  // core/cpu_parallel.hpp

// A row of `cols` floats for each thread of the OpenMP team to come, allocated before its
// parallel region so that nothing inside it allocates; get() is the calling thread's (null when
// not `needed`: load_f32's buffer for an f32 tensor).
class RowScratch {
 public:
  explicit RowScratch(int64_t cols, bool needed = true) : cols_(cols) {
    if (needed) buffer_.resize(static_cast<size_t>(omp_get_max_threads() * cols));
  }
  float* get() {
    if (buffer_.empty()) return nullptr;
    return buffer_.data() + static_cast<int64_t>(omp_get_thread_num()) * cols_;
  }

 private:
  int64_t cols_;
  std::vector<float> buffer_;
};

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
#pragma omp for schedule(dynamic, 1) nowait  // (core/cpu_parallel.hpp says why)
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
