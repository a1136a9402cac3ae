// Launcher for ember's FP32 SIMT matmul (kernels/matmul_simt.cuh): picks a tile
// configuration for the shape and this GPU, and adds the bias_grad row sums
// (kernels/row_sums.cuh) when asked.
#include <cuda_runtime.h>

#include "ember/core/check_cuda.hpp"
#include "ember/kernels/matmul_simt.cuh"
#include "ember/kernels/row_sums.cuh"
#include "ops/common/cuda_device.hpp"
#include "ops/matmul/matmul_launchers.hpp"

namespace ember::ops::cuda {
namespace {}  // namespace

void matmul_simt_f32(const kernels::MatmulProblem& problem, cudaStream_t stream) {
  using kernels::SimtTileChoice;
  const kernels::MatmulProblem& p = problem;
  EMBER_CHECK(p.a.type == DType::f32 && p.b.type == DType::f32,
              "matmul (SIMT f32): expected f32 A and B, found {} and {} (f16/bf16 operands go to "
              "the tensor-core kernel)",
              dtype_name(p.a.type), dtype_name(p.b.type));
  if (p.m > 0 && p.n > 0 && p.batch > 0) {
    switch (
        kernels::choose_simt_tile(p.m, p.n, p.k, p.batch, multiprocessor_count(current_device()))) {
      case SimtTileChoice::t128x128:
        kernels::launch_matmul_simt<kernels::SimtTile128x128>(p, stream);
        break;
      case SimtTileChoice::t128x32:
        kernels::launch_matmul_simt<kernels::SimtTile128x32>(p, stream);
        break;
      case SimtTileChoice::t32x128:
        kernels::launch_matmul_simt<kernels::SimtTile32x128>(p, stream);
        break;
      case SimtTileChoice::t64x64:
        kernels::launch_matmul_simt<kernels::SimtTile64x64>(p, stream);
        break;
    }
  }
  if (p.bias_grad.data != nullptr && p.m > 0) kernels::launch_row_sums(p, stream);
}

void matmul_row_sums(const kernels::MatmulProblem& p, cudaStream_t stream) {
  if (p.bias_grad.data != nullptr && p.m > 0) kernels::launch_row_sums(p, stream);
}

}  // namespace ember::ops::cuda
