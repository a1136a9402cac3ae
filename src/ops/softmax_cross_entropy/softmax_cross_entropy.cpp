// Softmax + cross-entropy, argmax and count_correct: argument checks, then the device's
// implementation.
#include "ember/ops/softmax_cross_entropy.hpp"

#include <cstdint>
#include <limits>
#include <string_view>

#include "ember/ops/check.hpp"
#include "ops/common/cpu_ops.hpp"
#include "ops/common/index_check.hpp"
#if EMBER_WITH_CUDA
#include "ops/softmax_cross_entropy/softmax_cross_entropy_cuda.hpp"
#endif

namespace ember::ops {
namespace {

// x [B, C] floating, with C >= 1 when B >= 1 (an empty row has no softmax and no argmax).
void check_logits(std::string_view op, std::string_view name, const TensorView& x) {
  detail::check_rank(op, name, x, 2);
  detail::check_floating(op, name, x);
  EMBER_CHECK(x.shape[0] == 0 || x.shape[1] > 0, "{}: {} {} has rows of no classes", op, name,
              x.describe());
}

// labels [B] of i32 or i64, B the first dimension of `rows_of`.
void check_labels_shape(std::string_view op, const TensorView& labels, const TensorView& rows_of) {
  detail::check_rank(op, "labels", labels, 1);
  EMBER_CHECK(labels.dtype == DType::i32 || labels.dtype == DType::i64,
              "{}: labels must be i32 or i64, not {}", op, labels.describe());
  EMBER_CHECK(labels.shape[0] == rows_of.shape[0], "{}: labels {} do not match the {} rows of {}",
              op, labels.describe(), rows_of.shape[0], rows_of.describe());
}

// The loss is a mean over rows, undefined for none.
void check_some_rows(std::string_view op, const TensorView& x) {
  EMBER_CHECK(x.shape[0] > 0, "{}: {} has no rows, and the mean loss over 0 rows is undefined", op,
              x.describe());
}

}  // namespace

void softmax_cross_entropy_forward(Stream& stream, const TensorView& loss, const TensorView& probs,
                                   const TensorView& logits, const TensorView& labels) {
  constexpr std::string_view kOp = "ops::softmax_cross_entropy_forward";
  mark_written(loss);
  mark_written(probs);
  detail::check_devices(kOp, stream, {&loss, &probs, &logits, &labels});
  check_logits(kOp, "logits", logits);
  check_some_rows(kOp, logits);
  check_labels_shape(kOp, labels, logits);
  detail::check_scalar(kOp, "loss", loss, DType::f32);
  detail::check_dtype(kOp, "probs", probs, DType::f32);
  detail::check_same_shape(kOp, probs, logits);
  detail::check_overlap(kOp, probs, logits);  // probs may be exactly f32 logits (in-place)
  for (const TensorView* in : {&logits, &labels, &probs}) detail::check_disjoint(kOp, loss, *in);
  detail::check_disjoint(kOp, probs, labels);
  if (stream.device().is_cpu()) {
    cpu::check_indices(kOp, "label", labels, logits.shape[1]);
    cpu::softmax_cross_entropy_forward(loss, probs, logits, labels);
    return;
  }
#if EMBER_WITH_CUDA
  cuda::softmax_cross_entropy_forward(stream, kOp, loss, probs, logits, labels);
#else
  detail::no_cuda_implementation(kOp);
#endif
}

void softmax_cross_entropy_backward(Stream& stream, const TensorView& dlogits,
                                    const TensorView& probs, const TensorView& labels,
                                    float dloss) {
  constexpr std::string_view kOp = "ops::softmax_cross_entropy_backward";
  mark_written(dlogits);
  detail::check_devices(kOp, stream, {&dlogits, &probs, &labels});
  check_logits(kOp, "probs", probs);
  detail::check_dtype(kOp, "probs", probs, DType::f32);
  check_some_rows(kOp, probs);
  check_labels_shape(kOp, labels, probs);
  detail::check_floating(kOp, "dlogits", dlogits);
  detail::check_same_shape(kOp, dlogits, probs);
  detail::check_overlap(kOp, dlogits, probs);  // dlogits may be exactly probs (in-place)
  detail::check_disjoint(kOp, dlogits, labels);
  if (stream.device().is_cpu()) {
    cpu::check_indices(kOp, "label", labels, probs.shape[1]);
    cpu::softmax_cross_entropy_backward(dlogits, probs, labels, dloss);
    return;
  }
#if EMBER_WITH_CUDA
  cuda::softmax_cross_entropy_backward(stream, kOp, dlogits, probs, labels, dloss);
#else
  detail::no_cuda_implementation(kOp);
#endif
}

void argmax(Stream& stream, const TensorView& out, const TensorView& x) {
  constexpr std::string_view kOp = "ops::argmax";
  mark_written(out);
  detail::check_devices(kOp, stream, {&out, &x});
  check_logits(kOp, "x", x);
  detail::check_rank(kOp, "out", out, 1);
  EMBER_CHECK(out.dtype == DType::i32 || out.dtype == DType::i64,
              "{}: out must be i32 or i64, not {}", kOp, out.describe());
  EMBER_CHECK(out.shape[0] == x.shape[0], "{}: out {} does not match the {} rows of x {}", kOp,
              out.describe(), x.shape[0], x.describe());
  EMBER_CHECK(out.dtype == DType::i64 || x.shape[1] <= std::numeric_limits<int32_t>::max(),
              "{}: out is i32 but x {} has more columns than i32 can index", kOp, x.describe());
  detail::check_disjoint(kOp, out, x);
  if (stream.device().is_cpu()) {
    cpu::argmax(out, x);
    return;
  }
#if EMBER_WITH_CUDA
  cuda::argmax(stream, out, x);
#else
  detail::no_cuda_implementation(kOp);
#endif
}

void count_correct(Stream& stream, const TensorView& correct, const TensorView& logits,
                   const TensorView& labels) {
  constexpr std::string_view kOp = "ops::count_correct";
  mark_written(correct);
  detail::check_devices(kOp, stream, {&correct, &logits, &labels});
  check_logits(kOp, "logits", logits);
  check_labels_shape(kOp, labels, logits);
  detail::check_scalar(kOp, "correct", correct, DType::i64);
  detail::check_disjoint(kOp, correct, logits);
  detail::check_disjoint(kOp, correct, labels);
  if (stream.device().is_cpu()) {
    cpu::check_indices(kOp, "label", labels, logits.shape[1]);
    cpu::count_correct(correct, logits, labels);
    return;
  }
#if EMBER_WITH_CUDA
  cuda::count_correct(stream, kOp, correct, logits, labels);
#else
  detail::no_cuda_implementation(kOp);
#endif
}

}  // namespace ember::ops
