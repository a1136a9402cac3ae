// Softmax + cross-entropy, argmax and count_correct on CUDA devices. Labels are checked on the
// device without a host wait: a bad label throws the CPU backend's error from the stream's next
// synchronize() (check_labels).
#if EMBER_WITH_CUDA
#include "ops/softmax_cross_entropy/softmax_cross_entropy_cuda.hpp"

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "ember/core/check_cuda.hpp"
#include "ember/core/scratch.hpp"
#include "ops/reduce/reduce_cuda.hpp"
#include "ops/reduce/reduce_launchers.hpp"

namespace ember::ops::cuda {
namespace {

bool is_i64(const TensorView& t) {
  return t.dtype == DType::i64;
}

// Pinned host words the label checks' verdicts are copied into, two per check: one
// cudaMallocHost for the process, so that no check allocates (cudaMallocHost synchronizes).
class VerdictSlots {
 public:
  static constexpr size_t kSlots = 1024;
  unsigned long long* acquire() {
    std::lock_guard lock(mutex_);
    if (base_ == nullptr) {
      void* p = nullptr;
      EMBER_CUDA_CHECK(cudaMallocHost(&p, kSlots * 2 * sizeof(unsigned long long)));
      base_ = static_cast<unsigned long long*>(p);
      for (size_t i = kSlots; i-- > 0;) free_.push_back(base_ + 2 * i);
    }
    if (free_.empty()) return nullptr;
    unsigned long long* slot = free_.back();
    free_.pop_back();
    return slot;
  }
  void release(unsigned long long* slot) {
    std::lock_guard lock(mutex_);
    free_.push_back(slot);
  }

 private:
  std::mutex mutex_;
  unsigned long long* base_ = nullptr;  // never freed: checks may run during static destruction
  std::vector<unsigned long long*> free_;
};

VerdictSlots& verdict_slots() {
  static auto* slots = new VerdictSlots;
  return *slots;
}

// Checks the labels on the device, without waiting: the verdict is copied to pinned host
// memory on the stream and read after the stream's next synchronize() (Tensor::item, ...),
// which then throws the CPU backend's error for the first bad row. The kernels meanwhile read
// no logit through a bad label (the loss comes out nan).
void check_labels(Stream& stream, cudaStream_t handle, std::string_view op,
                  const TensorView& labels, int64_t classes) {
  const int64_t rows = labels.numel();
  if (rows == 0) return;
  unsigned long long* slot = verdict_slots().acquire();
  if (slot == nullptr) {  // every slot waits for a synchronize: run their checks now
    stream.synchronize();
    slot = verdict_slots().acquire();
    EMBER_CHECK(slot != nullptr,
                "{}: more than {} label checks wait for other streams to synchronize; call "
                "synchronize() on them",
                op, VerdictSlots::kSlots);
  }
  {
    const Scratch scratch(stream, 2 * sizeof(unsigned long long));
    auto* verdict = static_cast<unsigned long long*>(scratch.data());
    launch_check_labels(labels.data, is_i64(labels), rows, classes, verdict, handle);
    EMBER_CUDA_CHECK(cudaMemcpyAsync(slot, verdict, 2 * sizeof(unsigned long long),
                                     cudaMemcpyDeviceToHost, handle));
  }
  check_after_synchronize(stream, [slot, op = std::string(op), classes, what = labels.describe(),
                                   i64 = is_i64(labels)] {
    const unsigned long long row = slot[0], raw = slot[1];
    verdict_slots().release(slot);
    if (row == ~0ull) return;
    const int64_t label = i64 ? static_cast<int64_t>(raw)
                              : static_cast<int64_t>(static_cast<int32_t>(raw & 0xffffffffu));
    EMBER_THROW("{}: label {} in row {} is out of range [0, {}) (labels {})", op, label,
                static_cast<int64_t>(row), classes, what);
  });
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
