// SGD and AdamW on an (emulated) CUDA device against the same optimizer on the CPU: the fused
// multi-tensor kernels (ember/kernels/multi_tensor.cuh) and the CPU loops share their per-element
// arithmetic (ember/train/update_rules.hpp) with every operation rounded once, so parameters
// and state must be bitwise equal after every step, with no tolerance. Also: one launch per
// step, the packing of many tensors into launches, mixed devices, misaligned operands.
#include "ember/simt/prelude.hpp"
// clang-format off: the kernels need the prelude first
#include "ember/kernels/multi_tensor.cuh"
// clang-format on

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "ember/core/tensor.hpp"
#include "ember/simt/shim.hpp"
#include "ember/train/adamw.hpp"
#include "ember/train/sgd.hpp"
#include "test_support.hpp"

namespace {

using ember::Device;
using ember::DType;
using ember::Tensor;
namespace nn = ember::nn;
namespace train = ember::train;
namespace kernels = ember::kernels;

const Device kGpu = Device::cuda(0);
const Device kCpu = Device::cpu();

// Odd sizes: a single element, a tail-only tensor, one past a 4096 boundary, several chunks.
const std::vector<int64_t> kSizes = {1, 7, 4097, 70000};

Tensor random_values(int64_t n, uint64_t seed, double scale) {
  Tensor t = Tensor::empty({n});
  t.uniform_(seed, -scale, scale);
  return t;
}

// Parameters of the given sizes on `device`, the same values whatever the device. With
// `misaligned`, one more parameter whose value and gradient start 4 bytes past a 16-byte
// boundary (a view one element into a larger tensor): the kernel's scalar path.
struct ParameterSet {
  std::vector<nn::Parameter> params;
  std::vector<Tensor> backing;  // the storage of the misaligned views

  ParameterSet(const std::vector<int64_t>& sizes, Device device, bool misaligned) {
    params.reserve(sizes.size() + 1);
    for (size_t i = 0; i < sizes.size(); ++i) {
      params.push_back(nn::make_parameter(fmt::format("p{}", i),
                                          random_values(sizes[i], 100 + i, 2.0).to(device)));
    }
    if (misaligned) {
      const int64_t n = 4103;
      Tensor value = random_values(n + 1, 77, 2.0).to(device);
      Tensor grad = Tensor::zeros({n + 1}, DType::f32, device);
      params.push_back({"misaligned", value.slice(1, n + 1), grad.slice(1, n + 1)});
      backing = {value, grad};
    }
  }

  std::vector<nn::Parameter*> pointers() {
    std::vector<nn::Parameter*> out;
    for (nn::Parameter& p : params) out.push_back(&p);
    return out;
  }

  // Step t's gradients: signed, varied, some exactly zero; the same on every device.
  void set_gradients(int step) {
    for (size_t i = 0; i < params.size(); ++i) {
      Tensor g = random_values(params[i].grad.numel(), 1000 * step + i, 3.0);
      if (i % 2 == 0 && g.numel() > 3) g.slice(0, 3).fill_(0.0);
      params[i].grad.copy_(g);
    }
  }
};

std::vector<uint32_t> bits(const Tensor& t) {
  const std::vector<float> values = t.to(kCpu).to_vector<float>();
  std::vector<uint32_t> out(values.size());
  if (!values.empty()) std::memcpy(out.data(), values.data(), values.size() * sizeof(float));
  return out;
}

void expect_bitwise_equal(const Tensor& gpu, const Tensor& cpu, const std::string& what) {
  ASSERT_EQ(gpu.device(), kGpu) << what;
  ASSERT_EQ(cpu.device(), kCpu) << what;
  const std::vector<uint32_t> a = bits(gpu), b = bits(cpu);
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i], b[i]) << what << " element " << i << " of " << a.size();
  }
}

// Kernel launches that one step(stream) enqueues: the stream is held, so its work queues up.
template <class Optimizer>
size_t launches_of_one_step(Optimizer& optimizer, ember::Stream& stream) {
  auto handle = static_cast<cudaStream_t>(stream.native());
  stream.synchronize();  // the earlier uploads are not part of the step
  ember::simt::hold_stream(handle);
  optimizer.step(stream);
  const size_t queued = ember::simt::pending_work(handle);
  ember::simt::release_stream(handle);
  return queued;
}

// Runs `steps` steps of an optimizer made by make(parameters) on CUDA and on the CPU, and
// compares parameters (and state, through `state`) bitwise after every step. Odd steps use
// step(), even steps step(stream).
template <class Make, class State>
void compare_with_cpu(Make make, State state, int steps = 5) {
  ParameterSet gpu_params(kSizes, kGpu, true), cpu_params(kSizes, kCpu, true);
  auto gpu = make(gpu_params.pointers());
  auto cpu = make(cpu_params.pointers());
  ember::Stream stream = ember::current_stream(kGpu);
  for (int step = 1; step <= steps; ++step) {
    gpu_params.set_gradients(step);
    cpu_params.set_gradients(step);
    cpu.step();
    if (step % 2 == 1) {
      gpu.step();
    } else {
      EXPECT_EQ(launches_of_one_step(gpu, stream), 1u) << "step " << step;
      stream.synchronize();
    }
    for (size_t i = 0; i < gpu_params.params.size(); ++i) {
      const std::string what = fmt::format("step {} parameter {}", step, i);
      expect_bitwise_equal(gpu_params.params[i].value, cpu_params.params[i].value, what);
      for (const auto& [name, g, c] : state(gpu, cpu, i)) {
        expect_bitwise_equal(g, c, what + " " + name);
      }
    }
  }
}

using StateList = std::vector<std::tuple<std::string, Tensor, Tensor>>;

TEST(EmulatedOptimizers, AdamWMatchesTheCpuBitwise) {
  const train::AdamWOptions variants[] = {
      {.lr = 0.05f, .beta1 = 0.8f, .beta2 = 0.95f, .eps = 1e-6f, .weight_decay = 0.2f},
      {.lr = 0.01f, .weight_decay = 0.0f},
      {.lr = 0.02f, .beta1 = 0.85f, .eps = 1e-7f, .weight_decay = 0.05f, .amsgrad = true},
  };
  for (const train::AdamWOptions& o : variants) {
    SCOPED_TRACE(fmt::format("amsgrad={} weight_decay={}", o.amsgrad, o.weight_decay));
    compare_with_cpu([&](std::vector<nn::Parameter*> p) { return train::AdamW(p, o); },
                     [&](const train::AdamW& g, const train::AdamW& c, size_t i) {
                       StateList s = {{"exp_avg", g.exp_avg(i), c.exp_avg(i)},
                                      {"exp_avg_sq", g.exp_avg_sq(i), c.exp_avg_sq(i)}};
                       if (o.amsgrad) {
                         s.emplace_back("max_exp_avg_sq", g.max_exp_avg_sq(i), c.max_exp_avg_sq(i));
                       }
                       return s;
                     });
  }
}

TEST(EmulatedOptimizers, SGDMatchesTheCpuBitwise) {
  const train::SGDOptions variants[] = {
      {.lr = 0.1f},
      {.lr = 0.1f, .weight_decay = 0.01f},
      {.lr = 0.1f, .momentum = 0.9f},
      {.lr = 0.05f, .momentum = 0.9f, .dampening = 0.3f, .weight_decay = 0.01f},
      {.lr = 0.05f, .momentum = 0.8f, .weight_decay = 0.1f, .nesterov = true},
  };
  for (const train::SGDOptions& o : variants) {
    SCOPED_TRACE(fmt::format("momentum={} dampening={} weight_decay={} nesterov={}", o.momentum,
                             o.dampening, o.weight_decay, o.nesterov));
    compare_with_cpu([&](std::vector<nn::Parameter*> p) { return train::SGD(p, o); },
                     [&](const train::SGD& g, const train::SGD& c, size_t i) {
                       StateList s;
                       if (o.momentum != 0) {
                         s.emplace_back("momentum", g.momentum_buffer(i), c.momentum_buffer(i));
                       }
                       return s;
                     });
  }
}

// The state is created on each parameter's device, as f32.
TEST(EmulatedOptimizers, StateLivesOnTheParameterDevice) {
  ParameterSet params({5}, kGpu, false);
  train::AdamW adamw(params.pointers(), {.amsgrad = true});
  EXPECT_EQ(adamw.exp_avg(0).device(), kGpu);
  EXPECT_EQ(adamw.exp_avg_sq(0).device(), kGpu);
  EXPECT_EQ(adamw.max_exp_avg_sq(0).device(), kGpu);
  EXPECT_EQ(adamw.exp_avg(0).to_vector<float>(), std::vector<float>(5, 0.0f));
  train::SGD sgd(params.pointers(), {.momentum = 0.5f});
  EXPECT_FALSE(sgd.momentum_buffer(0).defined());
  params.set_gradients(1);
  sgd.step();
  EXPECT_EQ(sgd.momentum_buffer(0).device(), kGpu);
  EXPECT_EQ(bits(sgd.momentum_buffer(0)), bits(params.params[0].grad));  // first step: b = g
}

// Parameters split over the CPU and CUDA in one optimizer: each device's group is updated by
// its own backend, and the result equals an all-CPU run.
TEST(EmulatedOptimizers, MixedDevicesMatchAnAllCpuRun) {
  ParameterSet cpu_params(kSizes, kCpu, false), mixed(kSizes, kCpu, false);
  for (size_t i = 0; i < mixed.params.size(); i += 2) {  // sizes 1 and 4097 move to CUDA
    mixed.params[i].value = mixed.params[i].value.to(kGpu);
    mixed.params[i].grad = mixed.params[i].grad.to(kGpu);
  }
  const train::AdamWOptions o{.lr = 0.03f, .weight_decay = 0.1f, .amsgrad = true};
  train::AdamW cpu(cpu_params.pointers(), o), gpu(mixed.pointers(), o);
  for (int step = 1; step <= 3; ++step) {
    cpu_params.set_gradients(step);
    mixed.set_gradients(step);
    cpu.step();
    gpu.step();
  }
  for (size_t i = 0; i < kSizes.size(); ++i) {
    EXPECT_EQ(mixed.params[i].value.device(), i % 2 == 0 ? kGpu : kCpu);
    EXPECT_EQ(bits(mixed.params[i].value), bits(cpu_params.params[i].value)) << i;
    EXPECT_EQ(gpu.exp_avg_sq(i).device(), mixed.params[i].value.device()) << i;
  }
}

// More tensors than one launch holds (96 for SGD without momentum, 36 for AdamW with amsgrad):
// the update takes ceil(count / capacity) launches and still matches the CPU. One tensor is
// empty; it costs no block.
TEST(EmulatedOptimizers, ManyTensorsOverflowIntoMoreLaunches) {
  std::vector<int64_t> sizes;
  for (int i = 0; i < 100; ++i) sizes.push_back(i == 50 ? 0 : 1 + (i * 37) % 61);
  ParameterSet gpu_params(sizes, kGpu, false), cpu_params(sizes, kCpu, false);
  ember::Stream stream = ember::current_stream(kGpu);

  train::SGD sgd_gpu(gpu_params.pointers(), {.lr = 0.1f});
  train::SGD sgd_cpu(cpu_params.pointers(), {.lr = 0.1f});
  gpu_params.set_gradients(1);
  cpu_params.set_gradients(1);
  EXPECT_EQ(launches_of_one_step(sgd_gpu, stream), 2u);  // 99 non-empty tensors, 96 per launch
  sgd_cpu.step();

  const train::AdamWOptions o{.lr = 0.02f, .amsgrad = true};
  train::AdamW adamw_gpu(gpu_params.pointers(), o), adamw_cpu(cpu_params.pointers(), o);
  gpu_params.set_gradients(2);
  cpu_params.set_gradients(2);
  EXPECT_EQ(launches_of_one_step(adamw_gpu, stream), 3u);  // 99 tensors, 36 per launch
  adamw_cpu.step();
  stream.synchronize();
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_EQ(bits(gpu_params.params[i].value), bits(cpu_params.params[i].value)) << i;
  }
}

// A small model's step (train_mlp's 4 x 256 MLP: ~215 k parameters) is spread over ~256
// blocks of 1024 elements in one launch, not 14 blocks of 32768 (latency-bound on an H100); big
// models keep 32768 per block. The same bits as the CPU either way.
TEST(EmulatedOptimizers, SmallModelsSpreadOverManyBlocks) {
  EXPECT_EQ(kernels::multi_tensor_chunk(0), 1024);
  EXPECT_EQ(kernels::multi_tensor_chunk(215'000), 1024);
  EXPECT_EQ(kernels::multi_tensor_chunk(2'000'000), 8192);
  EXPECT_EQ(kernels::multi_tensor_chunk(100'000'000), kernels::kMultiTensorChunk);
  const std::vector<int64_t> sizes = {64 * 256, 256,       256 * 256, 256,      256 * 256,
                                      256,      256 * 256, 256,       256 * 10, 10};
  ParameterSet gpu_params(sizes, kGpu, false), cpu_params(sizes, kCpu, false);
  ember::Stream stream = ember::current_stream(kGpu);
  const train::AdamWOptions o{.lr = 0.01f};
  train::AdamW gpu(gpu_params.pointers(), o), cpu(cpu_params.pointers(), o);
  gpu_params.set_gradients(3);
  cpu_params.set_gradients(3);
  EXPECT_EQ(launches_of_one_step(gpu, stream), 1u);
  cpu.step();
  stream.synchronize();
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_EQ(bits(gpu_params.params[i].value), bits(cpu_params.params[i].value)) << i;
  }
}

// A big tensor spills over the block table: 320 blocks of 32768 elements per launch.
TEST(EmulatedOptimizers, TensorLargerThanOneLaunchContinuesInTheNext) {
  const int64_t n = kernels::kMultiTensorMaxBlocks * kernels::kMultiTensorChunk + 5;
  ParameterSet gpu_params({3, n}, kGpu, false), cpu_params({3, n}, kCpu, false);
  ember::Stream stream = ember::current_stream(kGpu);
  train::SGD gpu(gpu_params.pointers(), {.lr = 0.5f}), cpu(cpu_params.pointers(), {.lr = 0.5f});
  gpu_params.set_gradients(1);
  cpu_params.set_gradients(1);
  EXPECT_EQ(launches_of_one_step(gpu, stream), 2u);
  cpu.step();
  stream.synchronize();
  EXPECT_EQ(bits(gpu_params.params[0].value), bits(cpu_params.params[0].value));
  EXPECT_EQ(bits(gpu_params.params[1].value), bits(cpu_params.params[1].value));
}

// The AMP step on the device: flags written by a kernel on another stream, read by the update
// in its one launch (no host read), a skipped step changing nothing, and the same bits as the
// CPU given the same flags.
TEST(EmulatedOptimizers, AmpStepReadsItsFlagsOnTheDevice) {
  ParameterSet gpu_params(kSizes, kGpu, true), cpu_params(kSizes, kCpu, true);
  const train::AdamWOptions o{.lr = 0.05f, .weight_decay = 0.1f};
  train::AdamW gpu(gpu_params.pointers(), o), cpu(cpu_params.pointers(), o);
  ember::Stream stream = ember::current_stream(kGpu);
  ember::Stream flags_stream(kGpu);  // the flags are written elsewhere, then waited for
  const std::vector<float> found = {0, 1, 0, 0}, inv = {1, 0.5f, 0.25f, 1};
  for (int step = 0; step < 4; ++step) {
    gpu_params.set_gradients(step + 1);
    cpu_params.set_gradients(step + 1);
    Tensor found_inf = Tensor::full({1}, found[step], DType::f32, flags_stream);
    Tensor inv_scale = Tensor::full({1}, inv[step], DType::f32, flags_stream);
    ember::Stream cpu_stream;
    cpu.step(cpu_stream, Tensor::full({1}, found[step]), Tensor::full({1}, inv[step]));
    stream.synchronize();
    auto handle = static_cast<cudaStream_t>(stream.native());
    ember::simt::hold_stream(handle);
    const auto syncs_before = ember::simt::sync_counts();
    gpu.step(stream, found_inf, inv_scale);
    EXPECT_GE(ember::simt::pending_work(handle), 2u) << "the wait for the flags and the launch";
    EXPECT_EQ(ember::simt::sync_counts().total(), syncs_before.total()) << "no host wait";
    ember::simt::release_stream(handle);
    for (size_t i = 0; i < gpu_params.params.size(); ++i) {
      const std::string what = fmt::format("step {} parameter {}", step, i);
      expect_bitwise_equal(gpu_params.params[i].value, cpu_params.params[i].value, what);
      expect_bitwise_equal(gpu.exp_avg(i), cpu.exp_avg(i), what + " exp_avg");
    }
  }
  EXPECT_EQ(gpu.applied_steps(), 3);
  EXPECT_EQ(gpu.steps(), 4);
  ember::testing::expect_error([&] { gpu.step(stream, Tensor::full({1}, 0.0), Tensor()); },
                               "found_inf is on cpu but parameters live on cuda:0");
}

// A device group whose parameters are all empty launches nothing to update, yet its applied
// steps advance (one empty block publishes the counters), as on the CPU.
TEST(EmulatedOptimizers, EmptyParametersStillCountTheirSteps) {
  nn::Parameter p = nn::make_parameter("e", Tensor::zeros({0}, DType::f32, kGpu));
  train::AdamW opt({&p});
  ember::Stream stream = ember::current_stream(kGpu);
  for (int i = 0; i < 3; ++i) opt.step(stream);
  EXPECT_EQ(opt.applied_steps(), 3);
  EXPECT_EQ(opt.state_dict().at("step").item(), 3.0);
}

// Saving and loading on the device, with streams run as a GPU runs them: the state dict read
// after queued steps, loaded into an optimizer whose tensors live on another stream, and the
// resumed run equal to an unbroken one bit for bit.
TEST(EmulatedOptimizers, StateDictResumesOnTheDeviceBitwise) {
  ParameterSet whole(kSizes, kGpu, false), first(kSizes, kGpu, false);
  const train::AdamWOptions o{.lr = 0.05f};
  ember::Stream stream = ember::current_stream(kGpu);
  train::AdamW unbroken(whole.pointers(), o), before(first.pointers(), o);
  for (int step = 1; step <= 3; ++step) {
    whole.set_gradients(step);
    first.set_gradients(step);
    unbroken.step(stream);
    before.step(stream);
  }
  const ember::StateDict saved = before.state_dict();  // waits for the queued steps
  ember::Stream other(kGpu);
  ember::StreamGuard guard(other);  // the resumed optimizer's tensors live on `other`
  ParameterSet second(kSizes, kGpu, false);
  for (size_t i = 0; i < second.params.size(); ++i) {
    second.params[i].value.copy_(first.params[i].value);
  }
  train::AdamW after(second.pointers(), o);
  after.load_state_dict(saved);
  EXPECT_EQ(after.applied_steps(), 3);
  for (int step = 4; step <= 5; ++step) {
    whole.set_gradients(step);
    second.set_gradients(step);
    unbroken.step(stream);
    after.step(other);
  }
  for (size_t i = 0; i < whole.params.size(); ++i) {
    EXPECT_EQ(bits(second.params[i].value), bits(whole.params[i].value)) << i;
    EXPECT_EQ(bits(after.exp_avg(i)), bits(unbroken.exp_avg(i))) << i;
  }
}

// The packing itself, with small capacities: every (tensor, chunk) exactly once, in order, no
// batch over its capacities, a tensor cut by a full block table continuing in the next batch.
TEST(MultiTensorPlan, PacksChunksIntoBatches) {
  const std::vector<int64_t> numel = {25, 0, 5, 41, 10, 3, 7};
  std::vector<std::array<float*, 2>> pointers(numel.size());
  static float base[1];
  for (size_t t = 0; t < numel.size(); ++t) pointers[t] = {base + t, base + 100 + t};

  std::vector<std::pair<size_t, int>> covered;  // (tensor, chunk) in launch order
  std::vector<int> batch_blocks;
  kernels::plan_multi_tensor_batches<2>(
      static_cast<int64_t>(numel.size()), [&](int64_t t) { return pointers[t]; },
      [&](int64_t t) { return numel[t]; },
      [&](const kernels::MultiTensorBatch<2>& batch, int blocks) {
        batch_blocks.push_back(blocks);
        std::set<int> slots;
        for (int b = 0; b < blocks; ++b) {
          const int slot = batch.block_tensor[b];
          slots.insert(slot);
          const auto tensor = static_cast<size_t>(batch.data[0][slot] - base);
          ASSERT_LT(tensor, numel.size());
          EXPECT_EQ(batch.data[1][slot], base + 100 + tensor);
          EXPECT_EQ(batch.numel[slot], numel[tensor]);
          covered.emplace_back(tensor, batch.block_chunk[b]);
        }
        EXPECT_LE(slots.size(), 3u);
      },
      /*max_tensors=*/3, /*max_blocks=*/4, /*chunk=*/10);

  std::vector<std::pair<size_t, int>> want;
  for (size_t t = 0; t < numel.size(); ++t) {
    for (int c = 0; c * 10 < numel[t]; ++c) want.emplace_back(t, c);
  }
  EXPECT_EQ(covered, want);
  // [t0 c0-2, t2] full table | [t3 c0-3] full, t3 continues | [t3 c4, t4, t5] 3 tensors | [t6]
  EXPECT_EQ(batch_blocks, (std::vector<int>{4, 4, 3, 1}));
}

TEST(MultiTensorPlan, NothingToDoLaunchesNothing) {
  int launches = 0;
  const std::vector<int64_t> numel = {0, 0};
  kernels::plan_multi_tensor_batches<3>(
      2, [](int64_t) { return std::array<float*, 3>{}; }, [&](int64_t t) { return numel[t]; },
      [&](const kernels::MultiTensorBatch<3>&, int) { ++launches; });
  EXPECT_EQ(launches, 0);
}

}  // namespace
