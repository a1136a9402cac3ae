// bench_train_step: one MLP training step (forward, loss, backward, AdamW) on
// the CPU, in samples per second, at a few model sizes.
#include <benchmark/benchmark.h>

#include "ember/ember.hpp"

namespace {

using namespace ember;

void train_step(benchmark::State& state) {
  const int64_t width = state.range(0), depth = state.range(1), batch = state.range(2);
  constexpr int64_t kInputs = 64, kClasses = 10;
  Stream stream;
  nn::Context ctx{stream};
  auto model = nn::make_mlp(
      {.inputs = kInputs, .hidden = width, .depth = depth, .outputs = kClasses, .seed = 1});
  train::AdamW optimizer(model->parameters());
  nn::SoftmaxCrossEntropy criterion;
  Tensor x = Tensor::empty({batch, kInputs});
  x.uniform_(2, -1, 1);
  std::vector<int32_t> labels(static_cast<size_t>(batch));
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>(i % kClasses);
  const Tensor y = Tensor::from_vector(labels, {batch});
  for (auto _ : state) {
    optimizer.zero_grad();
    const Tensor loss = criterion.forward(ctx, model->forward(ctx, x), y);
    model->backward(ctx, criterion.backward(ctx));
    optimizer.step();
    benchmark::DoNotOptimize(loss.item());
  }
  state.SetItemsProcessed(state.iterations() * batch);
  state.counters["samples/s"] =
      benchmark::Counter(static_cast<double>(batch), benchmark::Counter::kIsIterationInvariantRate);
}

// {width, depth, batch}: train_mlp's default model, then wider ones.
BENCHMARK(train_step)
    ->Args({256, 4, 128})
    ->Args({512, 4, 256})
    ->Args({1024, 4, 512})
    ->ArgNames({"width", "depth", "batch"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
