// The CPU backend's thread count: its OpenMP loops and OpenBLAS (built on OpenMP) use it.
//
// Default: EMBER_NUM_THREADS when set (read when ember creates its first allocator, i.e. with
// the first tensor), else OpenMP's own default (OMP_NUM_THREADS, or every core).
// set_num_threads overrides both. Like omp_set_num_threads, it applies to the calling thread:
// ember's CPU ops run their loops on the thread that calls them.
#pragma once

namespace ember {

void set_num_threads(int threads);  // at least 1; an Error otherwise
int num_threads();                  // threads the calling thread's CPU ops use

namespace detail {
void apply_thread_environment();  // EMBER_NUM_THREADS, once (ember calls it)
}

}  // namespace ember
