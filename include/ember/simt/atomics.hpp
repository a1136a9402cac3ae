// CUDA atomics as real host atomics (std::atomic_ref), since blocks run in
// parallel on several OS threads. Each returns the old value, as in CUDA.
#pragma once

#include <atomic>
#include <bit>
#include <cstdint>

namespace ember::simt::detail {

// Spin-waits: a thread that keeps calling atomics without reaching a barrier may wait for
// another thread. Every 1024 atomics it checks the clock (scheduler.cpp): after 20 ms it lets
// the block's other threads run (as a GPU's independent thread scheduling would), and when the
// block has made no progress for the watchdog's time it throws an Error naming the kernel and
// block instead of hanging.
void spin_check();
// Shared by the fibers (emulated threads) of the OS thread that runs them: relaxed atomics, so
// that ThreadSanitizer sees no race between two emulated threads that both use atomics.
inline thread_local std::atomic<unsigned> t_atomics_since_check{0};
inline void atomic_poll() {
  if (t_atomics_since_check.fetch_add(1, std::memory_order_relaxed) + 1 >= 1024) {
    t_atomics_since_check.store(0, std::memory_order_relaxed);
    spin_check();
  }
}

template <class T, class F>
T atomic_update(T* address, F next) {
  atomic_poll();
  std::atomic_ref<T> ref(*address);
  T old = ref.load(std::memory_order_relaxed);
  while (!ref.compare_exchange_weak(old, next(old), std::memory_order_relaxed)) {
  }
  return old;
}
}  // namespace ember::simt::detail

#define EMBER_SIMT_ATOMIC_ARITH(T)                                                             \
  inline T atomicAdd(T* address, T val) {                                                      \
    ember::simt::detail::atomic_poll();                                                        \
    return std::atomic_ref<T>(*address).fetch_add(val, std::memory_order_relaxed);             \
  }                                                                                            \
  inline T atomicExch(T* address, T val) {                                                     \
    ember::simt::detail::atomic_poll();                                                        \
    return std::atomic_ref<T>(*address).exchange(val, std::memory_order_relaxed);              \
  }                                                                                            \
  inline T atomicMax(T* address, T val) {                                                      \
    return ember::simt::detail::atomic_update(address,                                         \
                                              [val](T old) { return old < val ? val : old; }); \
  }                                                                                            \
  inline T atomicMin(T* address, T val) {                                                      \
    return ember::simt::detail::atomic_update(address,                                         \
                                              [val](T old) { return val < old ? val : old; }); \
  }

EMBER_SIMT_ATOMIC_ARITH(int)
EMBER_SIMT_ATOMIC_ARITH(unsigned)
EMBER_SIMT_ATOMIC_ARITH(unsigned long long)
EMBER_SIMT_ATOMIC_ARITH(float)
EMBER_SIMT_ATOMIC_ARITH(double)
#undef EMBER_SIMT_ATOMIC_ARITH

inline int atomicSub(int* address, int val) {
  return std::atomic_ref<int>(*address).fetch_sub(val, std::memory_order_relaxed);
}
inline unsigned atomicSub(unsigned* address, unsigned val) {
  return std::atomic_ref<unsigned>(*address).fetch_sub(val, std::memory_order_relaxed);
}
inline float atomicSub(float* address, float val) {
  return std::atomic_ref<float>(*address).fetch_sub(val, std::memory_order_relaxed);
}
inline double atomicSub(double* address, double val) {
  return std::atomic_ref<double>(*address).fetch_sub(val, std::memory_order_relaxed);
}

template <class T>
inline T atomic_cas_impl(T* address, T compare, T val) {
  ember::simt::detail::atomic_poll();
  std::atomic_ref<T>(*address).compare_exchange_strong(compare, val, std::memory_order_relaxed);
  return compare;  // the old value either way
}
inline int atomicCAS(int* address, int compare, int val) {
  return atomic_cas_impl(address, compare, val);
}
inline unsigned atomicCAS(unsigned* address, unsigned compare, unsigned val) {
  return atomic_cas_impl(address, compare, val);
}
inline unsigned long long atomicCAS(unsigned long long* address, unsigned long long compare,
                                    unsigned long long val) {
  return atomic_cas_impl(address, compare, val);
}
// CUDA's float/double CAS compares bit patterns: do the same.
inline float atomicCAS(float* address, float compare, float val) {
  auto* bits = reinterpret_cast<uint32_t*>(address);
  return std::bit_cast<float>(
      atomic_cas_impl(bits, std::bit_cast<uint32_t>(compare), std::bit_cast<uint32_t>(val)));
}
inline double atomicCAS(double* address, double compare, double val) {
  auto* bits = reinterpret_cast<uint64_t*>(address);
  return std::bit_cast<double>(
      atomic_cas_impl(bits, std::bit_cast<uint64_t>(compare), std::bit_cast<uint64_t>(val)));
}
