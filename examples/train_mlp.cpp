// train_mlp: trains an MLP classifier with AdamW and reports validation accuracy.
//
// Default data: a deterministic many-armed spiral (10 classes in 2-D) that a
// linear model cannot separate. --data DIR trains on MNIST IDX files instead.
//
//   train_mlp [--steps N] [--depth N] [--width N] [--batch N] [--lr X] ...   (--help lists all)
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cli.hpp"
#include "dataset_batches.hpp"
#include "ember/ember.hpp"
#include "evaluate.hpp"
#include "observability.hpp"
#include "resume.hpp"

namespace {

using example::accuracy;
using example::choose_device;
using example::parse_options;
using example::percent_or_none;
using example::Setter;
using example::UsageError;

struct Config : example::SpiralConfig {
  Config()
      : SpiralConfig{.steps = 2000, .depth = 4, .width = 256, .batch = 128, .log_every = 250} {}
  int workers = -1;                      // data::Loader's threads; -1: its default
  bool cuda_graph = false;               // --cuda-graph: each step one graph launch
  example::ObservabilityConfig observe;  // --trace, --metrics-port, --metrics-file
  double weight_decay = 1e-4;
  std::string activation = "relu";
  std::string data_dir;  // empty: spirals
  std::string device = "auto";
  std::string log_csv;  // empty: none
  std::string amp = "f32";
  bool count_subnormals = false;
  example::SaveConfig save;
};

constexpr const char* kUsage = R"(usage: train_mlp [options]

Trains an MLP classifier (AdamW, cosine learning-rate decay) and prints the
loss and validation accuracy every --log-every steps.

options:
  --steps N          training steps (default 2000)
  --depth N          hidden layers (default 4)
  --width N          units per hidden layer (default 256)
  --batch N          samples per step (default 128)
  --lr X             peak learning rate (default 0.002)
  --weight-decay X   AdamW weight decay (default 0.0001)
  --activation A     relu or gelu (default relu)
  --classes N        spiral arms / classes (default 10)
  --points N         spiral points per class (default 2000)
  --data DIR         train on MNIST IDX files in DIR instead of spirals
  --device D         auto, cpu, cuda or cuda:N (default auto: the GPU when ember can use one)
  --amp P            f32 (default), f16 or bf16: mixed precision (autocast; f16 adds dynamic
                     loss scaling, and the progress lines show the scale and skipped steps)
  --seed N           seed for data, initialization and shuffling (default 1)
  --log-every N      steps between progress lines (default 250)
  --log-csv FILE     write step, loss, learning rate, validation accuracy (on progress
                     steps) and samples/s of every step to FILE
  --save-dir DIR     the training state is saved in DIR; SIGTERM or SIGUSR1 then saves
                     at the end of the current step and exits 0
  --save-every N     save the training state every N steps (default: only when stopped by a
                     signal)
  --resume           continue from the newest valid saved state in --save-dir, if any
  --count-subnormals on progress lines, count the subnormal values in the parameters, the
                     gradients, AdamW's moments, and the layers' outputs and input
                     gradients (a debugging aid; docs/cpu.md)
  --workers N        threads that make training batches ahead (data::Loader; default: the
                     cores OpenMP leaves free, at least 1; 0: none)
  --cuda-graph       run each training step as one CUDA graph launch after a warm-up step
                     (train::CapturedStep; on the CPU the steps run as usual)
)";

// Subnormal values in the training state (--count-subnormals).
void print_subnormals(const std::vector<ember::nn::Parameter*>& parameters,
                      const ember::train::AdamW& optimizer) {
  int64_t values = 0, grads = 0, exp_avg = 0, exp_avg_sq = 0, total = 0;
  for (size_t i = 0; i < parameters.size(); ++i) {
    values += ember::count_subnormals(parameters[i]->value);
    grads += ember::count_subnormals(parameters[i]->grad);
    exp_avg += ember::count_subnormals(optimizer.exp_avg(i));
    exp_avg_sq += ember::count_subnormals(optimizer.exp_avg_sq(i));
    total += parameters[i]->value.numel();
  }
  fmt::print("  subnormals of {} each: parameters {} | gradients {} | exp_avg {} | exp_avg_sq {}\n",
             total, values, grads, exp_avg, exp_avg_sq);
  // Module outputs and the gradients they pass on, summed over the steps since the last line.
  int64_t elements = 0, found = 0;
  for (const ember::SubnormalCount& c : ember::take_subnormal_census()) {
    if (c.subnormals > 0)
      fmt::print("  subnormals in {}: {} of {}\n", c.where, c.subnormals, c.elements);
    elements += c.elements;
    found += c.subnormals;
  }
  if (found == 0) fmt::print("  no subnormals in {} module outputs and gradients\n", elements);
}

Config parse_args(int argc, char** argv) {
  Config c;
  std::map<std::string_view, Setter> options = {
      {"--weight-decay", example::number_option("--weight-decay", c.weight_decay)},
      {"--log-csv", example::file_option("--log-csv", c.log_csv)},
      {"--data",
       [&](const std::string& v) {
         if (v.empty()) throw UsageError{"--data needs a directory, not ''"};
         c.data_dir = v;
       }},
      {"--device", example::device_option(c.device)},
      {"--amp", example::amp_option(c.amp)},
      {"--workers", example::workers_option(c.workers)},
      {"--activation",
       [&](const std::string& v) {
         if (v != "relu" && v != "gelu") {
           throw UsageError{fmt::format("--activation must be relu or gelu, not '{}'", v)};
         }
         c.activation = v;
       }},
  };
  example::add_spiral_options(options, c);
  options["--cuda-graph"] = [&](const std::string&) { c.cuda_graph = true; };
  options["--count-subnormals"] = [&](const std::string&) {
    c.count_subnormals = true;
    ember::set_subnormal_census(true);
  };
  example::add_save_options(options, c.save);
  example::add_observability_options(options, c.observe);
  parse_options(argc, argv, options, example::usage_with_observability(kUsage),
                {"--resume", "--count-subnormals", "--cuda-graph"});
  example::check_save_options(c.save);
  return c;
}

int run(const Config& c) {
  using namespace ember;
  using Clock = std::chrono::steady_clock;
  const Device device = choose_device(c.device);
  // The device's current stream: where Tensor::to(device) and the model's tensors live, so
  // the whole step is ordered on one stream without host waits.
  Stream stream = current_stream(device);

  data::Dataset train, validation;
  if (c.data_dir.empty()) {
    data::SpiralsOptions spirals;
    spirals.classes = c.classes;
    spirals.points_per_class = c.points;
    spirals.seed = c.seed;
    std::tie(train, validation) = data::split(data::make_spirals(spirals), 0.2, c.seed);
    fmt::print("data: {}-class spirals, {} train / {} validation samples\n", c.classes,
               train.size(), validation.size());
  } else {
    train = data::load_mnist(c.data_dir, /*train=*/true);
    validation = data::load_mnist(c.data_dir, /*train=*/false);
    fmt::print("data: MNIST from {}, {} train / {} test samples\n", c.data_dir, train.size(),
               validation.size());
  }
  // Checked before training, not at the first validation.
  EMBER_CHECK(validation.size() == 0 || (validation.inputs.shape()[1] == train.inputs.shape()[1] &&
                                         validation.num_classes <= train.num_classes),
              "the validation set ({} features, {} classes) does not match the training set ({} "
              "features, {} classes)",
              validation.inputs.shape()[1], validation.num_classes, train.inputs.shape()[1],
              train.num_classes);
  const int64_t features = train.inputs.shape()[1];
  const int64_t batch = std::min(c.batch, train.size());

  nn::MlpOptions mlp;
  mlp.inputs = features;
  mlp.hidden = c.width;
  mlp.depth = c.depth;
  mlp.outputs = train.num_classes;
  mlp.activation = c.activation == "gelu" ? nn::ActivationKind::gelu : nn::ActivationKind::relu;
  mlp.seed = c.seed;
  mlp.device = device;
  auto model = nn::make_mlp(mlp);
  train::AdamW optimizer(model->parameters(), {.lr = static_cast<float>(c.lr),
                                               .weight_decay = static_cast<float>(c.weight_decay)});
  const auto schedule = train::LRSchedule::cosine(c.lr, c.steps, 0, c.lr / 10);
  nn::SoftmaxCrossEntropy criterion;
  const nn::Precision precision = nn::parse_precision(c.amp);
  nn::Context ctx{stream, /*training=*/true, precision};
  // Dynamic loss scaling for f16; a pass-through otherwise (bf16 has f32's range).
  amp::GradScalerOptions scaling;
  scaling.enabled = precision == nn::Precision::f16;
  amp::GradScaler scaler(device, scaling);
  fmt::print("model: {} on {}, {} steps of batch {}{}\n", model->name(), device.to_string(),
             c.steps, batch, precision == nn::Precision::f32 ? "" : ", autocast " + c.amp);

  // The CSV log: opened before training, so that a bad path fails at once.
  std::FILE* csv = nullptr;
  if (!c.log_csv.empty()) {
    csv = std::fopen(c.log_csv.c_str(), "w");
    EMBER_CHECK(csv != nullptr, "cannot create the CSV log '{}': {}", c.log_csv,
                std::strerror(errno));
    std::fputs("step,loss,lr,val_accuracy,samples_per_s\n", csv);
  }
  const auto close_csv = [&] {
    if (csv != nullptr && std::fclose(csv) != 0) {
      EMBER_THROW("writing the CSV log '{}' failed: {}", c.log_csv, std::strerror(errno));
    }
    csv = nullptr;
  };

  uint64_t epoch = 0;
  int64_t cursor = 0;
  double interval_seconds = 0, total_seconds = 0, last_loss = 0, first_loss = 0;
  int64_t interval_samples = 0;
  double val_acc = 0;

  // Training state: the model, AdamW's moments and step, the scaler, and where the data is; the
  // options a bitwise continuation depends on are saved with it.
  std::map<std::string, std::string> saved_options = example::spiral_save_options(c);
  saved_options.insert({{"weight_decay", fmt::format("{}", c.weight_decay)},
                        {"data", c.data_dir},
                        {"activation", c.activation},
                        {"amp", c.amp}});
  example::SavedStates saves(c.save, *model, optimizer, scaler, saved_options);
  int64_t first_step = 1;
  if (const auto resumed = saves.resume([](const std::string& line) {
        std::fputs(line.c_str(), line.starts_with("warning") ? stderr : stdout);
      })) {
    first_step = resumed->step + 1;
    epoch = static_cast<uint64_t>(resumed->epoch);
    cursor = resumed->data_position;
    ctx.step = resumed->micro_step;
  }
  if (first_step > c.steps) {
    fmt::print("done: the saved state has all {} steps already\n", c.steps);
    return 0;
  }
  // Each epoch a fresh shuffle, the batches made ahead by data::Loader's workers.
  example::DatasetBatches batches(
      train, batch, train.size(),
      [&](uint64_t e) { return data::permutation(train.size(), c.seed, e); }, device, c.workers,
      epoch, cursor);

  train::StepProfiler profiler(stream);  // where each step's time goes, on the progress lines
  example::Observability observe(c.observe, "train_mlp", device, "samples", true,
                                 [](const std::string& line) { std::fputs(line.c_str(), stdout); });
  // --cuda-graph: the step (zero_grad to the optimizer) captured once after a warm-up step and
  // replayed as one launch (train::CapturedStep), reading the batch from fixed tensors (which
  // the loader's copies write) and the learning rate from device memory.
  Tensor graph_x, graph_y, graph_loss;
  std::optional<train::CapturedStep> captured;
  if (c.cuda_graph) {
    optimizer.keep_lr_on_device();
    std::tie(graph_x, graph_y) = batches.fixed_batch(stream);
    captured.emplace(
        stream,
        [&] {
          optimizer.zero_grad();
          graph_loss = criterion.forward(ctx, model->forward(ctx, graph_x), graph_y);
          model->backward(ctx, criterion.backward(ctx, scaler.scale()));
          scaler.step(stream, optimizer);
          scaler.update(stream);
        },
        train::CapturedStep::Options{.optimizers = {&optimizer}});
  }
  for (int64_t step = first_step; step <= c.steps; ++step) {
    const auto start = Clock::now();
    observe.step_begins(step);
    profiler.begin_step();
    profiler.phase(train::StepPhase::data);
    // --cuda-graph: the loader writes the batch into the graph's fixed tensors.
    std::vector<Tensor> xy;
    if (captured) {
      batches.next_into(stream, graph_x, graph_y);
    } else {
      xy = batches.next(stream);
    }
    std::tie(epoch, cursor) = batches.position();

    schedule.apply(optimizer);  // cosine decay from lr to lr / 10 over the run

    Tensor loss;
    if (captured) {
      profiler.phase(train::StepPhase::forward);  // the whole graph: one launch
      captured->run();
      loss = graph_loss;
    } else {
      optimizer.zero_grad();
      profiler.phase(train::StepPhase::forward);
      const Tensor logits = model->forward(ctx, xy[0]);
      loss = criterion.forward(ctx, logits, xy[1]);
      profiler.phase(train::StepPhase::backward);
      model->backward(ctx, criterion.backward(ctx, scaler.scale()));  // d(loss * scale)
      profiler.phase(train::StepPhase::optimizer);
      scaler.step(stream, optimizer);  // unscales; skips the step on inf/nan gradients
      scaler.update(stream);
    }
    profiler.phase(train::StepPhase::other);
    last_loss = loss.item();  // synchronizes with the device
    profiler.end_step();
    if (step == first_step) first_loss = last_loss;
    EMBER_CHECK(std::isfinite(last_loss),
                "the loss is {} at step {}: training diverged. Lower --lr (now {:g}) or "
                "--weight-decay (now {:g})",
                last_loss, step, c.lr, c.weight_decay);

    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    interval_seconds += seconds;
    total_seconds += seconds;
    interval_samples += batch;
    observe.step_ends(step, c.steps, seconds, static_cast<double>(batch), last_loss, std::nullopt);
    const bool progress_step = step % c.log_every == 0 || step == c.steps;
    if (progress_step) {
      // Validation's forward passes are not training steps: the census leaves them out.
      if (c.count_subnormals) ember::set_subnormal_census(false);
      val_acc = accuracy(*model, validation, stream, 1024, precision);
      if (c.count_subnormals) ember::set_subnormal_census(true);
    }
    if (csv != nullptr) {
      const std::string acc =
          progress_step && validation.size() > 0 ? fmt::format("{:.6f}", val_acc) : "";
      fmt::print(csv, "{},{:.6f},{:.6g},{},{:.0f}\n", step, last_loss, optimizer.lr(), acc,
                 batch / seconds);
    }
    if (progress_step) {
      const std::string scaling_state =
          scaler.enabled() ? fmt::format(" | scale {:g} | skipped {}", scaler.get_scale(),
                                         scaler.skipped_steps())
                           : "";
      fmt::print("step {:6d} | loss {:.4f} | val acc {} | {:9.0f} samples/s{}\n", step, last_loss,
                 percent_or_none(val_acc, validation.size()), interval_samples / interval_seconds,
                 scaling_state);
      const train::StepBreakdown breakdown = profiler.take();
      fmt::print("       {}\n", breakdown.describe());
      observe.interval(breakdown);
      if (c.count_subnormals) print_subnormals(model->parameters(), optimizer);
      std::fflush(stdout);
      interval_seconds = 0;
      interval_samples = 0;
    }
    if (saves.after_step({.step = step,
                          .epoch = static_cast<int64_t>(epoch),
                          .data_position = cursor,
                          .micro_step = ctx.step})) {
      close_csv();
      fmt::print("stopped by signal after step {}: saved {}; continue with --resume\n", step,
                 saves.path_of(step));
      return 0;
    }
  }
  close_csv();
  if (captured) fmt::print("cuda graph: {}\n", captured->describe());
  fmt::print(
      "done: {} steps in {:.1f} s ({:.0f} samples/s), loss {:.4f} -> {:.4f}, validation accuracy "
      "{} (chance {:.2f}%)\n",
      c.steps, total_seconds,
      static_cast<double>((c.steps - first_step + 1) * batch) / total_seconds, first_loss,
      last_loss, percent_or_none(val_acc, validation.size()),
      100.0 / static_cast<double>(train.num_classes));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return example::run_main<Config>("train_mlp", argc, argv, parse_args, run);
}
