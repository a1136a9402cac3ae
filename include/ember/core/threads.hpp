// The CPU backend's thread count: its OpenMP loops and OpenBLAS (built on OpenMP) use it.
//
// Default: EMBER_NUM_THREADS when set (read with the first tensor), else OpenMP's own default
// (OMP_NUM_THREADS, or every core). set_num_threads overrides both, for every thread: the count
// applies to each thread that creates tensors (OpenMP keeps it per thread; ember sets it as a
// thread allocates), since ember's CPU ops run their loops on the thread that calls them.
#pragma once

namespace ember {

void set_num_threads(int threads);  // 1 to 4096; an Error otherwise
int num_threads();                  // threads the calling thread's CPU ops use

namespace detail {
void apply_thread_environment();  // the chosen count, on the calling thread (ember calls it)
}

}  // namespace ember
