// ember::launch under emulation: validates the configuration like CUDA, then
// submits the grid to the stream (ember::simt::stream_submit).
#pragma once

#include <cstddef>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

#include "ember/simt/cuda_types.hpp"
#include "ember/simt/runtime.hpp"

namespace ember {

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
  simt::stream_submit(stream, [config = std::move(config), kernel, params] {
    simt::run_grid(config, [&] {
      std::tuple<std::decay_t<Params>...> copy = *params;
      std::apply(kernel, std::move(copy));
    });
  });
}

}  // namespace ember
