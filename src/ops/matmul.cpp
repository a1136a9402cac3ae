// ops::matmul: argument checks, then the device's implementation.
#include "ember/ops/matmul.hpp"

#include "cpu/matmul_cpu.hpp"
#include "ember/ops/check.hpp"

namespace ember::ops {

void matmul(Stream& stream, const TensorView& c, const TensorView& a, const TensorView& b,
            const MatmulOptions& options) {
  constexpr const char* kOp = "ops::matmul";
  detail::check_devices(kOp, stream, {&c, &a, &b});
  detail::check_rank(kOp, "A", a, 2);
  detail::check_rank(kOp, "B", b, 2);
  detail::check_rank(kOp, "C", c, 2);
  detail::check_floating(kOp, "A", a);
  detail::check_floating(kOp, "B", b);
  detail::check_floating(kOp, "C", c);
  EMBER_CHECK(a.dtype == b.dtype, "{}: A and B must have the same dtype, not {} and {}", kOp,
              a.describe(), b.describe());

  const int64_t m = options.transpose_a ? a.shape[1] : a.shape[0];
  const int64_t k = options.transpose_a ? a.shape[0] : a.shape[1];
  const int64_t kb = options.transpose_b ? b.shape[1] : b.shape[0];
  const int64_t n = options.transpose_b ? b.shape[0] : b.shape[1];
  EMBER_CHECK(k == kb,
              "{}: inner dimensions differ: op(A) is [{}, {}] and op(B) is [{}, {}] "
              "(A {}, B {}, transpose_a={}, transpose_b={})",
              kOp, m, k, kb, n, a.describe(), b.describe(), options.transpose_a,
              options.transpose_b);
  EMBER_CHECK(c.shape[0] == m && c.shape[1] == n, "{}: C is {} but op(A) * op(B) is [{}, {}]", kOp,
              c.describe(), m, n);
  if (options.bias.data != nullptr) {
    detail::check_devices(kOp, stream, {&options.bias});
    detail::check_floating(kOp, "bias", options.bias);
    EMBER_CHECK(options.bias.rank() == 1 && options.bias.shape[0] == n,
                "{}: bias must be [{}] to match C {}, not {}", kOp, n, c.describe(),
                options.bias.describe());
  }
  if (options.pre_activation.data != nullptr) {
    detail::check_devices(kOp, stream, {&options.pre_activation});
    detail::check_floating(kOp, "pre_activation", options.pre_activation);
    EMBER_CHECK(options.pre_activation.shape == c.shape,
                "{}: pre_activation must have C's shape {}, not {}", kOp, c.shape.to_string(),
                options.pre_activation.describe());
  }

  if (stream.device().is_cpu()) {
    cpu::matmul(c, a, b, m, n, k, options);
  } else {
    detail::no_cuda_implementation(kOp);
  }
}

}  // namespace ember::ops
