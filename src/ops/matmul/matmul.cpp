// ops::matmul: argument checks, then the device's implementation.
#include "ember/ops/matmul.hpp"
#include "ember/core/profile.hpp"

#include <iterator>

#include "ember/core/enum_name.hpp"
#include "ember/ops/check.hpp"
#include "ops/matmul/matmul_cpu.hpp"
#include "ops/matmul/matmul_dims.hpp"
#if EMBER_WITH_CUDA
#include "ops/matmul/matmul_cuda.hpp"
#endif

namespace ember::ops {
namespace {

constexpr const char* kOp = "ops::matmul";

// The [rows, cols] of one batch entry of A or B (the last two dimensions).
int64_t rows_of(const TensorView& t) {
  return t.shape[t.rank() - 2];
}
int64_t cols_of(const TensorView& t) {
  return t.shape[t.rank() - 1];
}

detail::MatmulDims check_shapes(const TensorView& c, const TensorView& a, const TensorView& b,
                                const MatmulOptions& options) {
  EMBER_CHECK(c.rank() == 2 || c.rank() == 3, "{}: C must be [M, N] or [batch, M, N], not {}", kOp,
              c.describe());
  const bool batched = c.rank() == 3;
  for (const auto& [name, t] : {std::pair{"A", &a}, std::pair{"B", &b}}) {
    EMBER_CHECK(t->rank() == 2 || (batched && t->rank() == 3), "{}: {} must have rank 2{}, not {}",
                kOp, name, batched ? " or 3" : "", t->describe());
    EMBER_CHECK(t->rank() == 2 || t->shape[0] == c.shape[0],
                "{}: {} has batch size {} but C {} has {}", kOp, name, t->shape[0], c.describe(),
                c.shape[0]);
  }
  detail::MatmulDims d;
  d.batch = batched ? c.shape[0] : 1;
  d.a_batched = a.rank() == 3;
  d.b_batched = b.rank() == 3;
  d.m = options.transpose_a ? cols_of(a) : rows_of(a);
  d.k = options.transpose_a ? rows_of(a) : cols_of(a);
  const int64_t kb = options.transpose_b ? cols_of(b) : rows_of(b);
  d.n = options.transpose_b ? rows_of(b) : cols_of(b);
  EMBER_CHECK(d.k == kb,
              "{}: inner dimensions differ: op(A) is [{}, {}] and op(B) is [{}, {}] "
              "(A {}, B {}, transpose_a={}, transpose_b={})",
              kOp, d.m, d.k, kb, d.n, a.describe(), b.describe(), options.transpose_a,
              options.transpose_b);
  EMBER_CHECK(rows_of(c) == d.m && cols_of(c) == d.n, "{}: C is {} but op(A) * op(B) is [{}, {}]",
              kOp, c.describe(), d.m, d.n);
  return d;
}

// An optional epilogue tensor: absent, or a floating tensor of `shape` on the stream's device
// that shares no memory with the product's inputs.
bool check_optional(Stream& stream, std::string_view name, const TensorView& t, const Shape& shape,
                    const TensorView& a, const TensorView& b) {
  if (!detail::present(t)) return false;
  detail::check_devices(kOp, stream, {{name, t}});
  detail::check_floating(kOp, name, t);
  EMBER_CHECK(t.shape == shape, "{}: {} must be {}, not {}", kOp, name, shape.to_string(),
              t.describe());
  detail::check_disjoint(kOp, {name, t}, {"a", a});
  detail::check_disjoint(kOp, {name, t}, {"b", b});
  return true;
}

}  // namespace

const char* backend_name(MatmulBackend backend) {
  static constexpr const char* kNames[] = {"automatic", "tiled", "cublaslt", "cpu"};
  static_assert(std::size(kNames) == static_cast<size_t>(MatmulBackend::cpu) + 1);
  return enum_name(backend, kNames);
}

void matmul(Stream& stream, const TensorView& c, const TensorView& a, const TensorView& b,
            const MatmulOptions& options) {
  EMBER_OP_RANGE("matmul");
  detail::check_devices(kOp, stream, {{"c", c}, {"a", a}, {"b", b}});
  mark_written(c);
  mark_written(options.pre_activation);
  mark_written(options.bias_grad);
  detail::check_floating(kOp, "A", a);
  detail::check_floating(kOp, "B", b);
  detail::check_floating(kOp, "C", c);
  EMBER_CHECK(a.dtype == b.dtype, "{}: A and B must have the same dtype, not {} and {}", kOp,
              a.describe(), b.describe());
  const detail::MatmulDims dims = check_shapes(c, a, b, options);
  detail::check_disjoint(kOp, {"c", c}, {"a", a});
  detail::check_disjoint(kOp, {"c", c}, {"b", b});

  if (detail::present(options.bias)) {
    detail::check_devices(kOp, stream, {{"bias", options.bias}});
    detail::check_floating(kOp, "bias", options.bias);
    EMBER_CHECK(options.bias.rank() == 1 && options.bias.shape[0] == dims.n,
                "{}: bias must be [{}] to match C {}, not {}", kOp, dims.n, c.describe(),
                options.bias.describe());
    // The epilogue's inputs are read while its outputs are written (tile by tile on the CPU).
    detail::check_disjoint(kOp, {"c", c}, {"bias", options.bias});
    detail::check_disjoint(kOp, {"pre_activation", options.pre_activation}, {"bias", options.bias});
  }
  if (check_optional(stream, "pre_activation", options.pre_activation, c.shape, a, b)) {
    detail::check_disjoint(kOp, {"pre_activation", options.pre_activation}, {"c", c});
  }
  const bool has_input =
      check_optional(stream, "activation_input", options.activation_input, c.shape, a, b);
  if (has_input) {
    detail::check_disjoint(kOp, {"c", c}, {"activation_input", options.activation_input});
    detail::check_disjoint(kOp, {"pre_activation", options.pre_activation},
                           {"activation_input", options.activation_input});
  }
  EMBER_CHECK(has_input == (options.activation_grad != Activation::none),
              "{}: activation_grad and activation_input go together (activation_grad is {}, "
              "activation_input is {})",
              kOp, options.activation_grad == Activation::none ? "none" : "set",
              has_input ? options.activation_input.describe() : std::string("absent"));
  if (check_optional(stream, "residual", options.residual, c.shape, a, b)) {
    detail::check_overlap(kOp, {"c", c},
                          {"residual", options.residual});  // residual may be C itself
    detail::check_disjoint(kOp, {"pre_activation", options.pre_activation},
                           {"residual", options.residual});
  }
  if (detail::present(options.bias_grad)) {
    EMBER_CHECK(c.rank() == 2, "{}: bias_grad needs an unbatched product, but C is {}", kOp,
                c.describe());
    check_optional(stream, "bias_grad", options.bias_grad, Shape{dims.m}, a, b);
    detail::check_disjoint(kOp, {"bias_grad", options.bias_grad}, {"c", c});
  }

  if (stream.device().is_cpu()) {
    EMBER_CHECK(
        options.backend == MatmulBackend::automatic || options.backend == MatmulBackend::cpu,
        "{}: backend '{}' needs a CUDA device, but the operands are on the cpu", kOp,
        backend_name(options.backend));
    cpu::matmul(c, a, b, dims, options);
    return;
  }
#if EMBER_WITH_CUDA
  cuda::matmul(stream, c, a, b, dims, options);
#else
  detail::no_cuda_implementation(kOp);
#endif
}

}  // namespace ember::ops
