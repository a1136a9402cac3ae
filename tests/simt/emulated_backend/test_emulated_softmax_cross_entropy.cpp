// Bad labels in softmax + cross-entropy and count_correct on an (emulated) CUDA device: checked
// on the device without a host wait, they throw the CPU backend's error (up to the device name)
// from the stream's next synchronize, once. What holds on every device is in
// tests/ops/softmax_cross_entropy_cases.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"
#include "ember/ops/softmax_cross_entropy.hpp"
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

}  // namespace
