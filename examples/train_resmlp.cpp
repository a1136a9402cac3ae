// train_resmlp: trains a deep pre-norm residual MLP (train::make_residual_mlp) with activation
// checkpointing, gradient accumulation and mixed precision, and reports the allocator's peak
// memory next to the step time.
//
//   train_resmlp [--checkpoint none|full|selective|auto:<MiB>] [--accumulate K] [--amp f16|bf16]
//   ...
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "allocation_trace.hpp"
#include "cli.hpp"
#include "dataset_batches.hpp"
#include "dataset_steps.hpp"
#include "ember/ember.hpp"
#include "evaluate.hpp"
#include "observability.hpp"

namespace {

using example::percent_or_none;
using example::Setter;

struct Config : example::SpiralConfig {
  Config() : SpiralConfig{.steps = 600, .depth = 8, .width = 128, .batch = 256, .log_every = 100} {}
  int64_t expansion = 4;
  int64_t accumulate = 1;
  double dropout = 0.05;
  std::string checkpoint = "none";  // none, full, selective, auto:<MiB>
  std::string amp = "f32";
  std::string device = "auto";
  std::string record_allocations;
  std::string command_line;              // for the allocation trace's header
  int workers = -1;                      // data::Loader's threads; -1: its default
  example::ObservabilityConfig observe;  // --trace, --metrics-port, --metrics-file
  bool cuda_graph = false;               // --cuda-graph: each step one graph launch
};

constexpr const char* kUsage = R"(usage: train_resmlp [options]

Trains a deep pre-norm residual MLP (LayerNorm -> Linear -> GELU -> Linear -> Dropout blocks)
with AdamW on the spirals, and prints the loss, validation accuracy, step time and the
allocator's peak memory every --log-every steps.

options:
  --steps N          optimizer steps (default 600)
  --depth N          residual blocks (default 8)
  --width N          block width (default 128)
  --expansion N      hidden width of a block, times --width (default 4)
  --batch N          samples per optimizer step (default 256)
  --accumulate K     micro-batches per step (batch / K samples each; default 1)
  --lr X             peak learning rate (default 0.002)
  --dropout P        dropout in each block (default 0.05)
  --checkpoint C     none (default), full (every block), selective (every block: keep the
                     matmul outputs, remake norms and activations) or auto:<MiB>
                     (nn::plan_checkpoints: the blocks that fit a step's peak into that budget)
  --amp P            f32 (default), f16 (with the GradScaler) or bf16
  --classes N        spiral arms / classes (default 10)
  --points N         spiral points per class (default 2000)
  --device D         auto, cpu, cuda or cuda:N (default auto)
  --seed N           seed for data, initialization, dropout and shuffling (default 1)
  --log-every N      steps between progress lines (default 100)
  --cuda-graph       run each training step (micro-batches, dropout, scaler, AdamW) as one CUDA
                     graph launch after a warm-up step (train::CapturedStep; dropout reads its
                     step from device memory, so each replay draws new masks); on the CPU the
                     steps run as usual
  --workers N        threads that make training batches ahead (data::Loader; default: the
                     cores OpenMP leaves free, at least 1; 0: none)
  --record-allocations FILE  write every allocation on the device to FILE (an allocation
                     trace for bench_allocator; .gz compresses)
)";

Config parse_args(int argc, char** argv) {
  Config c;
  std::map<std::string_view, Setter> options = {
      {"--expansion", example::int_option("--expansion", c.expansion, 1)},
      {"--accumulate", example::int_option("--accumulate", c.accumulate, 1)},
      {"--dropout", example::dropout_option(c.dropout)},
      {"--checkpoint", example::checkpoint_option(c.checkpoint)},
      {"--amp", example::amp_option(c.amp)},
      {"--workers", example::workers_option(c.workers)},
      {"--record-allocations", example::file_option("--record-allocations", c.record_allocations)},
      {"--device", example::device_option(c.device)},
  };
  example::add_spiral_options(options, c);
  c.command_line = example::command_line(argc, argv);
  example::add_observability_options(options, c.observe);
  options["--cuda-graph"] = [&](const std::string&) { c.cuda_graph = true; };
  example::parse_options(argc, argv, options, example::usage_with_observability(kUsage),
                         {"--cuda-graph"});
  example::check_accumulate(c.batch, c.accumulate);
  return c;
}

double mib(int64_t bytes) {
  return static_cast<double>(bytes) / (1 << 20);
}

int run(const Config& c) {
  using namespace ember;
  using Clock = std::chrono::steady_clock;
  const Device device = example::choose_device(c.device);
  Stream stream = current_stream(device);
  // Before the model: the trace holds the parameters too, and outlives every tensor of the run.
  const example::AllocationRecording recording(c.record_allocations, device, 0, 1, c.command_line);

  auto [train_set, validation] = data::split(
      data::make_spirals({.classes = c.classes, .points_per_class = c.points, .seed = c.seed}), 0.2,
      c.seed);
  const int64_t batch = std::min(c.batch, train_set.size() / c.accumulate * c.accumulate);
  EMBER_CHECK(batch >= c.accumulate, "the training set ({} samples) is smaller than --accumulate",
              train_set.size());
  const int64_t micro = batch / c.accumulate;
  fmt::print("data: {}-class spirals, {} train / {} validation samples\n", c.classes,
             train_set.size(), validation.size());

  auto model = train::make_residual_mlp(
      {.inputs = train_set.inputs.shape()[1],
       .width = c.width,
       .depth = c.depth,
       .expansion = c.expansion,
       .outputs = train_set.num_classes,
       .dropout = static_cast<float>(c.dropout),
       .checkpoint = c.checkpoint == "full" || c.checkpoint == "selective",
       .checkpoint_policy = c.checkpoint == "selective" ? nn::CheckpointPolicy::selective
                                                        : nn::CheckpointPolicy::full,
       .seed = c.seed,
       .device = device});
  train::AdamW optimizer(model->parameters(), {.lr = static_cast<float>(c.lr)});
  const auto schedule = train::LRSchedule::cosine(c.lr, c.steps, c.steps / 20, c.lr / 10);
  const nn::Precision precision = nn::parse_precision(c.amp);
  amp::GradScalerOptions scaling;
  scaling.enabled = precision == nn::Precision::f16;
  amp::GradScaler scaler(device, scaling);
  nn::SoftmaxCrossEntropy criterion;
  nn::Context ctx{stream, /*training=*/true, precision};
  const train::Accumulation accumulation(c.accumulate);

  if (c.checkpoint.starts_with("auto:")) {  // planned on the first micro-batch
    Tensor x_host = Tensor::empty({micro, train_set.inputs.shape()[1]});
    Tensor y_host = Tensor::empty({micro}, DType::i32);
    const std::vector<int64_t> order = data::permutation(train_set.size(), c.seed, 0);
    const int64_t budget = example::checkpoint_budget_bytes(c.checkpoint);
    data::gather(train_set, std::span<const int64_t>(order).subspan(0, static_cast<size_t>(micro)),
                 x_host, y_host);
    const nn::CheckpointPlan plan = nn::plan_checkpoints(*model, x_host.to(stream), budget, ctx);
    nn::apply_checkpoint_plan(*model, plan);
    fmt::print("{}\n", plan.describe());
  }
  fmt::print(
      "model: {} residual blocks of {} (x{}), {} parameters, on {}; {} steps of {} = {} x {}"
      "{}{}\n",
      c.depth, c.width, c.expansion,
      [&] {
        int64_t n = 0;
        for (nn::Parameter* p : model->parameters()) n += p->value.numel();
        return n;
      }(),
      device.to_string(), c.steps, batch, c.accumulate, micro,
      c.checkpoint == "none" ? "" : ", checkpoint " + c.checkpoint,
      precision == nn::Precision::f32 ? "" : ", autocast " + c.amp);

  // Each epoch a fresh shuffle, the batches made ahead by data::Loader's workers.
  example::DatasetBatches batches(
      train_set, batch, train_set.size(),
      [&](uint64_t e) { return data::permutation(train_set.size(), c.seed, e); }, device, c.workers,
      0, 0);
  double interval_seconds = 0, total_seconds = 0, last_loss = 0, first_loss = 0, val_acc = 0;
  int64_t interval_steps = 0, peak = 0;
  memory::reset_peak_stats(device);
  train::StepProfiler profiler(stream);  // where each step's time goes, on the progress lines
  example::Observability observe(c.observe, "train_resmlp", device, "samples", true,
                                 [](const std::string& line) { std::fputs(line.c_str(), stdout); });
  // One step: zero_grad, the micro-batches of x and y, the scaler and AdamW; the loss sum in
  // `loss_sum`. `phases` marks the profiler's phases (not inside a captured graph).
  Tensor loss_sum;
  auto train_step = [&](const Tensor& x, const Tensor& y, bool phases) {
    optimizer.zero_grad();
    loss_sum = Tensor::zeros({1}, DType::f32, stream);
    accumulation.run(
        ctx,
        [&](const train::MicroBatch& mb) {
          const Tensor xb = x.slice(mb.index * micro, (mb.index + 1) * micro);
          const Tensor yb = y.slice(mb.index * micro, (mb.index + 1) * micro);
          if (phases) profiler.phase(train::StepPhase::forward);
          const Tensor loss = criterion.forward(ctx, model->forward(ctx, xb), yb);
          ops::add(stream, loss_sum, loss_sum, loss);
          if (phases) profiler.phase(train::StepPhase::backward);
          model->backward(ctx, criterion.backward(ctx, mb.dloss));
        },
        scaler.scale());
    if (phases) profiler.phase(train::StepPhase::optimizer);
    scaler.step(stream, optimizer);
    scaler.update(stream);
  };
  // Eager steps, or with --cuda-graph one graph launch each (examples/dataset_steps.hpp).
  example::DatasetSteps steps(batches, ctx, optimizer, c.accumulate, c.cuda_graph, train_step);
  for (int64_t step = 1; step <= c.steps; ++step) {
    const auto start = Clock::now();
    observe.step_begins(step);
    profiler.begin_step();
    schedule.apply(optimizer);
    steps.run(profiler);
    profiler.phase(train::StepPhase::other);
    last_loss = loss_sum.item() / static_cast<double>(c.accumulate);  // waits for the step
    profiler.end_step();
    if (step == 1) first_loss = last_loss;
    example::check_loss(last_loss, step);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    interval_seconds += seconds;
    total_seconds += seconds;
    ++interval_steps;
    observe.step_ends(step, c.steps, seconds, static_cast<double>(batch), last_loss, std::nullopt);
    if (step % c.log_every == 0 || step == c.steps) {
      const int64_t interval_peak = memory::stats(device).allocated.peak;
      peak = std::max(peak, interval_peak);
      model->eval();
      val_acc = example::accuracy(*model, validation, stream, 1024, precision);
      model->train();
      fmt::print("step {:5d} | loss {:.4f} | val acc {} | {:7.2f} ms/step | peak {:7.2f} MiB{}\n",
                 step, last_loss, percent_or_none(val_acc, validation.size()),
                 1000 * interval_seconds / static_cast<double>(interval_steps), mib(interval_peak),
                 scaler.enabled() ? fmt::format(" | scale {:g} | skipped {}", scaler.get_scale(),
                                                scaler.skipped_steps())
                                  : "");
      std::fflush(stdout);
      const train::StepBreakdown breakdown = profiler.take();
      fmt::print("      {}\n", breakdown.describe());
      observe.interval(breakdown);
      interval_seconds = 0;
      interval_steps = 0;
      memory::reset_peak_stats(device);
    }
  }
  fmt::print("{}", steps.summary());
  fmt::print(
      "done: {} steps in {:.1f} s ({:.2f} ms/step), loss {:.4f} -> {:.4f}, validation accuracy {} "
      "(chance {:.2f}%), peak allocated {:.2f} MiB\n",
      c.steps, total_seconds, 1000 * total_seconds / static_cast<double>(c.steps), first_loss,
      last_loss, percent_or_none(val_acc, validation.size()),
      100.0 / static_cast<double>(train_set.num_classes), mib(peak));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return example::run_main<Config>("train_resmlp", argc, argv, parse_args, run);
}
