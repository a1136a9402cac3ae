// Bad labels in softmax + cross-entropy and count_correct on an (emulated) CUDA device: checked
// on the device without a host wait, they throw the CPU backend's error (up to the device name)
// from the stream's next synchronize, once. Wide rows on a device with less shared memory per
// block than they need take the team kernels. What holds on every device is in
// tests/ops/softmax_cross_entropy_cases.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"
#include "ember/ops/softmax_cross_entropy.hpp"
#include "ember/simt/profile.hpp"
#include "emulated_test_support.hpp"
#include "ops/ops_test_support.hpp"

namespace {

using ember::Device;
using ember::DType;
using ember::Shape;
using ember::Stream;
using ember::Tensor;
using ember::testing::host_f32;
namespace ops = ember::ops;

const Device kGpu = Device::cuda(0);

// Runs f on the CPU and on CUDA: both must throw, with the same message up to the device.
template <class F>
void expect_same_error(F&& f) {
  std::string cpu_message, gpu_message;
  try {
    f(Device::cpu());
  } catch (const ember::Error& e) {
    cpu_message = e.message();
  }
  try {
    f(kGpu);
  } catch (const ember::Error& e) {
    gpu_message = e.message();
  }
  ASSERT_FALSE(cpu_message.empty()) << "the CPU did not throw";
  std::string expected = cpu_message;
  for (size_t at = expected.find("on cpu"); at != std::string::npos;
       at = expected.find("on cpu", at)) {
    expected.replace(at, 6, "on cuda:0");
  }
  EXPECT_EQ(gpu_message, expected);
}

// The CPU throws at the call, before writing anything; CUDA checks on the device without a host
// wait and throws the same error from the stream's next synchronize (here, or item()).
TEST(EmulatedSoftmaxCrossEntropy, BadLabelsThrowTheCpusErrorAtTheNextSynchronize) {
  const Shape shape{7, 13};
  const Tensor logits =
      Tensor::from_vector(ember::testing::random_floats(shape.numel(), 7, -6.0f, 6.0f), shape);
  for (const DType label_type : {DType::i32, DType::i64}) {
    for (const int64_t bad : {int64_t{13}, int64_t{-1}}) {
      // Two bad rows: the first one is named.
      std::vector<int64_t> v = {0, 1, 2, bad, 4, 99, 6};
      const Tensor labels =
          label_type == DType::i64
              ? Tensor::from_vector(v, Shape{7})
              : Tensor::from_vector(std::vector<int32_t>(v.begin(), v.end()), Shape{7});
      expect_same_error([&](Device device) {
        Stream stream = ember::current_stream(device);
        Tensor loss = Tensor::zeros(Shape{}, DType::f32, device);
        Tensor probs = Tensor::full(shape, 7.0, DType::f32, device);
        try {
          ops::softmax_cross_entropy_forward(stream, loss, probs, logits.to(device),
                                             labels.to(device));
        } catch (...) {
          EXPECT_TRUE(device.is_cpu());
          EXPECT_EQ(host_f32(probs), std::vector<float>(91, 7.0f));  // untouched
          throw;
        }
        EXPECT_TRUE(device.is_cuda());
        EXPECT_TRUE(std::isnan(loss.item()));  // item() synchronizes: throws the error
      });
      expect_same_error([&](Device device) {
        Stream stream = ember::current_stream(device);
        Tensor dlogits = Tensor::full(shape, 7.0, DType::bf16, device);
        ops::softmax_cross_entropy_backward(stream, dlogits, logits.to(device), labels.to(device));
        stream.synchronize();
      });
      expect_same_error([&](Device device) {
        Stream stream = ember::current_stream(device);
        Tensor correct = Tensor::zeros(Shape{}, DType::i64, device);
        ops::count_correct(stream, correct, logits.to(device), labels.to(device));
        stream.synchronize();
      });
    }
  }
  // Every check was reported once: nothing is left for a later synchronize.
  EXPECT_NO_THROW(ember::current_stream(kGpu).synchronize());
}

// GPT-2's padded 50304-wide bf16 logits need 100,608 bytes of shared memory on the staged kernel:
// on a GPU that lets a block have less (here 64 KiB) the op takes the team kernels, with the same
// loss (to its rounding) as on an H100's profile, instead of failing at the launch (the emulator
// refuses an opt-in past the profile's limit, as a GPU does).
TEST(EmulatedSoftmaxCrossEntropy, WideRowsFallBackWhereSharedMemoryIsSmaller) {
  const Shape shape{3, 50304};
  const Tensor logits =
      Tensor::from_vector(ember::testing::random_floats(shape.numel(), 21, -6.0f, 6.0f), shape)
          .to(DType::bf16)
          .to(kGpu);
  const Tensor labels = Tensor::from_vector(std::vector<int32_t>{0, 50303, 777}, Shape{3}).to(kGpu);
  const auto fused_loss = [&] {
    Stream stream = ember::current_stream(kGpu);
    Tensor grad = logits.clone();
    Tensor loss = Tensor::zeros(Shape{1}, DType::f32, kGpu);
    ops::softmax_cross_entropy_fused(stream, loss, grad, labels);
    return static_cast<float>(loss.item());
  };
  const float staged = fused_loss();
  const ember::simt::DeviceProfile saved = ember::simt::device_profile();
  ember::simt::DeviceProfile small = saved;
  small.shared_bytes_per_block_optin = 64 * 1024;
  ember::simt::set_device_profile(small);
  float team = 0.0f;
  EXPECT_NO_THROW(team = fused_loss());
  ember::simt::set_device_profile(saved);
  EXPECT_NEAR(team, staged, 1e-6 * std::abs(staged));
}

}  // namespace
