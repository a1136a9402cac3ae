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
namespace {

// A reduction's operands: out f32 (one element when `total`: sum and max), x floating, both on
// the stream's device.
void check_operands(std::string_view op, const Stream& stream, const TensorView& out,
                    const TensorView& x, bool total) {
  mark_written(out);
  detail::check_devices(op, stream, {{"out", out}, {"x", x}});
  if (total) {
    detail::check_scalar(op, "out", out, DType::f32);
  } else {
    detail::check_dtype(op, "out", out, DType::f32);
  }
  detail::check_floating(op, "x", x);
}

}  // namespace

void sum(Stream& stream, const TensorView& out, const TensorView& x, const ReduceOptions& options) {
  EMBER_OP_RANGE("sum");
  constexpr std::string_view kOp = "ops::sum";
  check_operands(kOp, stream, out, x, true);
  detail::check_overlap(kOp, {"out", out}, {"x", x});
  if (stream.device().is_cpu()) return cpu::sum(out, x, options.accumulate);
#if EMBER_WITH_CUDA
  cuda::sum(stream, out, x, options.accumulate);
#endif
}

void column_sums(Stream& stream, const TensorView& out, const TensorView& x,
                 const ReduceOptions& options) {
  EMBER_OP_RANGE("column_sums");
  constexpr std::string_view kOp = "ops::column_sums";
  check_operands(kOp, stream, out, x, false);
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
  detail::check_overlap(kOp, {"out", out}, {"x", x});
  if (stream.device().is_cpu()) return cpu::column_sums(out, x, options.accumulate);
#if EMBER_WITH_CUDA
  cuda::column_sums(stream, out, x, options.accumulate);
#endif
}

void max(Stream& stream, const TensorView& out, const TensorView& x) {
  EMBER_OP_RANGE("max");
  constexpr std::string_view kOp = "ops::max";
  check_operands(kOp, stream, out, x, true);
  EMBER_CHECK(x.numel() > 0, "{}: x {} is empty, and an empty tensor has no largest element", kOp,
              x.describe());
  detail::check_overlap(kOp, {"out", out}, {"x", x});
  if (stream.device().is_cpu()) return cpu::max(out, x);
#if EMBER_WITH_CUDA
  cuda::max(stream, out, x);
#endif
}

}  // namespace ember::ops
