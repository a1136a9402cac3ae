// ember::dynamic_shared<T>(): the launch's dynamic shared memory as an array of T.
// Under nvcc a plain view of `extern __shared__` memory (no checks); under the
// SIMT emulator (EMBER_SIMT) every index is checked against the launch's size.
#pragma once

#if defined(__CUDACC__)
#include <cstddef>

namespace ember {
template <class T>
struct SharedView {
  T* data;
  __device__ __forceinline__ T& operator[](std::ptrdiff_t index) const { return data[index]; }
};

template <class T>
__device__ __forceinline__ SharedView<T> dynamic_shared() {
  extern __shared__ __align__(16) unsigned char ember_dynamic_shared_storage[];
  return {reinterpret_cast<T*>(ember_dynamic_shared_storage)};
}
}  // namespace ember
#endif
// Under the SIMT emulator (EMBER_SIMT) this comes with the emulator's prelude
// (ember/simt/dynamic_shared.hpp through ember/simt/prelude.hpp), which kernel translation units include
// first: core does not depend on the emulator.
