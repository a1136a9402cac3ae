// Mean squared error: one ops::map_reduce for the forward, one ops::map for the backward, on the
// CPU or in kernels instantiated here (nvcc in CUDA builds, C++ otherwise).
#include "ember/ops/mse_loss.hpp"

#include <array>
#include <string_view>

#include "ember/ops/check.hpp"
#include "ember/ops/map.hpp"

namespace ember::ops {
namespace {

// (p - t)^2 / n: summed, the mean itself, so that neither an f16 or bf16 loss nor an f32 sum
// overflows where the mean does not.
struct SquaredDifferenceOverN {
  float n;
  EMBER_HOST_DEVICE float operator()(float p, float t) const {
    const float d = p - t;
    return d * d / n;
  }
};
struct DivideBy {
  float n;
  EMBER_HOST_DEVICE float operator()(float x) const { return x / n; }
};
struct ScaledDifference {
  float scale;  // 2 dloss / n
  EMBER_HOST_DEVICE float operator()(float p, float t) const { return (p - t) * scale; }
};

void check_inputs(std::string_view op, const Stream& stream, const TensorView& pred,
                  const TensorView& target) {
  detail::check_devices(op, stream, {&pred, &target});
  detail::check_floating(op, "pred", pred);
  detail::check_floating(op, "target", target);
  detail::check_same_shape(op, pred, target);
}

}  // namespace

void mse_loss_forward(Stream& stream, const TensorView& loss, const TensorView& pred,
                      const TensorView& target) {
  constexpr std::string_view kOp = "ops::mse_loss_forward";
  check_inputs(kOp, stream, pred, target);
  detail::check_map_reduce_out(kOp, stream, loss);
  detail::check_disjoint(kOp, loss, pred);
  detail::check_disjoint(kOp, loss, target);
  const auto n = static_cast<float>(pred.numel());
  detail::map_reduce_named(kOp, stream, loss, Sum{}, SquaredDifferenceOverN{n}, pred, target);
  if (pred.numel() == 0) {  // the mean of nothing: 0 / 0
    detail::map_named(kOp, stream, std::array<TensorView, 1>{loss}, DivideBy{0.0f}, loss);
  }
}

void mse_loss_backward(Stream& stream, const TensorView& dpred, const TensorView& pred,
                       const TensorView& target, float dloss) {
  constexpr std::string_view kOp = "ops::mse_loss_backward";
  check_inputs(kOp, stream, pred, target);
  detail::check_devices(kOp, stream, {&dpred});
  detail::check_floating(kOp, "dpred", dpred);
  detail::check_same_shape(kOp, dpred, pred);
  detail::check_overlap(kOp, dpred, pred);
  detail::check_overlap(kOp, dpred, target);
  const float scale = 2.0f * dloss / static_cast<float>(pred.numel());
  detail::map_named(kOp, stream, std::array<TensorView, 1>{dpred}, ScaledDifference{scale}, pred,
                    target);
}

}  // namespace ember::ops
