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
#include "stream_test_support.hpp"

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

// next_into on lazy streams: each batch goes into the same two device tensors, and the
// consumer's kernels that read the last batch there run before the copy of the next overwrites
// it (the copy stream waits for them), so every step reads its own batch; the race checker
// checks the order.
TEST(EmulatedLoader, NextIntoOverwritesFixedTensorsOnlyAfterTheirReaders) {
  const ember::testing::LazyStreams lazy;
  const ember::testing::RaceCheck race_check;
  const std::vector<ember::data::TensorSpec> specs = {{Shape{64, 33}, DType::f32},
                                                      {Shape{64}, DType::i32}};
  Loader cpu(specs, produce, Device::cpu(), {.workers = 0});
  Loader gpu(specs, produce, Device::cuda(0), {.workers = 2, .prefetch = 2});
  Stream host(Device::cpu());
  Stream compute(Device::cuda(0));
  const std::vector<Tensor> into = {Tensor::empty(specs[0].shape, DType::f32, compute),
                                    Tensor::empty(specs[1].shape, DType::i32, compute)};
  std::vector<Tensor> doubled, labels;
  for (int step = 0; step < 6; ++step) {
    gpu.next_into(compute, into);
    doubled.push_back(Tensor::empty(specs[0].shape, DType::f32, compute));
    ember::ops::add(compute, doubled.back(), into[0], into[0]);
    labels.push_back(Tensor::empty(specs[1].shape, DType::i32, compute));
    labels.back().copy_(into[1]);
  }
  for (int step = 0; step < 6; ++step) {
    const std::vector<Tensor> want = cpu.next(host);
    std::vector<float> expect = want[0].to_vector<float>();
    for (float& v : expect) v *= 2;
    EXPECT_EQ(doubled[step].to_vector<float>(), expect) << "step " << step;
    EXPECT_EQ(labels[step].to_vector<int32_t>(), want[1].to_vector<int32_t>()) << "step " << step;
  }
  const std::vector<Tensor> on_cpu = {Tensor::empty(specs[0].shape), into[1]};
  EXPECT_THROW(gpu.next_into(compute, on_cpu), ember::Error);
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
