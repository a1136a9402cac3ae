#include "ember/train/accumulation.hpp"

#include "ember/ops/elementwise.hpp"

namespace ember::train {

Accumulation::Accumulation(int64_t micro_batches) : k_(micro_batches) {
  EMBER_CHECK(micro_batches >= 1, "Accumulation: micro_batches must be >= 1, not {}",
              micro_batches);
}

Tensor Accumulation::loss_gradient(Stream& stream, const Tensor& scale) const {
  // 1 / K rounded once to f32; under AMP times the scale on the device.
  Tensor inverse =
      Tensor::full({1}, static_cast<double>(1.0f / static_cast<float>(k_)), DType::f32, stream);
  if (!scale.defined()) return inverse;
  EMBER_CHECK(
      scale.dtype() == DType::f32 && scale.numel() == 1 && scale.device() == stream.device(),
      "Accumulation: the scale must be one f32 element on {}, not {}", stream.device().to_string(),
      scale.view().describe());
  if (!(scale.stream() == stream)) stream.wait(scale.stream());
  Tensor out = Tensor::empty({1}, DType::f32, stream);
  ops::scale_by(stream, out, inverse, scale);
  return out;
}

}  // namespace ember::train
