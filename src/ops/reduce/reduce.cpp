// Reductions: argument checks, then the device's implementation.
#include "ember/ops/reduce.hpp"
#include "ember/core/profile.hpp"

#include <string_view>

#include "ember/ops/check.hpp"
#include "ops/common/cpu_ops.hpp"
#if EMBER_WITH_CUDA
#include "ops/reduce/reduce_cuda.hpp"
#endif

namespace ember::ops {

void sum(Stream& stream, const TensorView& out, const TensorView& x, const ReduceOptions& options) {
  EMBER_OP_RANGE("sum");
  constexpr std::string_view kOp = "ops::sum";
  mark_written(out);
  detail::check_devices(kOp, stream, {&out, &x});
  detail::check_scalar(kOp, "out", out, DType::f32);
  detail::check_floating(kOp, "x", x);
  detail::check_overlap(kOp, out, x);
  if (stream.device().is_cpu()) {
    cpu::sum(out, x, options.accumulate);
    return;
  }
#if EMBER_WITH_CUDA
  cuda::sum(stream, out, x, options.accumulate);
#else
  detail::no_cuda_implementation(kOp);
#endif
}

void column_sums(Stream& stream, const TensorView& out, const TensorView& x,
                 const ReduceOptions& options) {
  EMBER_OP_RANGE("column_sums");
  constexpr std::string_view kOp = "ops::column_sums";
  mark_written(out);
  detail::check_devices(kOp, stream, {&out, &x});
  detail::check_dtype(kOp, "out", out, DType::f32);
  detail::check_floating(kOp, "x", x);
  EMBER_CHECK(x.rank() >= 1, "{}: x must have at least one dimension (the rows), not {}", kOp,
              x.describe());
  // out is [N] with N = x.row_numel(), or x's shape without its first dimension.
  const int64_t cols = x.shape.row_numel();
  bool out_ok = out.rank() == 1 && out.shape[0] == cols;
  if (!out_ok && out.rank() == x.rank() - 1) {
    out_ok = true;
    for (int axis = 0; axis < out.rank(); ++axis)
      out_ok = out_ok && out.shape[axis] == x.shape[axis + 1];
  }
  EMBER_CHECK(out_ok, "{}: out must be [{}] (one sum per column of x), not {}; x is {}", kOp, cols,
              out.describe(), x.describe());
  detail::check_overlap(kOp, out, x);
  if (stream.device().is_cpu()) {
    cpu::column_sums(out, x, options.accumulate);
    return;
  }
#if EMBER_WITH_CUDA
  cuda::column_sums(stream, out, x, options.accumulate);
#else
  detail::no_cuda_implementation(kOp);
#endif
}

void max(Stream& stream, const TensorView& out, const TensorView& x) {
  EMBER_OP_RANGE("max");
  constexpr std::string_view kOp = "ops::max";
  mark_written(out);
  detail::check_devices(kOp, stream, {&out, &x});
  detail::check_scalar(kOp, "out", out, DType::f32);
  detail::check_floating(kOp, "x", x);
  EMBER_CHECK(x.numel() > 0, "{}: x {} is empty, and an empty tensor has no largest element", kOp,
              x.describe());
  detail::check_overlap(kOp, out, x);
  if (stream.device().is_cpu()) {
    cpu::max(out, x);
    return;
  }
#if EMBER_WITH_CUDA
  cuda::max(stream, out, x);
#else
  detail::no_cuda_implementation(kOp);
#endif
}

}  // namespace ember::ops
