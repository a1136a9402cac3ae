// Internal: the f32 GEMM engine of the CPU backend, run on one output tile by one thread
// (cpu_output_tiles.hpp). Which engine runs is chosen once per process (cpu_gemm_engine() in
// ember/ops/matmul.hpp; docs/matmul.md gives the measurements behind the choice).
#pragma once

#include <cstdint>

#include "ember/ops/matmul.hpp"

namespace ember::ops::cpu {

// C[rows, cols] = alpha * op(A) op(B) + beta * C, all row-major f32, on the calling thread
// (inside a parallel region both engines run single-threaded). k > 0.
void sgemm_tile(CpuGemmEngine engine, bool transpose_a, bool transpose_b, int64_t rows,
                int64_t cols, int64_t k, float alpha, const float* a, int64_t lda, const float* b,
                int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace ember::ops::cpu
