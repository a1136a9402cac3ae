// ops::sum, ops::column_sums and ops::max on CUDA devices: scratch for the partial results, then
// the two-phase kernels of kernels/reduce.cuh.
#if EMBER_WITH_CUDA
#include "ops/reduce/reduce_cuda.hpp"

#include "ember/core/check_cuda.hpp"
#include "ember/core/scratch.hpp"

namespace ember::ops::cuda {

cudaStream_t enter(const Stream& stream) {
  EMBER_CUDA_CHECK(cudaSetDevice(stream.device().index()));
  return static_cast<cudaStream_t>(stream.native());
}

void sum(Stream& stream, const TensorView& out, const TensorView& x, bool accumulate) {
  const int64_t n = x.numel();
  if (n == 0 && accumulate) return;  // out + 0 would turn -0 into +0 (as on the CPU)
  const cudaStream_t handle = enter(stream);
  if (n == 0) {
    EMBER_CUDA_CHECK(cudaMemsetAsync(out.data, 0, sizeof(float), handle));
    return;
  }
  const Scratch scratch(stream, sum_scratch_bytes(n));
  launch_sum(x.data, element_type(x.dtype), n, static_cast<float*>(out.data), accumulate,
             scratch.data(), handle);
}

void column_sums(Stream& stream, const TensorView& out, const TensorView& x, bool accumulate) {
  const int64_t cols = out.numel();
  if (cols == 0) return;
  const int64_t rows = x.numel() / cols;
  if (rows == 0 && accumulate) return;  // out + 0 would turn -0 into +0 (as on the CPU)
  const cudaStream_t handle = enter(stream);
  if (rows == 0) {
    EMBER_CUDA_CHECK(cudaMemsetAsync(out.data, 0, out.nbytes(), handle));
    return;
  }
  const Scratch scratch(stream, column_sums_scratch_bytes(rows, cols));
  launch_column_sums(x.data, element_type(x.dtype), rows, cols, static_cast<float*>(out.data),
                     accumulate, scratch.data(), handle);
}

void max(Stream& stream, const TensorView& out, const TensorView& x) {
  const cudaStream_t handle = enter(stream);
  const int64_t n = x.numel();
  const Scratch scratch(stream, max_scratch_bytes(n));
  launch_max(x.data, element_type(x.dtype), n, static_cast<float*>(out.data), scratch.data(),
             handle);
}

}  // namespace ember::ops::cuda
#endif  // EMBER_WITH_CUDA
