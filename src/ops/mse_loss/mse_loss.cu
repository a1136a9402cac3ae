// Mean squared error: the forward's terms by ops::map and their sum by ops::sum (in double), the
// backward one ops::map; on the CPU or in kernels instantiated here (nvcc in CUDA builds, C++
// otherwise).
#include "ember/core/profile.hpp"
#include "ember/ops/mse_loss.hpp"

#include <array>
#include <string_view>

#include "ember/ops/check.hpp"
#include "ember/ops/map.hpp"
#include "ember/ops/reduce.hpp"

namespace ember::ops {
namespace {

// d * (d / n), d = p - t: the terms of the mean. Dividing first keeps a term finite wherever the
// mean is; summed in double (ops::sum), constant residuals stay exact to an ulp.
struct ScaledSquare {
  float n;
  EMBER_HOST_DEVICE float operator()(float p, float t) const {
    const float d = p - t;
    return d * (d / n);
  }
};
struct Identity {
  EMBER_HOST_DEVICE float operator()(float x) const { return x; }
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
  detail::check_devices(op, stream, {{"pred", pred}, {"target", target}});
  detail::check_floating(op, "pred", pred);
  detail::check_floating(op, "target", target);
  detail::check_same_shape(op, {"pred", pred}, {"target", target});
}

}  // namespace

void mse_loss_forward(Stream& stream, const TensorView& loss, const TensorView& pred,
                      const TensorView& target) {
  EMBER_OP_RANGE("mse_loss_forward");
  constexpr std::string_view kOp = "ops::mse_loss_forward";
  check_inputs(kOp, stream, pred, target);
  // map_reduce's own check calls it "out": the user's name first.
  detail::check_devices(kOp, stream, {{"loss", loss}});
  detail::check_floating(kOp, "loss", loss);
  EMBER_CHECK(loss.numel() == 1, "{}: loss must be one element, not {}", kOp, loss.describe());
  detail::check_map_reduce_out(kOp, stream, loss);
  detail::check_disjoint(kOp, {"loss", loss}, {"pred", pred});
  detail::check_disjoint(kOp, {"loss", loss}, {"target", target});
  const int64_t n = pred.numel();
  if (n == 0) {  // the mean of nothing: 0 / 0, written in loss's dtype
    Tensor zero = Tensor::zeros({1}, DType::f32, stream);
    detail::map_named(kOp, stream, std::array<TensorView, 1>{loss}, DivideBy{0.0f},
                      zero.view().reshape(loss.shape));
    return;
  }
  // The terms in f32, their sum in double (ops::sum: a fixed order), then loss's dtype.
  Tensor terms = Tensor::empty(pred.shape, DType::f32, stream);
  detail::map_named(kOp, stream, std::array<TensorView, 1>{terms}, ScaledSquare{float(n)}, pred,
                    target);
  Tensor total = Tensor::empty({1}, DType::f32, stream);
  sum(stream, total, terms);
  detail::map_named(kOp, stream, std::array<TensorView, 1>{loss}, Identity{},
                    total.view().reshape(loss.shape));
}

void mse_loss_backward(Stream& stream, const TensorView& dpred, const TensorView& pred,
                       const TensorView& target, float dloss) {
  EMBER_OP_RANGE("mse_loss_backward");
  constexpr std::string_view kOp = "ops::mse_loss_backward";
  check_inputs(kOp, stream, pred, target);
  detail::check_devices(kOp, stream, {{"dpred", dpred}});
  detail::check_floating(kOp, "dpred", dpred);
  detail::check_same_shape(kOp, {"dpred", dpred}, {"pred", pred});
  detail::check_overlap(kOp, {"dpred", dpred}, {"pred", pred});
  detail::check_overlap(kOp, {"dpred", dpred}, {"target", target});
  const float scale = 2.0f * dloss / static_cast<float>(pred.numel());
  detail::map_named(kOp, stream, std::array<TensorView, 1>{dpred}, ScaledDifference{scale}, pred,
                    target);
}

}  // namespace ember::ops
