// bench_train_step: one MLP training step (forward, loss, backward, AdamW) in f32 and under
// autocast (bf16; f16 with the GradScaler), at a few model sizes: step time, samples per
// second and the allocator's peak allocated memory, with each precision's speed relative to f32
// measured in the same run. On the CPU; on cuda:0 too when a GPU is usable.
#include <benchmark/benchmark.h>

#include <string>

#include "bench_support.hpp"
#include "ember/ember.hpp"
#include "ratio_reporter.hpp"

namespace {

using namespace ember;

struct Size {
  int64_t width, depth, batch;
};

void train_step(benchmark::State& state, Device device, Size size, nn::Precision precision,
                bool graph) {
  constexpr int64_t kInputs = 64, kClasses = 10;
  Stream stream = current_stream(device);
  nn::Context ctx{stream, /*training=*/true, precision};
  auto model = nn::make_mlp({.inputs = kInputs,
                             .hidden = size.width,
                             .depth = size.depth,
                             .outputs = kClasses,
                             .seed = 1,
                             .device = device});
  train::AdamW optimizer(model->parameters());
  amp::GradScalerOptions scaling;
  scaling.enabled = precision == nn::Precision::f16;
  amp::GradScaler scaler(device, scaling);
  nn::SoftmaxCrossEntropy criterion;
  Tensor x = Tensor::empty({size.batch, kInputs});
  x.uniform_(2, -1, 1);
  std::vector<int32_t> labels(static_cast<size_t>(size.batch));
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>(i % kClasses);
  const Tensor xd = x.to(stream), y = Tensor::from_vector(labels, {size.batch}).to(stream);
  auto step = [&] {
    optimizer.zero_grad();
    const Tensor loss = criterion.forward(ctx, model->forward(ctx, xd), y);
    model->backward(ctx, criterion.backward(ctx, scaler.scale()));
    scaler.step(stream, optimizer);
    scaler.update(stream);
    return loss;
  };
  // Graph rows: the step captured once (train::CapturedStep, after the warm-up step) and
  // replayed as one launch per step.
  bench::GraphableStep graphable(stream, optimizer, graph, step);
  graphable.warm_up();  // state and working copies exist from here on
  memory::reset_peak_stats(device);
  const int64_t before = memory::stats(device).allocated.current;
  for (auto _ : state) benchmark::DoNotOptimize(graphable.run().item());
  const int64_t peak = memory::stats(device).allocated.peak;
  state.counters["samples/s"] = benchmark::Counter(static_cast<double>(size.batch),
                                                   benchmark::Counter::kIsIterationInvariantRate);
  // What a step allocates on top of what stays (parameters, gradients, optimizer state):
  // activations, gradients of activations, working copies' replacements, scratch.
  state.counters["step_MiB"] = static_cast<double>(peak - before) / (1 << 20);
  state.counters["peak_MiB"] = static_cast<double>(peak) / (1 << 20);
}

const Size kSizes[] = {{256, 4, 128}, {512, 4, 256}, {1024, 4, 512}, {2048, 4, 512}};

void register_all(Device device, const std::string& prefix) {
  for (const Size& s : kSizes) {
    for (nn::Precision p : {nn::Precision::f32, nn::Precision::bf16, nn::Precision::f16}) {
      // "<prefix><group>_<precision>/ember/width:<width>/depth:<depth>/batch:<batch>"
      const auto add = [&](const char* group, bool graph) {
        bench::register_ms(fmt::format("{}{}_{}/ember/width:{}/depth:{}/batch:{}", prefix, group,
                                       nn::precision_name(p), s.width, s.depth, s.batch),
                           train_step, device, s, p, graph);
      };
      add("step", false);
      // The same step as one CUDA graph launch (issue goal: the small MLP at 1.5x PyTorch's
      // CUDA-graph step; benchmarks/reference has PyTorch's).
      if (device.is_cuda()) add("step_graph", true);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all(Device::cpu(), "cpu_");
  if (bench::gpu_usable()) register_all(Device::cuda(0), "cuda_");
  return ember::bench::run_with_ratios(argc, argv, {},
                                       {{"cpu_step_bf16", "cpu_step_f32"},
                                        {"cpu_step_f16", "cpu_step_f32"},
                                        {"cuda_step_bf16", "cuda_step_f32"},
                                        {"cuda_step_f16", "cuda_step_f32"},
                                        {"cuda_step_graph_f32", "cuda_step_f32"},
                                        {"cuda_step_graph_bf16", "cuda_step_bf16"},
                                        {"cuda_step_graph_f16", "cuda_step_f16"}});
}
