// bench_checkpoint: activation checkpointing on a deep residual MLP (train::make_residual_mlp;
// default 24 blocks of width 1024, batch 256, AdamW): the allocator's peak allocation and the
// step time of none / full / selective / auto, with their ratios to "none", measured in the same
// run. "auto" plans (nn::plan_checkpoints) for a budget halfway between the peaks without and with
// every block checkpointed.
//
//   bench_checkpoint [--depth N] [--width N] [--batch N] [--device cpu|cuda:N] [benchmark flags]
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "ember/ember.hpp"

namespace {

using namespace ember;

struct Shape3 {
  int64_t depth = 24, width = 1024, batch = 256;
};
Shape3 g_shape;
Device g_device;
std::map<std::string, double> g_peak_mib;        // by mode, for the ratios
std::map<std::string, double> g_activation_mib;  // the peak above what stays allocated

double mib(int64_t bytes) {
  return static_cast<double>(bytes) / (1 << 20);
}

void step_bench(benchmark::State& state, const std::string& mode) {
  constexpr int64_t kInputs = 64, kClasses = 10;
  Stream stream = current_stream(g_device);
  auto model = train::make_residual_mlp({.inputs = kInputs,
                                         .width = g_shape.width,
                                         .depth = g_shape.depth,
                                         .expansion = 4,
                                         .outputs = kClasses,
                                         .checkpoint = mode == "full" || mode == "selective",
                                         .checkpoint_policy = mode == "selective"
                                                                  ? nn::CheckpointPolicy::selective
                                                                  : nn::CheckpointPolicy::full,
                                         .seed = 1,
                                         .device = g_device});
  train::AdamW optimizer(model->parameters());
  nn::SoftmaxCrossEntropy criterion;
  nn::Context ctx{stream};
  const Tensor x = Tensor::empty({g_shape.batch, kInputs}).uniform_(2, -1, 1).to(stream);
  std::vector<int32_t> labels(static_cast<size_t>(g_shape.batch));
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>(i % kClasses);
  const Tensor y = Tensor::from_vector(labels, {g_shape.batch}).to(stream);
  auto step = [&] {
    optimizer.zero_grad();
    const Tensor loss = criterion.forward(ctx, model->forward(ctx, x), y);
    model->backward(ctx, criterion.backward(ctx));
    optimizer.step(stream);
    ++ctx.step;
    return loss;
  };
  step().item();  // optimizer state exists from here on
  if (mode == "auto") {
    const nn::CheckpointPlan probe = nn::plan_checkpoints(*model, x, int64_t{1} << 50, ctx);
    const int64_t budget = (probe.unplanned_peak_bytes + probe.least_peak_bytes) / 2;
    const nn::CheckpointPlan plan = nn::plan_checkpoints(*model, x, budget, ctx);
    nn::apply_checkpoint_plan(*model, plan);
    std::printf("auto: %s\n", plan.describe().c_str());
    state.counters["predicted_MiB"] = mib(plan.predicted_peak_bytes);
  }
  stream.synchronize();
  memory::reset_peak_stats(g_device);
  // What stays allocated between steps: parameters, gradients, optimizer state, the batch.
  const int64_t resident = memory::stats(g_device).allocated.current;
  for (auto _ : state) benchmark::DoNotOptimize(step().item());
  const int64_t peak = memory::stats(g_device).allocated.peak;
  state.counters["peak_MiB"] = mib(peak);
  state.counters["activation_MiB"] = mib(peak - resident);
  g_peak_mib[mode] = mib(peak);
  g_activation_mib[mode] = mib(peak - resident);
}

}  // namespace

int main(int argc, char** argv) {
  int kept = 1;
  std::string device = "cpu";
  for (int i = 1; i < argc; ++i) {  // our flags; the rest go to Google Benchmark
    auto value = [&](const char* flag) -> const char* {
      if (std::strcmp(argv[i], flag) != 0 || i + 1 >= argc) return nullptr;
      return argv[++i];
    };
    if (const char* v = value("--depth")) {
      g_shape.depth = std::atoll(v);
    } else if (const char* v2 = value("--width")) {
      g_shape.width = std::atoll(v2);
    } else if (const char* v3 = value("--batch")) {
      g_shape.batch = std::atoll(v3);
    } else if (const char* v4 = value("--device")) {
      device = v4;
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  if (g_shape.depth < 1 || g_shape.width < 1 || g_shape.batch < 1) {
    std::fprintf(stderr, "bench_checkpoint: --depth, --width and --batch must be positive\n");
    return 2;
  }
  try {
    g_device = Device::parse(device);
    require_available(g_device);
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_checkpoint: %s\n", e.message().c_str());
    return 2;
  }
  std::printf("residual MLP: %lld blocks of %lld (x4), batch %lld, on %s\n",
              static_cast<long long>(g_shape.depth), static_cast<long long>(g_shape.width),
              static_cast<long long>(g_shape.batch), g_device.to_string().c_str());
  for (const char* mode : {"none", "full", "selective", "auto"}) {
    benchmark::RegisterBenchmark((std::string("checkpoint/") + mode).c_str(), step_bench,
                                 std::string(mode))
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime()
        ->Iterations(3);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  struct Reporter : benchmark::ConsoleReporter {
    std::map<std::string, double> seconds;
    void ReportRuns(const std::vector<Run>& runs) override {
      ConsoleReporter::ReportRuns(runs);
      for (const Run& run : runs) {
        if (!run.error_occurred) seconds[run.benchmark_name()] = run.GetAdjustedRealTime();
      }
    }
  } reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  const auto none_time = reporter.seconds.find("checkpoint/none/iterations:3/real_time");
  if (none_time != reporter.seconds.end() && g_peak_mib.count("none")) {
    std::printf(
        "\nrelative to none, same run: mode, peak allocated, activation memory (the peak above "
        "what stays allocated), step time\n");
    for (const char* mode : {"full", "selective", "auto"}) {
      const auto t =
          reporter.seconds.find(std::string("checkpoint/") + mode + "/iterations:3/real_time");
      if (t == reporter.seconds.end() || !g_peak_mib.count(mode)) continue;
      std::printf("  %-9s %6.3f %6.3f %6.3f\n", mode, g_peak_mib[mode] / g_peak_mib["none"],
                  g_activation_mib[mode] / g_activation_mib["none"], t->second / none_time->second);
    }
  }
  return 0;
}
