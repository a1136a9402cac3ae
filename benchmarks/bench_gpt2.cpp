// bench_gpt2: one GPT-2 training step (forward, cross-entropy, backward, AdamW) in f32 and under
// bf16 autocast, tokens per second, the model's TFLOP/s and (on known GPUs) MFU: the small
// byte-level model (its context widened to T where T is longer) and GPT-2 small (d12), at T = 256
// and 1024 (and the small model at 128), on the CPU and on cuda:0 when a GPU is usable. Its PyTorch
// twin is benchmarks/reference/gpt2_torch.py (compare.py --only gpt2 prints the ratios, same rows).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "ember/ember.hpp"
#include "ratio_reporter.hpp"

namespace {

using namespace ember;

struct Case {
  std::string model;  // "small" or "d12"
  int64_t seq, batch;
};

void gpt2_step(benchmark::State& state, Device device, Case c, nn::Precision precision) {
  Stream stream = current_stream(device);
  train::GptConfig config = train::gpt_config(c.model);
  config.context = std::max(config.context, c.seq);  // the small model at T = 1024
  config.seed = 1;
  config.device = device;
  auto model = train::make_gpt(config);
  train::AdamW optimizer(model->parameters(), {.lr = 1e-4f, .beta2 = 0.95f});
  nn::SoftmaxCrossEntropy criterion({.fused = true});  // the logits become their gradient
  nn::Context ctx{stream, /*training=*/true, precision};
  std::vector<int32_t> tokens(static_cast<size_t>(c.batch * (c.seq + 1)));
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<int32_t>((i * 7919) % config.vocab);
  const Tensor all = Tensor::from_vector(tokens, Shape{c.batch, c.seq + 1});
  std::vector<int32_t> in, out;
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t t = 0; t < c.seq; ++t) {
      in.push_back(tokens[b * (c.seq + 1) + t]);
      out.push_back(tokens[b * (c.seq + 1) + t + 1]);
    }
  }
  const Tensor x = Tensor::from_vector(in, Shape{c.batch, c.seq}).to(stream);
  const Tensor y = Tensor::from_vector(out, Shape{c.batch * c.seq}).to(stream);
  auto step = [&] {
    optimizer.zero_grad();
    const Tensor logits = model->forward(ctx, x);
    const Tensor loss = criterion.forward(ctx, logits.reshape({c.batch * c.seq, config.vocab}), y);
    model->backward(ctx, criterion.backward(ctx).reshape({c.batch, c.seq, config.vocab}));
    optimizer.step(stream);
    return loss;
  };
  step().item();
  for (auto _ : state) benchmark::DoNotOptimize(step().item());
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(c.batch * c.seq),
                                                  benchmark::Counter::kIsIterationInvariantRate);
  // The model's FLOPs (train/mfu.hpp), and MFU where the device's peak is known (GPUs).
  const double flops =
      train::gpt_flops_per_token(config, c.seq) * static_cast<double>(c.batch * c.seq);
  state.counters["TFLOP/s"] =
      benchmark::Counter(flops / 1e12, benchmark::Counter::kIsIterationInvariantRate);
  if (const auto peak = train::peak_flops(device, precision)) {
    state.counters["MFU%"] =
        benchmark::Counter(100 * flops / *peak, benchmark::Counter::kIsIterationInvariantRate);
  }
}

void register_all(Device device, const std::string& prefix, const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    for (nn::Precision p : {nn::Precision::f32, nn::Precision::bf16}) {
      const std::string name = fmt::format("{}gpt2_{}/ember/{}/T:{}/batch:{}", prefix,
                                           nn::precision_name(p), c.model, c.seq, c.batch);
      benchmark::RegisterBenchmark(name.c_str(), gpt2_step, device, c, p)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  // d12 on the CPU: one sequence per step (seconds each); filter with --benchmark_filter.
  register_all(Device::cpu(), "cpu_",
               {{"small", 128, 16},
                {"small", 256, 8},
                {"small", 1024, 2},
                {"d12", 256, 1},
                {"d12", 1024, 1}});
  std::string why;
  if (default_device(&why).is_cuda()) {
    register_all(Device::cuda(0), "cuda_",
                 {{"small", 256, 32}, {"small", 1024, 8}, {"d12", 256, 32}, {"d12", 1024, 8}});
  } else {
    std::printf("GPU benchmarks skipped: %s. Measuring the CPU backend.\n",
                why.empty() ? "no CUDA device" : why.c_str());
  }
  return ember::bench::run_with_ratios(
      argc, argv, {}, {{"cpu_gpt2_bf16", "cpu_gpt2_f32"}, {"cuda_gpt2_bf16", "cuda_gpt2_f32"}});
}
