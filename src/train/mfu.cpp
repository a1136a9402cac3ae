#include "ember/train/mfu.hpp"

#include <string>

#if EMBER_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace ember::train {

double gpt_flops_per_token(const GptConfig& c, int64_t seq) {
  const auto d = static_cast<double>(c.dim);
  const double block_weights = 12.0 * d * d;  // c_attn 3d^2, c_proj d^2, c_fc and c_proj 8d^2
  const double matrix_weights =
      static_cast<double>(c.layers) * block_weights + static_cast<double>(c.vocab) * d;
  return 6.0 * matrix_weights + 12.0 * static_cast<double>(c.layers) * static_cast<double>(seq) * d;
}

std::optional<double> peak_flops(const Device& device, nn::Precision precision) {
#if EMBER_WITH_CUDA
  if (!device.is_cuda()) return std::nullopt;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device.index()) != cudaSuccess) return std::nullopt;
  const std::string name = prop.name;
  const bool half = precision != nn::Precision::f32;
  struct Peak {
    double half_tflops, f32_tflops;
  };
  std::optional<Peak> peak;
  if (prop.major == 9 && name.find("PCIe") != std::string::npos) {
    peak = Peak{756.0, 51.2};  // H100 PCIe
  } else if (prop.major == 9 &&
             (name.find("H100") != std::string::npos || name.find("H200") != std::string::npos)) {
    peak = Peak{989.4, 66.9};  // H100 SXM; H200 and GH200 have the same SM arithmetic
  } else if (prop.major == 8 && prop.minor == 0 && name.find("A100") != std::string::npos) {
    peak = Peak{312.0, 19.5};
  }
  if (!peak) return std::nullopt;
  return (half ? peak->half_tflops : peak->f32_tflops) * 1e12;
#else
  (void)device;
  (void)precision;
  return std::nullopt;
#endif
}

}  // namespace ember::train
