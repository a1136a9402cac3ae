// Softmax + cross-entropy, argmax and count_correct on CUDA devices. Labels are checked on the
// device without a host wait: a bad label throws the CPU backend's error from the stream's next
// synchronize() (ops/common/index_check.hpp).
#if EMBER_WITH_CUDA
#include "ops/softmax_cross_entropy/softmax_cross_entropy_cuda.hpp"

#include <cstdint>

#include "ember/core/check_cuda.hpp"
#include "ember/core/scratch.hpp"
#include "ops/common/index_check.hpp"
#include "ops/reduce/reduce_cuda.hpp"
#include "ops/reduce/reduce_launchers.hpp"

namespace ember::ops::cuda {
namespace {

bool is_i64(const TensorView& t) {
  return t.dtype == DType::i64;
}

}  // namespace

void softmax_cross_entropy_forward(Stream& stream, std::string_view op, const TensorView& loss,
                                   const TensorView& probs, const TensorView& logits,
                                   const TensorView& labels) {
  const cudaStream_t handle = enter(stream);
  const int64_t rows = logits.shape[0];
  const int64_t cols = logits.shape[1];
  check_indices(stream, op, "label", labels, cols);
  const Scratch scratch(stream, softmax_xent_forward_scratch_bytes(rows));
  launch_softmax_xent_forward(logits.data, element_type(logits.dtype), labels.data, is_i64(labels),
                              rows, cols, static_cast<float*>(probs.data),
                              static_cast<float*>(loss.data), scratch.data(), handle);
}

void softmax_cross_entropy_backward(Stream& stream, std::string_view op, const TensorView& dlogits,
                                    const TensorView& probs, const TensorView& labels,
                                    float dloss) {
  const cudaStream_t handle = enter(stream);
  const int64_t rows = probs.shape[0];
  const int64_t cols = probs.shape[1];
  check_indices(stream, op, "label", labels, cols);
  // The CPU's scale: dloss / B in double, rounded once.
  const auto scale = static_cast<float>(static_cast<double>(dloss) / static_cast<double>(rows));
  launch_softmax_xent_backward(dlogits.data, element_type(dlogits.dtype),
                               static_cast<const float*>(probs.data), labels.data, is_i64(labels),
                               rows, cols, scale, handle);
}

void argmax(Stream& stream, const TensorView& out, const TensorView& x) {
  const int64_t rows = x.shape[0];
  if (rows == 0) return;
  const cudaStream_t handle = enter(stream);
  launch_argmax(x.data, element_type(x.dtype), rows, x.shape[1], out.data, is_i64(out), nullptr,
                false, nullptr, handle);
}

void count_correct(Stream& stream, std::string_view op, const TensorView& correct,
                   const TensorView& logits, const TensorView& labels) {
  const cudaStream_t handle = enter(stream);
  const int64_t rows = logits.shape[0];
  check_indices(stream, op, "label", labels, logits.shape[1]);
  // The count is summed straight into `correct` (an i64 holds what the u64 atomics add).
  EMBER_CUDA_CHECK(cudaMemsetAsync(correct.data, 0, sizeof(int64_t), handle));
  if (rows == 0) return;
  launch_argmax(logits.data, element_type(logits.dtype), rows, logits.shape[1], nullptr, false,
                labels.data, is_i64(labels), static_cast<unsigned long long*>(correct.data),
                handle);
}

}  // namespace ember::ops::cuda
#endif  // EMBER_WITH_CUDA
