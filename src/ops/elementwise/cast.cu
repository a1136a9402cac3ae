// Launcher for kernels/cast.cuh: ops::cast on CUDA between any two dtypes, one kernel
// instantiation per (destination, source) pair.
#include <cuda_runtime.h>

#include <type_traits>

#include "ember/core/launch.hpp"
#include "ember/kernels/cast.cuh"
#include "ember/ops/map.hpp"
#include "ops/elementwise/cast_cuda.hpp"

namespace ember::ops::cuda {
namespace {

// Calls f(std::integral_constant<DType, d>{}): a runtime dtype as a template argument.
template <class F>
void visit(DType d, F&& f) {
  switch (d) {
    case DType::f32:
      return f(std::integral_constant<DType, DType::f32>{});
    case DType::f16:
      return f(std::integral_constant<DType, DType::f16>{});
    case DType::bf16:
      return f(std::integral_constant<DType, DType::bf16>{});
    case DType::i32:
      return f(std::integral_constant<DType, DType::i32>{});
    case DType::i64:
      return f(std::integral_constant<DType, DType::i64>{});
    case DType::u8:
      return f(std::integral_constant<DType, DType::u8>{});
  }
}

}  // namespace

void convert(Stream& stream, const TensorView& out, const TensorView& in) {
  const int64_t n = in.numel();
  if (n == 0) return;
  if (out.data == in.data && out.dtype == in.dtype) return;       // in place, nothing to convert
  const int64_t max_blocks = detail::map_prepare_launch(stream);  // sets the device
  int64_t blocks = (n + kernels::kCastThreads - 1) / kernels::kCastThreads;
  if (blocks > max_blocks) blocks = max_blocks;
  const auto native = static_cast<cudaStream_t>(stream.native());
  visit(out.dtype, [&](auto dst) {
    visit(in.dtype, [&](auto src) {
      constexpr DType D = decltype(dst)::value;
      constexpr DType S = decltype(src)::value;
      launch(kernels::cast_kernel<D, S>, dim3(static_cast<unsigned>(blocks)),
             dim3(kernels::kCastThreads), 0, native,
             static_cast<kernels::cast_detail::Storage<D>*>(out.data),
             static_cast<const kernels::cast_detail::Storage<S>*>(in.data), n);
    });
  });
}

}  // namespace ember::ops::cuda
