// bench_matmul's GPU half: ember's CUDA backends against cuBLAS on the same device.
#pragma once

#include <string>

namespace ember::bench {

// Registers the GPU benchmarks when a CUDA device is usable; otherwise returns false and says
// why in `why_not`. flush_l2: overwrite the L2 cache before every timed iteration.
bool register_cuda_matmul_benchmarks(bool flush_l2, std::string* why_not);

}  // namespace ember::bench
