// data::Loader on emulated cuda:0, with streams run lazily and the race checker on: the batches
// come out of pinned buffers through the loader's copy stream, and the consumer's stream reads
// them only after the copy (an event), and the buffers are refilled only after it: the device
// batches equal the CPU loader's bitwise, batch after batch, while the consumer's stream reuses
// them at once.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <span>
#include <thread>
#include <vector>

#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"
#include "ember/data/loader.hpp"
#include "ember/ops/elementwise.hpp"

namespace {

using ember::Device;
using ember::DType;
using ember::Shape;
using ember::Stream;
using ember::Tensor;
using ember::TensorView;
using ember::data::Loader;

void produce(int64_t index, std::span<const TensorView> host) {
  std::mt19937 rng(static_cast<uint32_t>(index + 11));
  std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
  auto* x = host[0].as<float>();
  for (int64_t i = 0; i < host[0].numel(); ++i) x[i] = static_cast<float>(index * 1000 + i);
  auto* y = host[1].as<int32_t>();
  for (int64_t i = 0; i < host[1].numel(); ++i) y[i] = static_cast<int32_t>(index * 7 - i);
}

TEST(EmulatedLoader, DeviceBatchesEqualTheCpuLoadersAndAreReadAfterTheirCopy) {
  const std::vector<ember::data::TensorSpec> specs = {{Shape{64, 33}, DType::f32},
                                                      {Shape{64}, DType::i32}};
  Loader cpu(specs, produce, Device::cpu(), {.workers = 0});
  Loader gpu(specs, produce, Device::cuda(0), {.workers = 3, .prefetch = 2});
  Stream host(Device::cpu());
  Stream compute(Device::cuda(0));
  for (int step = 0; step < 10; ++step) {
    const std::vector<Tensor> want = cpu.next(host);
    const std::vector<Tensor> got = gpu.next(compute);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0].device(), Device::cuda(0));
    // Work on the consumer's stream reads the batch (after the copy, through the event).
    Tensor doubled = Tensor::empty(got[0].shape(), DType::f32, compute);
    ember::ops::add(compute, doubled, got[0], got[0]);
    std::vector<float> expect = want[0].to_vector<float>();
    for (float& v : expect) v *= 2;
    EXPECT_EQ(doubled.to_vector<float>(), expect) << "step " << step;
    EXPECT_EQ(got[1].to(Device::cpu()).to_vector<int32_t>(), want[1].to_vector<int32_t>())
        << "step " << step;
  }
  EXPECT_EQ(gpu.position(), 10);
}

TEST(EmulatedLoader, ABatchForAnotherDeviceIsAnError) {
  auto produce_one = [](int64_t, std::span<const TensorView> host) {
    for (int64_t i = 0; i < host[0].numel(); ++i) host[0].as<float>()[i] = 1.0f;
  };
  Loader gpu({{Shape{4}, DType::f32}}, produce_one, Device::cuda(0), {.workers = 1});
  Stream cpu(Device::cpu());
  EXPECT_THROW(gpu.next(cpu), ember::Error);
}

}  // namespace
