// The device-side check of index operands (ops/common/index_check.hpp): first_bad_index_kernel
// writes a verdict, which is copied to pinned host memory on the stream and read after the
// stream's next synchronize(), which then throws the CPU backend's error for the first bad row.
#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "ember/core/check_cuda.hpp"
#include "ember/core/launch.hpp"
#include "ember/core/scratch.hpp"
#include "ember/kernels/grid.cuh"
#include "ember/kernels/index_check.cuh"
#include "ops/common/index_check.hpp"

namespace ember::ops::cuda {
namespace {

constexpr int kThreads = 256;

// Pinned host words the checks' verdicts are copied into, two per check: one cudaMallocHost for
// the process, so that no check allocates (cudaMallocHost synchronizes).
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

}  // namespace

void check_indices(Stream& stream, std::string_view op, std::string_view noun,
                   const TensorView& indices, int64_t bound) {
  const int64_t rows = indices.numel();
  if (rows == 0) return;
  EMBER_CUDA_CHECK(cudaSetDevice(stream.device().index()));
  const auto handle = static_cast<cudaStream_t>(stream.native());
  unsigned long long* slot = verdict_slots().acquire();
  if (slot == nullptr) {  // every slot waits for a synchronize: run their checks now
    stream.synchronize();
    slot = verdict_slots().acquire();
    EMBER_CHECK(slot != nullptr,
                "{}: more than {} index checks wait for other streams to synchronize; call "
                "synchronize() on them",
                op, VerdictSlots::kSlots);
  }
  const bool i64 = indices.dtype == DType::i64;
  {
    const Scratch scratch(stream, 2 * sizeof(unsigned long long));
    auto* verdict = static_cast<unsigned long long*>(scratch.data());
    EMBER_CUDA_CHECK(cudaMemsetAsync(verdict, 0xff, 2 * sizeof(*verdict), handle));
    launch(kernels::first_bad_index_kernel<kThreads>,
           dim3(kernels::grid_stride_blocks(rows, kThreads)), dim3(kThreads), 0, handle,
           indices.data, i64, rows, bound, verdict);
    if (i64) {
      launch(kernels::bad_index_value_kernel<int64_t>, dim3(1), dim3(1), 0, handle,
             static_cast<const int64_t*>(indices.data), verdict);
    } else {
      launch(kernels::bad_index_value_kernel<int32_t>, dim3(1), dim3(1), 0, handle,
             static_cast<const int32_t*>(indices.data), verdict);
    }
    EMBER_CUDA_CHECK(cudaMemcpyAsync(slot, verdict, 2 * sizeof(unsigned long long),
                                     cudaMemcpyDeviceToHost, handle));
  }
  check_after_synchronize(stream, [slot, op = std::string(op), noun = std::string(noun), bound,
                                   what = indices.describe(), i64] {
    const unsigned long long row = slot[0], raw = slot[1];
    verdict_slots().release(slot);
    if (row == ~0ull) return;
    const int64_t index = i64 ? static_cast<int64_t>(raw)
                              : static_cast<int64_t>(static_cast<int32_t>(raw & 0xffffffffu));
    EMBER_THROW("{}: {} {} in row {} is out of range [0, {}) ({}s {})", op, noun, index,
                static_cast<int64_t>(row), bound, noun, what);
  });
}

}  // namespace ember::ops::cuda
