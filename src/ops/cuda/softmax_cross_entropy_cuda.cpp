// Softmax + cross-entropy, argmax and count_correct on CUDA devices. Labels are checked on the
// device first; reading the verdict back synchronizes the stream once per call that takes labels,
// so that a bad label throws the CPU backend's error before any output is written.
#if EMBER_WITH_CUDA
#include "softmax_cross_entropy_cuda.hpp"

#include <cstdint>

#include "ember/core/check_cuda.hpp"
#include "reduce_cuda.hpp"
#include "reduce_launchers.hpp"
#include "scratch.hpp"

namespace ember::ops::cuda {
namespace {

bool is_i64(const TensorView& t) {
  return t.dtype == DType::i64;
}

// Throws, with the CPU backend's message, for the first row whose label is outside
// [0, classes). Waits for the stream.
void check_labels(const Stream& stream, cudaStream_t handle, std::string_view op,
                  const TensorView& labels, int64_t classes) {
  const int64_t rows = labels.numel();
  if (rows == 0) return;
  unsigned long long first_bad = 0;
  {
    const Scratch scratch(stream, sizeof(first_bad));
    auto* device_first_bad = static_cast<unsigned long long*>(scratch.data());
    launch_check_labels(labels.data, is_i64(labels), rows, classes, device_first_bad, handle);
    EMBER_CUDA_CHECK(cudaMemcpyAsync(&first_bad, device_first_bad, sizeof(first_bad),
                                     cudaMemcpyDeviceToHost, handle));
    EMBER_CUDA_CHECK(cudaStreamSynchronize(handle));
  }
  if (first_bad == ~0ull) return;
  const auto row = static_cast<int64_t>(first_bad);
  int64_t label = 0;
  if (is_i64(labels)) {
    EMBER_CUDA_CHECK(cudaMemcpy(&label, static_cast<const int64_t*>(labels.data) + row,
                                sizeof(int64_t), cudaMemcpyDeviceToHost));
  } else {
    int32_t label32 = 0;
    EMBER_CUDA_CHECK(cudaMemcpy(&label32, static_cast<const int32_t*>(labels.data) + row,
                                sizeof(int32_t), cudaMemcpyDeviceToHost));
    label = label32;
  }
  EMBER_THROW("{}: label {} in row {} is out of range [0, {}) (labels {})", op, label, row, classes,
              labels.describe());
}

}  // namespace

void softmax_cross_entropy_forward(Stream& stream, std::string_view op, const TensorView& loss,
                                   const TensorView& probs, const TensorView& logits,
                                   const TensorView& labels) {
  const cudaStream_t handle = enter(stream);
  const int64_t rows = logits.shape[0];
  const int64_t cols = logits.shape[1];
  check_labels(stream, handle, op, labels, cols);
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
  check_labels(stream, handle, op, labels, cols);
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
  check_labels(stream, handle, op, labels, logits.shape[1]);
  // The count is summed straight into `correct` (an i64 holds what the u64 atomics add).
  EMBER_CUDA_CHECK(cudaMemsetAsync(correct.data, 0, sizeof(int64_t), handle));
  if (rows == 0) return;
  launch_argmax(logits.data, element_type(logits.dtype), rows, logits.shape[1], nullptr, false,
                labels.data, is_i64(labels), static_cast<unsigned long long*>(correct.data),
                handle);
}

}  // namespace ember::ops::cuda
#endif  // EMBER_WITH_CUDA
