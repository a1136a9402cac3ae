// LayerNorm on CUDA devices: launchers for layer_norm.cuh's kernels (arguments checked by
// layer_norm.cpp).
#include <algorithm>

#include "ember/core/check_cuda.hpp"
#include "ember/core/launch.hpp"
#include "ember/core/scratch.hpp"
#include "ops/common/element_type.hpp"
#include "ops/layer_norm/layer_norm.cuh"
#include "ops/layer_norm/layer_norm_cuda.hpp"
#include "ops/reduce/reduce_dispatch.hpp"

namespace ember::ops::cuda {
namespace {

using kernels::layer_norm_detail::kColumnThreads;
using kernels::layer_norm_detail::kThreads;
using kernels::layer_norm_detail::kWarpRowMaxCols;
using kernels::layer_norm_detail::kWarpRowsPerBlock;

constexpr int64_t kMaxGridX = int64_t{1} << 30;

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Calls launch.template operator()<kTeam>(grid, block): a warp per row for narrow rows, a block
// per row for wide ones.
template <class Launch>
void launch_row_teams(int64_t rows, int64_t cols, Launch&& launch_one) {
  if (cols <= kWarpRowMaxCols) {
    launch_one.template operator()<32>(
        dim3(static_cast<unsigned>(std::min(ceil_div(rows, kWarpRowsPerBlock), kMaxGridX))),
        dim3(32, kWarpRowsPerBlock));
  } else {
    launch_one.template operator()<kThreads>(dim3(static_cast<unsigned>(std::min(rows, kMaxGridX))),
                                             dim3(kThreads, 1));
  }
}

cudaStream_t enter_device(const Stream& stream) {
  EMBER_CUDA_CHECK(cudaSetDevice(stream.device().index()));
  return static_cast<cudaStream_t>(stream.native());
}

const float* f32_or_null(const TensorView& t) {
  return static_cast<const float*>(t.data);
}

}  // namespace

void layer_norm_forward(Stream& stream, const TensorView& y, const TensorView& mean,
                        const TensorView& rstd, const TensorView& x, const TensorView& gamma,
                        const TensorView& beta, float eps, int64_t rows, int64_t cols) {
  if (rows == 0) return;
  const cudaStream_t handle = enter_device(stream);
  with_element_type(element_type(x.dtype), [&](auto element) {
    using T = decltype(element);
    launch_row_teams(rows, cols, [&]<int kTeam>(dim3 grid, dim3 block) {
      launch(kernels::layer_norm_forward_kernel<kTeam, T, T>, grid, block, 0, handle,
             static_cast<const T*>(x.data), static_cast<T*>(y.data), f32_or_null(gamma),
             f32_or_null(beta), static_cast<float*>(mean.data), static_cast<float*>(rstd.data), eps,
             rows, cols);
    });
  });
}

void layer_norm_backward(Stream& stream, const TensorView& dx, const TensorView& dgamma,
                         const TensorView& dbeta, const TensorView& dy, const TensorView& x,
                         const TensorView& mean, const TensorView& rstd, const TensorView& gamma,
                         bool accumulate, int64_t rows, int64_t cols) {
  const cudaStream_t handle = enter_device(stream);
  const auto* m = static_cast<const float*>(mean.data);
  const auto* s = static_cast<const float*>(rstd.data);
  with_element_type(element_type(x.dtype), [&](auto x_element) {
    using TX = decltype(x_element);
    with_element_type(element_type(dy.dtype), [&](auto dy_element) {
      using TDy = decltype(dy_element);
      if (dx.data != nullptr && rows > 0) {
        launch_row_teams(rows, cols, [&]<int kTeam>(dim3 grid, dim3 block) {
          launch(kernels::layer_norm_input_grad_kernel<kTeam, TX, TDy, TX>, grid, block, 0, handle,
                 static_cast<const TX*>(x.data), static_cast<const TDy*>(dy.data),
                 f32_or_null(gamma), m, s, static_cast<TX*>(dx.data), rows, cols);
        });
      }
      if (dgamma.data == nullptr && dbeta.data == nullptr) return;
      const int64_t chunks = std::max<int64_t>(1, ceil_div(rows, layer_norm_math::kRowsPerChunk));
      const size_t bytes = static_cast<size_t>(2 * chunks * cols) * sizeof(double);
      const Scratch partials(stream, bytes);
      auto* p = static_cast<double*>(partials.data());
      const dim3 column_blocks(static_cast<unsigned>(ceil_div(cols, kColumnThreads)));
      if (rows > 0) {
        launch(kernels::layer_norm_param_partials_kernel<TX, TDy>,
               dim3(column_blocks.x, static_cast<unsigned>(std::min<int64_t>(chunks, 65535))),
               dim3(kColumnThreads), 0, handle, static_cast<const TX*>(x.data),
               static_cast<const TDy*>(dy.data), m, s, rows, cols, chunks, p);
      } else {
        EMBER_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, handle));
      }
      launch(kernels::layer_norm_param_finish_kernel, column_blocks, dim3(kColumnThreads), 0,
             handle, static_cast<const double*>(p), cols, chunks, static_cast<float*>(dgamma.data),
             static_cast<float*>(dbeta.data), accumulate);
    });
  });
}

}  // namespace ember::ops::cuda
