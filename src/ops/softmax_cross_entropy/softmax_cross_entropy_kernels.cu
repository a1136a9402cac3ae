// Launchers for softmax + cross-entropy and argmax
// (src/ops/softmax_cross_entropy/softmax_cross_entropy.cuh, argmax.cuh): picks a warp or a block
// per row by the number of classes.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "argmax.cuh"
#include "ember/core/check_cuda.hpp"
#include "ember/core/launch.hpp"
#include "ember/kernels/grid.cuh"
#include "ops/reduce/reduce_dispatch.hpp"
#include "ops/reduce/reduce_launchers.hpp"
#include "softmax_cross_entropy.cuh"

namespace ember::ops::cuda {
namespace {

using kernels::softmax_detail::kThreads;
using kernels::softmax_detail::kWarpRowMaxCols;
using kernels::softmax_detail::kWarpRowsPerBlock;

using kernels::ceil_div;
using kernels::kMaxGridX;

unsigned elementwise_blocks(int64_t n) {
  return kernels::grid_stride_blocks(n, kThreads);
}

// Launches kernel<kTeam, T> with one row per team: warps, 8 rows to a block, for narrow rows;
// a block per row for wide ones.
template <class Launch>
void launch_row_teams(int64_t rows, int64_t cols, DType type, Launch&& launch_one) {
  with_element_type(type, [&](auto element) {
    using T = decltype(element);
    if (cols <= kWarpRowMaxCols) {
      launch_one.template operator()<32, T>(
          dim3(static_cast<unsigned>(std::min(ceil_div(rows, kWarpRowsPerBlock), kMaxGridX))),
          dim3(32, kWarpRowsPerBlock));
    } else {
      launch_one.template operator()<kThreads, T>(
          dim3(static_cast<unsigned>(std::min(rows, kMaxGridX))), dim3(kThreads, 1));
    }
  });
}

}  // namespace

size_t softmax_xent_forward_scratch_bytes(int64_t rows) {
  return static_cast<size_t>(rows) * sizeof(double);
}

void launch_softmax_xent_forward(const void* logits, DType type, const void* labels,
                                 bool labels_i64, int64_t rows, int64_t cols, float* probs,
                                 float* loss, void* scratch, cudaStream_t stream) {
  auto* row_loss = static_cast<double*>(scratch);
  launch_row_teams(rows, cols, type, [&]<int kTeam, class T>(dim3 grid, dim3 block) {
    launch(kernels::softmax_xent_forward_kernel<kTeam, T>, grid, block, 0, stream,
           static_cast<const T*>(logits), labels, labels_i64, rows, cols, probs, row_loss);
  });
  launch(kernels::softmax_xent_loss_kernel<kThreads>, dim3(1), dim3(kThreads), 0, stream,
         static_cast<const double*>(row_loss), rows, loss);
}

void launch_softmax_xent_backward(void* dlogits, DType type, const float* probs, const void* labels,
                                  bool labels_i64, int64_t rows, int64_t cols, float scale,
                                  cudaStream_t stream) {
  with_element_type(type, [&](auto element) {
    using T = decltype(element);
    launch(kernels::softmax_xent_backward_kernel<kThreads, T>,
           dim3(elementwise_blocks(rows * cols)), dim3(kThreads), 0, stream,
           static_cast<T*>(dlogits), probs, labels, labels_i64, rows, cols, scale);
  });
}

void launch_argmax(const void* x, DType type, int64_t rows, int64_t cols, void* out, bool out_i64,
                   const void* labels, bool labels_i64, unsigned long long* correct,
                   cudaStream_t stream) {
  launch_row_teams(rows, cols, type, [&]<int kTeam, class T>(dim3 grid, dim3 block) {
    launch(kernels::argmax_kernel<kTeam, T>, grid, block, 0, stream, static_cast<const T*>(x), rows,
           cols, out, out_i64, labels, labels_i64, correct);
  });
}

}  // namespace ember::ops::cuda
