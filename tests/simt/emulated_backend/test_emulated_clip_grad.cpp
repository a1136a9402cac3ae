// clip_grad_norm on emulated cuda:0 against the CPU: the norm and the clipped gradients, across
// many tensors and chunks (several launches), with no host wait.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ember/simt/shim.hpp"
#include "ember/train/clip_grad.hpp"

namespace {

using ember::Device;
using ember::Tensor;
namespace nn = ember::nn;
namespace train = ember::train;
const Device kGpu = Device::cuda(0);

std::vector<nn::Parameter> make(Device device) {
  std::vector<nn::Parameter> params;
  int k = 0;
  for (int64_t n : {1, 5, 32768, 32769, 70000}) {
    for (int copies = 0; copies < (n == 5 ? 120 : 1); ++copies, ++k) {  // > 96 tensors: 2 launches
      Tensor g = Tensor::empty({n});
      g.uniform_(static_cast<uint64_t>(k), -2.0, 2.0);
      nn::Parameter p = nn::make_parameter("p", Tensor::zeros({n}, ember::DType::f32, device));
      p.grad.copy_(g);
      params.push_back(std::move(p));
    }
  }
  return params;
}

TEST(EmulatedClipGrad, MatchesTheCpuWithoutAHostWait) {
  for (float max_norm : {1.0f, 1e6f}) {
    auto cpu_params = make(Device::cpu()), gpu_params = make(kGpu);
    std::vector<nn::Parameter*> cpu_ptrs, gpu_ptrs;
    for (auto& p : cpu_params) cpu_ptrs.push_back(&p);
    for (auto& p : gpu_params) gpu_ptrs.push_back(&p);
    ember::Stream cpu;
    ember::Stream gpu = ember::current_stream(kGpu);
    gpu.synchronize();
    const auto before = ember::simt::sync_counts();
    const Tensor gpu_total = train::clip_grad_norm(gpu, gpu_ptrs, max_norm);
    EXPECT_EQ(ember::simt::sync_counts().total(), before.total()) << "no host wait";
    const double cpu_total = train::clip_grad_norm(cpu, cpu_ptrs, max_norm).item();
    EXPECT_NEAR(gpu_total.item(), cpu_total, 1e-6 * cpu_total);
    for (size_t i = 0; i < cpu_params.size(); i += 7) {
      const auto a = gpu_params[i].grad.to(Device::cpu()).to_vector<float>();
      const auto b = cpu_params[i].grad.to_vector<float>();
      ASSERT_EQ(a.size(), b.size());
      for (size_t j = 0; j < a.size(); j += 97) {
        EXPECT_NEAR(a[j], b[j], 1e-6f * std::abs(b[j]) + 1e-30f) << i << " " << j;
      }
    }
  }
}

}  // namespace
