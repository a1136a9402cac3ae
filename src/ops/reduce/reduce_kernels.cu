// Launchers for ops::sum, ops::max and ops::column_sums (kernels/reduce.cuh). Grid sizes
// depend only on the shape, so the combine order, and with it every bit of the result, is the same
// on any GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "ember/core/launch.hpp"
#include "ember/kernels/grid.cuh"
#include "ember/kernels/reduce.cuh"
#include "ops/reduce/reduce_dispatch.hpp"
#include "ops/reduce/reduce_launchers.hpp"

namespace ember::ops::cuda {
namespace {

using kernels::reduce_detail::kChunkRows;
using kernels::reduce_detail::kColumnTile;
using kernels::reduce_detail::kRowSlices;
using kernels::reduce_detail::kThreads;

// sum and max: at least 16 elements per thread, at most 1024 blocks (a few per SM on any GPU,
// and few enough partials for one block to combine).
constexpr int64_t kElementsPerThread = 16;
constexpr int64_t kMaxBlocks = 1024;
constexpr int64_t kMaxGridY = 65535;

using kernels::ceil_div;

int whole_blocks(int64_t n) {
  return static_cast<int>(
      std::clamp(ceil_div(n, kThreads * kElementsPerThread), int64_t{1}, kMaxBlocks));
}

}  // namespace

size_t sum_scratch_bytes(int64_t n) {
  return static_cast<size_t>(whole_blocks(n)) * sizeof(double);
}

void launch_sum(const void* x, DType type, int64_t n, float* out, bool accumulate, void* scratch,
                cudaStream_t stream) {
  const int blocks = whole_blocks(n);
  auto* partials = static_cast<double*>(scratch);
  with_element_type(type, [&](auto element) {
    using T = decltype(element);
    launch(kernels::sum_partials_kernel<T>, dim3(blocks), dim3(kThreads), 0, stream,
           static_cast<const T*>(x), n, partials);
  });
  launch(kernels::sum_finish_kernel<kThreads>, dim3(1), dim3(kThreads), 0, stream,
         static_cast<const double*>(partials), blocks, out, accumulate);
}

size_t max_scratch_bytes(int64_t n) {
  return static_cast<size_t>(whole_blocks(n)) * (sizeof(int64_t) + sizeof(float));
}

void launch_max(const void* x, DType type, int64_t n, float* out, void* scratch,
                cudaStream_t stream) {
  const int blocks = whole_blocks(n);
  auto* keys = static_cast<int64_t*>(scratch);  // first: 8-byte aligned
  auto* values = reinterpret_cast<float*>(keys + blocks);
  with_element_type(type, [&](auto element) {
    using T = decltype(element);
    launch(kernels::max_partials_kernel<T>, dim3(blocks), dim3(kThreads), 0, stream,
           static_cast<const T*>(x), n, values, keys);
  });
  launch(kernels::max_finish_kernel<kThreads>, dim3(1), dim3(kThreads), 0, stream,
         static_cast<const float*>(values), static_cast<const int64_t*>(keys), blocks, out);
}

size_t column_sums_scratch_bytes(int64_t rows, int64_t cols) {
  const int64_t chunks = ceil_div(rows, kChunkRows);
  return chunks > 1 ? static_cast<size_t>(chunks * cols) * sizeof(double) : 0;
}

void launch_column_sums(const void* x, DType type, int64_t rows, int64_t cols, float* out,
                        bool accumulate, void* scratch, cudaStream_t stream) {
  const int64_t chunks = ceil_div(rows, kChunkRows);
  auto* partials = static_cast<double*>(scratch);  // null with one chunk
  const dim3 grid(static_cast<unsigned>(ceil_div(cols, kColumnTile)),
                  static_cast<unsigned>(std::min(chunks, kMaxGridY)));
  with_element_type(type, [&](auto element) {
    using T = decltype(element);
    launch(kernels::column_sums_partials_kernel<T>, grid, dim3(kColumnTile, kRowSlices), 0, stream,
           static_cast<const T*>(x), rows, cols, partials, out, accumulate);
  });
  if (chunks > 1) {
    const auto blocks = static_cast<unsigned>(std::min(ceil_div(cols, kThreads), kMaxGridY));
    launch(kernels::column_sums_finish_kernel<kThreads>, dim3(blocks), dim3(kThreads), 0, stream,
           static_cast<const double*>(partials), chunks, cols, out, accumulate);
  }
}

}  // namespace ember::ops::cuda
