// ember::launch under emulation: validates the configuration like CUDA, then
// submits the grid to the stream (ember::simt::stream_submit).
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "ember/simt/cuda_types.hpp"
#include "ember/simt/race_check.hpp"
#include "ember/simt/runtime.hpp"

namespace ember {
namespace simt::detail {

// What a kernel parameter lets the kernel touch, for the stream-race checker: a pointer (read
// through const T*, written through T*); a struct that says so itself (an overload
// simt_accesses(const T&, std::vector<Access>&) found by argument-dependent lookup); else the
// pointer-sized words of a struct (any may be a pointer; the checker keeps those into device
// memory, as writes).
template <class P>
void add_accesses(std::vector<Access>& out, const P& value) {
  if constexpr (requires { simt_accesses(value, out); }) {
    simt_accesses(value, out);
  } else if constexpr (std::is_pointer_v<P>) {
    using T = std::remove_pointer_t<P>;
    if constexpr (!std::is_function_v<T>) {
      out.push_back({static_cast<const void*>(value), 0, !std::is_const_v<T>});
    }
  } else if constexpr (std::is_class_v<P> && std::is_trivially_copyable_v<P> &&
                       sizeof(P) >= sizeof(void*) && alignof(P) >= alignof(void*)) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(&value);
    for (size_t offset = 0; offset + sizeof(void*) <= sizeof(P); offset += sizeof(void*)) {
      const void* word = nullptr;
      std::memcpy(&word, bytes + offset, sizeof word);
      if (word != nullptr) out.push_back({word, 0, true});
    }
  }
}

}  // namespace simt::detail

template <class... Params, class... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
            cudaStream_t stream, Args&&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args),
                "ember::launch: pass exactly one argument per kernel parameter");
  simt::LaunchConfig config{simt::kernel_name(reinterpret_cast<void (*)()>(kernel)), grid, block,
                            shared_bytes, reinterpret_cast<const void*>(kernel)};
  simt::validate_launch(config);
  // Each emulated thread gets its own copy of the parameters, as on a GPU.
  auto params = std::make_shared<std::tuple<std::decay_t<Params>...>>(
      static_cast<std::decay_t<Params>>(std::forward<Args>(args))...);
  std::vector<simt::Access> accesses;
  if (simt::race_check_enabled()) {
    std::apply([&](const auto&... p) { (simt::detail::add_accesses(accesses, p), ...); }, *params);
  }
  std::string what = "kernel " + config.kernel;
  simt::stream_submit(
      stream,
      [config = std::move(config), kernel, params] {
        simt::run_grid(config, [&] {
          std::tuple<std::decay_t<Params>...> copy = *params;
          std::apply(kernel, std::move(copy));
        });
      },
      std::move(accesses), std::move(what));
}

}  // namespace ember
