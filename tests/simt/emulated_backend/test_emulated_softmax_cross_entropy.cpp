// Softmax + cross-entropy, argmax and count_correct on an (emulated) CUDA device against the CPU
// backend: warp-per-row and block-per-row shapes, all float dtypes, i32 and i64 labels, extreme
// logits, in-place use, bad labels (the CPU's error text, nothing written) and determinism.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
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
using ember::testing::bits;
using ember::testing::host_f32;
using ember::testing::kFloatTypes;
using ember::testing::kInf;
using ember::testing::kNan;
namespace ops = ember::ops;

const Device kGpu = Device::cuda(0);
// Warp-per-row rows (C <= 1024, the edge included) and block-per-row rows (C > 1024).
const std::vector<Shape> kShapes = {{1, 1}, {7, 13}, {257, 1000}, {4, 1024}, {5, 1025}, {3, 5000}};

std::vector<float> random_logits(int64_t n, uint32_t seed) {
  return ember::testing::random_floats(n, seed, -6.0f, 6.0f);
}

Tensor make_labels(int64_t rows, int64_t classes, DType dtype, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int64_t> dist(0, classes - 1);
  std::vector<int64_t> v(static_cast<size_t>(rows));
  for (int64_t& l : v) l = dist(gen);
  if (dtype == DType::i64) return Tensor::from_vector(v, Shape{rows});
  return Tensor::from_vector(std::vector<int32_t>(v.begin(), v.end()), Shape{rows});
}

std::vector<int64_t> indices(const Tensor& t) {
  const Tensor host = t.to(Device::cpu());
  if (host.dtype() == DType::i64) return host.to_vector<int64_t>();
  const std::vector<int32_t> v = host.to_vector<int32_t>();
  return {v.begin(), v.end()};
}

struct Outputs {
  float loss;
  std::vector<float> probs;
};

Outputs forward(const Device& device, const Tensor& logits, const Tensor& labels) {
  Stream stream = ember::current_stream(device);
  Tensor loss = Tensor::zeros(Shape{}, DType::f32, device);
  Tensor probs = Tensor::zeros(logits.shape(), DType::f32, device);
  ops::softmax_cross_entropy_forward(stream, loss, probs, logits.to(device), labels.to(device));
  return {host_f32(loss)[0], host_f32(probs)};
}

// Probabilities: the CPU's e^x is within 1 ulp and CUDA's expf within 2, the normalizing sums
// (double) agree to far better than an f32 ulp, and p rounds once: 4 ulps of p (or an absolute
// 2^-149 near the subnormal range).
void expect_probs_close(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << "element " << i;
      continue;
    }
    const double tol =
        4.0 * std::ldexp(std::abs(static_cast<double>(want[i])), -23) + std::ldexp(1.0, -149);
    ASSERT_NEAR(got[i], want[i], tol) << "element " << i;
  }
}

// The loss: each row's log s differs by at most ~2^-22 (s has the relative error of the e^x
// terms), the mean adds no more, and rounding to f32 adds an ulp of the result.
void expect_loss_close(float got, float want) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << got;
    return;
  }
  const double tol = std::ldexp(1.0, -21) + std::ldexp(std::abs(static_cast<double>(want)), -23);
  EXPECT_NEAR(got, want, tol);
}

TEST(EmulatedSoftmaxCrossEntropy, ForwardMatchesCpu) {
  for (const Shape& shape : kShapes) {
    for (const DType dtype : kFloatTypes) {
      for (const DType label_type : {DType::i32, DType::i64}) {
        const Tensor logits = Tensor::from_vector(random_logits(shape.numel(), 1), shape).to(dtype);
        const Tensor labels = make_labels(shape[0], shape[1], label_type, 2);
        const Outputs want = forward(Device::cpu(), logits, labels);
        const Outputs got = forward(kGpu, logits, labels);
        SCOPED_TRACE(shape.to_string());
        expect_loss_close(got.loss, want.loss);
        expect_probs_close(got.probs, want.probs);
      }
    }
  }
}

// Huge, -inf and nan logits: tests/ops/softmax_cross_entropy_cases.cpp, on this device too.

TEST(EmulatedSoftmaxCrossEntropy, InPlaceForwardAndBackwardMatchOutOfPlace) {
  Stream stream = ember::current_stream(kGpu);
  for (const Shape& shape : {Shape{257, 1000}, Shape{3, 5000}}) {
    const Tensor logits = Tensor::from_vector(random_logits(shape.numel(), 3), shape).to(kGpu);
    const Tensor labels = make_labels(shape[0], shape[1], DType::i64, 4).to(kGpu);
    Tensor loss = Tensor::zeros(Shape{}, DType::f32, kGpu);
    Tensor probs = Tensor::zeros(shape, DType::f32, kGpu);
    ops::softmax_cross_entropy_forward(stream, loss, probs, logits, labels);
    Tensor dlogits = Tensor::zeros(shape, DType::f32, kGpu);
    ops::softmax_cross_entropy_backward(stream, dlogits, probs, labels, 0.5f);

    Tensor buffer = logits.clone();  // logits, then probs, then dlogits
    Tensor loss2 = Tensor::zeros(Shape{}, DType::f32, kGpu);
    ops::softmax_cross_entropy_forward(stream, loss2, buffer, buffer, labels);
    EXPECT_EQ(bits(host_f32(loss2)[0]), bits(host_f32(loss)[0]));
    EXPECT_EQ(host_f32(buffer), host_f32(probs));
    ops::softmax_cross_entropy_backward(stream, buffer, buffer, labels, 0.5f);
    EXPECT_EQ(host_f32(buffer), host_f32(dlogits));
  }
}

// The backward is exact f32 arithmetic on the same probs, rounded once to the output dtype:
// bitwise the CPU's.
TEST(EmulatedSoftmaxCrossEntropy, BackwardIsBitwiseTheCpus) {
  for (const Shape& shape : kShapes) {
    for (const DType out_type : kFloatTypes) {
      for (const float dloss : {1.0f, 0.37f}) {
        const Tensor probs =
            Tensor::from_vector(ember::testing::random_floats(shape.numel(), 5, 0.0f, 1.0f), shape);
        const Tensor labels = make_labels(shape[0], shape[1], DType::i32, 6);
        Stream cpu_stream, gpu_stream = ember::current_stream(kGpu);
        Tensor want = Tensor::zeros(shape, out_type);
        Tensor got = Tensor::zeros(shape, out_type, kGpu);
        ops::softmax_cross_entropy_backward(cpu_stream, want, probs, labels, dloss);
        ops::softmax_cross_entropy_backward(gpu_stream, got, probs.to(kGpu), labels.to(kGpu),
                                            dloss);
        const std::vector<float> g = host_f32(got), w = ember::testing::values(want);
        ASSERT_EQ(g.size(), w.size());
        for (size_t i = 0; i < g.size(); ++i) ASSERT_EQ(bits(g[i]), bits(w[i])) << i;
      }
    }
  }
}

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
  const Tensor logits = Tensor::from_vector(random_logits(shape.numel(), 7), shape);
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

TEST(EmulatedSoftmaxCrossEntropy, EmptyBatchThrowsAsOnTheCpu) {
  const Tensor logits = Tensor::zeros(Shape{0, 5});
  const Tensor labels = Tensor::zeros(Shape{0}, DType::i64);
  expect_same_error([&](Device device) {
    Stream stream = ember::current_stream(device);
    Tensor loss = Tensor::zeros(Shape{}, DType::f32, device);
    Tensor probs = Tensor::zeros(Shape{0, 5}, DType::f32, device);
    ops::softmax_cross_entropy_forward(stream, loss, probs, logits.to(device), labels.to(device));
  });
  expect_same_error([&](Device device) {
    Stream stream = ember::current_stream(device);
    Tensor dlogits = Tensor::zeros(Shape{0, 5}, DType::f32, device);
    ops::softmax_cross_entropy_backward(stream, dlogits, logits.to(device), labels.to(device));
  });
  // count_correct is defined for no rows: 0.
  Stream stream = ember::current_stream(kGpu);
  Tensor correct = Tensor::full(Shape{}, 5.0, DType::i64, kGpu);
  ops::count_correct(stream, correct, logits.to(kGpu), labels.to(kGpu));
  EXPECT_EQ(correct.to(Device::cpu()).to_vector<int64_t>()[0], 0);
}

// Logits with ties (few distinct values, zeros of both signs), nans and all -inf rows.
std::vector<float> argmax_logits(const Shape& shape, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> pick(0, 99);
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  for (float& x : v) {
    const int r = pick(gen);
    x = r < 2 ? kNan : r < 10 ? (r % 2 == 0 ? 0.0f : -0.0f) : static_cast<float>(r % 5) - 2.0f;
  }
  // A row of -inf, and one of zeros only (if there are enough rows).
  if (shape[0] > 2) {
    for (int64_t j = 0; j < shape[1]; ++j) {
      v[static_cast<size_t>(shape[1] + j)] = -kInf;
      v[static_cast<size_t>(2 * shape[1] + j)] = j % 3 == 0 ? -0.0f : 0.0f;
    }
  }
  return v;
}

TEST(EmulatedArgmax, IndicesAreTheCpus) {
  for (const Shape& shape : kShapes) {
    for (const DType dtype : kFloatTypes) {
      for (const DType out_type : {DType::i32, DType::i64}) {
        const Tensor x = Tensor::from_vector(argmax_logits(shape, 8), shape).to(dtype);
        Stream cpu_stream, gpu_stream = ember::current_stream(kGpu);
        Tensor want = Tensor::zeros(Shape{shape[0]}, out_type);
        Tensor got = Tensor::zeros(Shape{shape[0]}, out_type, kGpu);
        ops::argmax(cpu_stream, want, x);
        ops::argmax(gpu_stream, got, x.to(kGpu));
        EXPECT_EQ(indices(got), indices(want)) << shape.to_string();
      }
    }
  }
}

TEST(EmulatedArgmax, CountCorrectIsTheCpus) {
  for (const Shape& shape : kShapes) {
    for (const DType dtype : kFloatTypes) {
      const Tensor x = Tensor::from_vector(random_logits(shape.numel(), 9), shape).to(dtype);
      // Half the labels are the argmax, the others random.
      Stream cpu_stream, gpu_stream = ember::current_stream(kGpu);
      Tensor argmax = Tensor::zeros(Shape{shape[0]}, DType::i64);
      ops::argmax(cpu_stream, argmax, x);
      std::vector<int64_t> labels = argmax.to_vector<int64_t>();
      std::mt19937 gen(10);
      for (size_t r = 0; r < labels.size(); r += 2)
        labels[r] = static_cast<int64_t>(gen() % static_cast<uint32_t>(shape[1]));
      const Tensor label_tensor = Tensor::from_vector(labels, Shape{shape[0]});
      Tensor want = Tensor::zeros(Shape{}, DType::i64);
      Tensor got = Tensor::full(Shape{}, 3.0, DType::i64, kGpu);
      ops::count_correct(cpu_stream, want, x, label_tensor);
      ops::count_correct(gpu_stream, got, x.to(kGpu), label_tensor.to(kGpu));
      EXPECT_EQ(got.to(Device::cpu()).to_vector<int64_t>(), want.to_vector<int64_t>());
    }
  }
}

TEST(EmulatedSoftmaxCrossEntropy, RunsAreBitwiseIdentical) {
  const Shape shape{257, 1000};
  const Tensor logits = Tensor::from_vector(random_logits(shape.numel(), 11), shape).to(DType::f16);
  const Tensor labels = make_labels(shape[0], shape[1], DType::i32, 12);
  const Outputs first = forward(kGpu, logits, labels);
  const Outputs second = forward(kGpu, logits, labels);
  EXPECT_EQ(bits(first.loss), bits(second.loss));
  EXPECT_EQ(first.probs, second.probs);
}

}  // namespace
