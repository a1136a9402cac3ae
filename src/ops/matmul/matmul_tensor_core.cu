// Launcher for kernels/matmul_tensor_core.cuh: checks the problem, picks the tile
// configuration and the copy width, launches the kernel instantiation that matches, and adds
// the bias_grad row sums (kernels/row_sums.cuh) when asked.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "ember/core/check_cuda.hpp"
#include "ember/core/error.hpp"
#include "ember/core/launch.hpp"
#include "ember/kernels/matmul_tensor_core.cuh"
#include "ember/kernels/row_sums.cuh"
#include "ops/common/cuda_device.hpp"
#include "ops/matmul/matmul_launchers.hpp"

namespace ember::ops::cuda {
namespace {

using kernels::MatmulProblem;
using kernels::MatrixRef;

// The widest copy, in 16-bit elements (8, 4, 2 or 1), that keeps every row start of `ref`
// aligned: the base address, the leading dimension and the batch stride must all allow it.
int copy_elements(const MatrixRef& ref) {
  const auto address = reinterpret_cast<uintptr_t>(ref.data);
  for (int vec : {8, 4, 2}) {
    if (address % (2 * vec) == 0 && ref.ld % vec == 0 && ref.batch_stride % vec == 0) return vec;
  }
  return 1;
}

template <class Tile, bool Bf16, bool TransA, bool TransB, int Vec>
void launch_kernel(const MatmulProblem& p, cudaStream_t stream) {
  const auto kernel = kernels::matmul_tensor_core_kernel<Tile, Bf16, TransA, TransB, Vec>;
  constexpr size_t kShared = Tile::kSharedBytes;
  if constexpr (kShared > 48 * 1024) {
    // Above 48 KiB a kernel must opt in; cheap, and per device, so set on every launch.
    EMBER_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(kShared)));
  }
  const int64_t tiles_n = (p.n + Tile::kBN - 1) / Tile::kBN;
  const int64_t tiles_m = (p.m + Tile::kBM - 1) / Tile::kBM;
  constexpr int64_t kMaxGridY = 65535, kMaxGridZ = 65535;
  EMBER_CHECK(tiles_m <= kMaxGridY,
              "matmul_tensor_core: m = {} needs {} row tiles of {}, more than the grid's {}; "
              "split the rows into several matmuls",
              p.m, tiles_m, Tile::kBM, kMaxGridY);
  for (int64_t first = 0; first < p.batch; first += kMaxGridZ) {
    const int64_t count = std::min(p.batch - first, kMaxGridZ);
    const dim3 grid(static_cast<unsigned>(tiles_n), static_cast<unsigned>(tiles_m),
                    static_cast<unsigned>(count));
    launch(kernel, grid, dim3(Tile::kThreads), kShared, stream, p, first);
  }
}

template <class Tile, int Vec, bool Bf16>
void dispatch_layout(const MatmulProblem& p, cudaStream_t stream) {
  if (p.trans_a) {
    if (p.trans_b) return launch_kernel<Tile, Bf16, true, true, Vec>(p, stream);
    return launch_kernel<Tile, Bf16, true, false, Vec>(p, stream);
  }
  if (p.trans_b) return launch_kernel<Tile, Bf16, false, true, Vec>(p, stream);
  return launch_kernel<Tile, Bf16, false, false, Vec>(p, stream);
}

template <class Tile, int Vec>
void dispatch_type(const MatmulProblem& p, cudaStream_t stream) {
  if (p.a.type == DType::bf16) return dispatch_layout<Tile, Vec, true>(p, stream);
  return dispatch_layout<Tile, Vec, false>(p, stream);
}

// Enqueues the GEMM and its epilogue (m, n, batch >= 1).
void launch_gemm(const MatmulProblem& p, cudaStream_t stream) {
  EMBER_CHECK(p.c.data != nullptr, "matmul_tensor_core: C is null for a {}x{} output", p.m, p.n);
  EMBER_CHECK(p.k == 0 || (p.a.data != nullptr && p.b.data != nullptr),
              "matmul_tensor_core: A or B is null with k = {}", p.k);

  // 16-byte cp.async needs 16-byte aligned row starts in both operands; otherwise the small
  // tile with narrower copies (or element loads) keeps every alignment correct.
  const int vec = std::min(copy_elements(p.a), copy_elements(p.b));
  if (vec == 8) {
    switch (kernels::choose_tensor_core_tile(p.m, p.n, p.k, p.batch,
                                             multiprocessor_count(current_device()))) {
      case kernels::TensorCoreTileKind::large:
        return dispatch_type<kernels::TensorCoreTileLarge, 8>(p, stream);
      case kernels::TensorCoreTileKind::medium:
        return dispatch_type<kernels::TensorCoreTileMedium, 8>(p, stream);
      case kernels::TensorCoreTileKind::small:
        return dispatch_type<kernels::TensorCoreTileSmall, 8>(p, stream);
    }
  }
  if (vec == 4) return dispatch_type<kernels::TensorCoreTileSmall, 4>(p, stream);
  if (vec == 2) return dispatch_type<kernels::TensorCoreTileSmall, 2>(p, stream);
  return dispatch_type<kernels::TensorCoreTileSmall, 1>(p, stream);
}

}  // namespace

void matmul_tensor_core(const MatmulProblem& p, cudaStream_t stream) {
  EMBER_CHECK(p.a.type == p.b.type && (p.a.type == DType::f16 || p.a.type == DType::bf16),
              "matmul_tensor_core: A and B must both be f16 or both bf16, found {} and {}; use "
              "matmul_simt_f32 for f32 operands or cast them to one 16-bit type",
              dtype_name(p.a.type), dtype_name(p.b.type));
  EMBER_CHECK(p.m >= 0 && p.n >= 0 && p.k >= 0 && p.batch >= 0,
              "matmul_tensor_core: negative extent (m {}, n {}, k {}, batch {})", p.m, p.n, p.k,
              p.batch);
  if (p.m > 0 && p.n > 0 && p.batch > 0) launch_gemm(p, stream);
  // Linear's bias gradient: a separate deterministic reduction over op(A) (batch == 1).
  if (p.bias_grad.data != nullptr && p.m > 0) kernels::launch_row_sums(p, stream);
}

}  // namespace ember::ops::cuda
