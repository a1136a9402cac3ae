// Dynamic shared memory under emulation: a per-block buffer of the launch's
// size; every index is checked against it.
#pragma once

#include <cstddef>

#include "ember/simt/context.hpp"

namespace ember {

namespace simt::detail {
struct DynamicShared {
  void* data;
  size_t bytes;
};
DynamicShared dynamic_shared_storage();
[[noreturn]] void dynamic_shared_out_of_range(std::ptrdiff_t index, size_t count, size_t elem_size);
}  // namespace simt::detail

template <class T>
struct SharedView {
  T* data;
  size_t count;
  T& operator[](std::ptrdiff_t index) const {
    if (index < 0 || static_cast<size_t>(index) >= count) [[unlikely]]
      simt::detail::dynamic_shared_out_of_range(index, count, sizeof(T));
    return data[index];
  }
};

// The launch's dynamic shared memory seen as an array of T.
template <class T>
SharedView<T> dynamic_shared() {
  const auto storage = simt::detail::dynamic_shared_storage();
  return {static_cast<T*>(storage.data), storage.bytes / sizeof(T)};
}

}  // namespace ember
