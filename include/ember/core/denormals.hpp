// Subnormal (denormal) floats on the CPU backend: flushed to zero by default.
//
// Why: Intel cores take a microcode assist of about a hundred cycles for every float operation
// that reads or produces a subnormal; AMD Zen 4 does not. Training makes them: AdamW's moments
// of parameters whose gradients stay zero (dead ReLU units) decay by beta1 and beta2 each step
// into the subnormal range, and on an Intel Xeon train_mlp's step time tripled from step ~650 on.
//
// What ember does: each of its CPU compute loops (the pointwise ops, matmul and its epilogue,
// the reductions, layer norm, softmax cross-entropy, the optimizers' steps, gradient clipping,
// the grad scaler's check) runs with the x86 MXCSR bits FTZ (a subnormal result is written as
// zero) and DAZ (a subnormal input is read as zero) set on every thread of the loop, and
// restores the thread's previous bits when the loop ends: the program's own code and threads keep
// their floating-point environment. Loops that only move or convert bits are unaffected.
//
// What it changes: CPU results whose exact value involves a subnormal (magnitude below
// 1.1754944e-38 in f32 or 2.2250738585072014e-308 in double; f16 and bf16 values are widened to
// f32 first, where every f16 value is normal). These are results ember computes once again with
// the same bits at any thread count. A GPU keeps subnormals (ember's CUDA kernels are built
// without -ftz, as PyTorch's), so CPU and GPU results agree bitwise only on data free of
// subnormals, or with flushing turned off.
//
// Turning it off: set_flush_denormals(false), or EMBER_FLUSH_DENORMALS=0 in the environment
// (read when the library loads; an explicit set_flush_denormals wins over it). PyTorch's equivalent
// is torch.set_flush_denormal(True), off by default there. On CPUs other than x86-64 ember leaves
// the floating-point environment alone.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#if defined(__x86_64__) && !defined(__CUDA_ARCH__)
#include <xmmintrin.h>
#endif

namespace ember {

class Tensor;

void set_flush_denormals(bool flush);  // for every thread, from the next loop on
bool flush_denormals();                // whether ember's CPU loops flush subnormals

// The subnormal values in a float tensor (f32, f16 or bf16, on any device: a CUDA tensor is read
// through a host copy); 0 for other dtypes. A debugging aid: where do subnormals live in a
// training run (train_mlp --count-subnormals prints it for parameters, gradients and AdamW's
// moments)?
int64_t count_subnormals(const Tensor& t);

// Debug mode, off by default: a census of the subnormals in what every module inside an
// nn::Sequential outputs in forward, and the gradient it passes on in backward, by module path.
// Counting copies each of those tensors to the host: it is for finding where subnormals come
// from, not for fast runs. On with set_subnormal_census(true) or EMBER_COUNT_SUBNORMALS=1
// (train_mlp --count-subnormals prints it with the training state's counts).
struct SubnormalCount {
  std::string where;  // e.g. "2 (Linear) output", "2 (Linear) input gradient"
  int64_t subnormals = 0, elements = 0;
};
void set_subnormal_census(bool on);
bool subnormal_census();
// The counts since the last call, in the order first seen, and a fresh start.
std::vector<SubnormalCount> take_subnormal_census();

namespace detail {

void census_add(std::string_view where, const Tensor& t);  // where subnormal_census()

// 1 or 0 once chosen (set_flush_denormals, or a valid EMBER_FLUSH_DENORMALS read when the
// library loads); -1 for the default, on. A bad EMBER_FLUSH_DENORMALS is an Error thrown by
// read_flush_denormals_environment, called with the first tensor (outside any parallel region).
extern std::atomic<int> g_flush_denormals;
void read_flush_denormals_environment();

// Never throws (it runs at the start of parallel regions): -1 means the default, on.
inline bool flush_denormals_now() noexcept {
  return g_flush_denormals.load(std::memory_order_relaxed) != 0;
}

// Sets FTZ and DAZ on the calling thread for its lifetime, where ember flushes subnormals, and
// restores the thread's bits after. Every ember CPU loop makes one on each of its threads, with
// the mode its caller read once for the whole op (so that a set_flush_denormals on another
// thread cannot give one team's threads different modes).
class CpuFloatScope {
 public:
#if defined(__x86_64__) && !defined(__CUDA_ARCH__)
  static constexpr unsigned kFlushBits = 0x8040u;  // FTZ (bit 15) | DAZ (bit 6)
  CpuFloatScope() : CpuFloatScope(flush_denormals_now()) {}
  explicit CpuFloatScope(bool flush) : saved_(_mm_getcsr()) {
    const unsigned wanted = flush ? (saved_ | kFlushBits) : (saved_ & ~kFlushBits);
    changed_ = wanted != saved_;
    if (changed_) _mm_setcsr(wanted);
  }
  ~CpuFloatScope() {
    if (changed_) _mm_setcsr(saved_);
  }

 private:
  unsigned saved_;
  bool changed_ = false;
#else
  // Non-trivial, so that compilers do not call a scope variable unused.
  CpuFloatScope() {}
  explicit CpuFloatScope(bool) {}
  ~CpuFloatScope() {}
#endif
 public:
  CpuFloatScope(const CpuFloatScope&) = delete;
  CpuFloatScope& operator=(const CpuFloatScope&) = delete;
};

}  // namespace detail
}  // namespace ember
