// train_ddp: trains the residual MLP of train_resmlp data-parallel, one replica per rank
// (dist::DistributedDataParallel), with checkpointing, accumulation and mixed precision.
//
//   mpirun -np 4 train_ddp [--batch N] [--accumulate K] [--amp f16|bf16] [--checkpoint full] ...
//   srun --ntasks 4 train_ddp ...
//   RANK=0 WORLD_SIZE=1 train_ddp ...   (torchrun-style variables; CUDA tensors only across hosts)
//
// Each rank trains on its own shard of every epoch (data::DistributedSampler); rank 0 alone
// prints progress.
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cli.hpp"
#include "dataset_batches.hpp"
#include "dataset_steps.hpp"
#include "ember/ember.hpp"
#include "evaluate.hpp"
#include "observability.hpp"
#include "resume.hpp"

namespace {

using example::parse_double;
using example::percent_or_none;
using example::Setter;
using example::UsageError;

struct Config : example::SpiralConfig {
  // --batch: samples per rank and step.
  Config() : SpiralConfig{.steps = 300, .depth = 4, .width = 128, .batch = 64, .log_every = 100} {}
  int workers = -1;                      // data::Loader's threads; -1: its default
  example::ObservabilityConfig observe;  // --trace, --metrics-port, --metrics-file
  int64_t accumulate = 1;
  double dropout = 0.05;
  double bucket_mb = 25;
  std::string checkpoint = "none";
  std::string amp = "f32";
  std::string device = "auto";
  bool cuda_graph = false;  // --cuda-graph: each step one graph launch
  example::SaveConfig save;
};

constexpr const char* kUsage =
    R"(usage: train_ddp [options]   (under mpirun -np N, srun, or RANK/WORLD_SIZE)

Trains a residual MLP on the spirals with data parallelism: every rank holds a replica, trains on
its shard of each epoch, and DistributedDataParallel averages the gradients in buckets while
backward runs. Rank 0 prints the loss (averaged over ranks), validation accuracy and step time.

options:
  --steps N          optimizer steps (default 300)
  --depth N          residual blocks (default 4)
  --width N          block width (default 128)
  --batch N          samples per rank and step (default 64)
  --accumulate K     micro-batches per step, K - 1 of them without communication (default 1)
  --lr X             peak learning rate (default 0.002)
  --dropout P        dropout in each block (default 0.05)
  --checkpoint C     none (default), full or selective (every block)
  --amp P            f32 (default), f16 (GradScaler; skipped steps agree across ranks) or bf16
  --bucket-mb X      DDP bucket size in MiB (default 25)
  --classes N        spiral arms / classes (default 10)
  --points N         spiral points per class (default 2000)
  --device D         auto (the rank's GPU when there is one), cpu or cuda (default auto)
  --seed N           seed for data, initialization, dropout and shuffling (default 1)
  --log-every N      steps between progress lines (default 100)
  --save-dir DIR     the training state is saved in DIR (a directory every rank sees);
                     SIGTERM or SIGUSR1 on any rank (mpirun forwards SIGUSR1) then saves at
                     the end of the current step on every rank and exits 0
  --save-every N     save the training state every N steps (default: only when stopped by a
                     signal)
  --resume           continue from the newest saved state that verifies on every rank
  --workers N        threads that make training batches ahead (data::Loader; default: the
                     cores OpenMP leaves free, at least 1; 0: none)
  --cuda-graph       run each step (micro-batches, dropout, the buckets' all-reduces, the scaler
                     and AdamW) as one CUDA graph launch after a warm-up step
                     (train::CapturedStep); on the CPU the steps run as usual
)";

Config parse_args(int argc, char** argv) {
  Config c;
  std::map<std::string_view, Setter> options = {
      {"--accumulate", example::int_option("--accumulate", c.accumulate, 1)},
      {"--dropout", example::dropout_option(c.dropout)},
      {"--bucket-mb",
       [&](const std::string& v) {
         c.bucket_mb = parse_double("--bucket-mb", v);
         if (!(c.bucket_mb > 0 && c.bucket_mb < 1e9)) {
           throw UsageError{fmt::format("--bucket-mb must be > 0 and below 1e9, not {}", v)};
         }
       }},
      {"--checkpoint",
       [&](const std::string& v) {
         if (v != "none" && v != "full" && v != "selective") {
           throw UsageError{
               fmt::format("--checkpoint must be none, full or selective, not '{}'", v)};
         }
         c.checkpoint = v;
       }},
      {"--amp", example::amp_option(c.amp)},
      {"--workers", example::workers_option(c.workers)},
      {"--device",
       [&](const std::string& v) {
         if (v != "auto" && v != "cpu" && v != "cuda") {
           throw UsageError{fmt::format(
               "--device must be auto, cpu or cuda (each rank takes its own GPU), not '{}'", v)};
         }
         c.device = v;
       }},
  };
  example::add_spiral_options(options, c);
  example::add_save_options(options, c.save);
  example::add_observability_options(options, c.observe);
  options["--cuda-graph"] = [&](const std::string&) { c.cuda_graph = true; };
  example::parse_options(argc, argv, options, example::usage_with_observability(kUsage),
                         {"--resume", "--cuda-graph"});
  example::check_save_options(c.save);
  example::check_accumulate(c.batch, c.accumulate);
  return c;
}

int run(const Config& c) {
  using namespace ember;
  using Clock = std::chrono::steady_clock;
  const auto comm = dist::init();
  const int rank = comm->rank();
  const int ranks = comm->world_size();
  const bool gpu = c.device == "cuda" || (c.device == "auto" && cuda_device_count() > 0);
  const Device device = gpu ? dist::rank_device(comm->launch()) : Device::cpu();
  Stream stream = current_stream(device);
  auto say = [&](const std::string& text) {  // rank 0 alone prints
    if (rank == 0) {
      std::fputs(text.c_str(), stdout);
      std::fflush(stdout);
    }
  };

  auto [train_set, validation] = data::split(
      data::make_spirals({.classes = c.classes, .points_per_class = c.points, .seed = c.seed}), 0.2,
      c.seed);
  data::DistributedSampler sampler(
      train_set.size(), ranks, rank,
      {.seed = c.seed, .remainder = data::DistributedSampler::Remainder::drop});
  const int64_t micro = c.batch / c.accumulate;
  EMBER_CHECK(sampler.rows_per_rank() >= c.batch,
              "each rank's shard ({} samples) is smaller than --batch {}", sampler.rows_per_rank(),
              c.batch);
  say(fmt::format(
      "ranks: {} ({} launch), each on {}; data: {}-class spirals, {} train samples ({} per rank "
      "and epoch, the remainder dropped), {} validation\n",
      ranks, comm->launch().launcher, device.to_string(), c.classes, train_set.size(),
      sampler.rows_per_rank(), validation.size()));

  auto ddp = std::make_shared<dist::DistributedDataParallel>(
      train::make_residual_mlp({.inputs = train_set.inputs.shape()[1],
                                .width = c.width,
                                .depth = c.depth,
                                .outputs = train_set.num_classes,
                                .dropout = static_cast<float>(c.dropout),
                                .checkpoint = c.checkpoint != "none",
                                .checkpoint_policy = c.checkpoint == "selective"
                                                         ? nn::CheckpointPolicy::selective
                                                         : nn::CheckpointPolicy::full,
                                .seed = c.seed,
                                .device = device}),
      *comm, dist::DdpOptions{.bucket_cap_mb = c.bucket_mb});
  train::AdamW optimizer(ddp->parameters(), {.lr = static_cast<float>(c.lr)});
  const auto schedule = train::LRSchedule::cosine(c.lr, c.steps, c.steps / 20, c.lr / 10);
  const nn::Precision precision = nn::parse_precision(c.amp);
  amp::GradScalerOptions scaling;
  scaling.enabled = precision == nn::Precision::f16;
  scaling.sync_found_inf = dist::found_inf_all_reduce(*comm);
  amp::GradScaler scaler(device, scaling);
  nn::SoftmaxCrossEntropy criterion;
  nn::Context ctx{stream, /*training=*/true, precision};
  const train::Accumulation accumulation(c.accumulate);
  say(fmt::format(
      "model: {} residual blocks of {}, {} buckets, {} parameters; steps of {} x {} = {} "
      "samples{}{}\n",
      c.depth, c.width, ddp->buckets().size(),
      [&] {
        int64_t n = 0;
        for (nn::Parameter* p : ddp->parameters()) n += p->value.numel();
        return n;
      }(),
      ranks, c.batch, ranks * c.batch, c.checkpoint == "none" ? "" : ", checkpoint " + c.checkpoint,
      precision == nn::Precision::f32 ? "" : ", autocast " + c.amp));

  uint64_t epoch = 0;
  int64_t cursor = 0;
  double interval_seconds = 0, total_seconds = 0, exposed = 0, val_acc = 0, loss_value = 0;
  int64_t interval_steps = 0;
  Tensor loss_sum = Tensor::zeros({1}, DType::f32, stream);

  // Training state: rank 0 writes the replicated part, each rank its data position.
  std::map<std::string, std::string> saved_options = example::spiral_save_options(c);
  saved_options.insert({{"accumulate", std::to_string(c.accumulate)},
                        {"dropout", fmt::format("{}", c.dropout)},
                        {"amp", c.amp}});
  example::SavedStates saves(c.save, *ddp, optimizer, scaler, saved_options,
                             dist::save_group(*comm));
  int64_t first_step = 1;
  if (const auto resumed = saves.resume(say)) {
    first_step = resumed->step + 1;
    epoch = static_cast<uint64_t>(resumed->epoch);
    cursor = resumed->data_position;
    ctx.step = resumed->micro_step;
  }
  if (first_step > c.steps) {
    say(fmt::format("done: the saved state has all {} steps already\n", c.steps));
    return 0;
  }
  // This rank's share of each epoch's shuffle, the batches made ahead by data::Loader's workers.
  example::DatasetBatches batches(
      train_set, c.batch, sampler.rows_per_rank(),
      [sampler](uint64_t e) mutable {
        sampler.set_epoch(e);
        return sampler.indices();
      },
      device, c.workers, epoch, cursor);
  train::StepProfiler profiler(stream);  // where each step's time goes, on the progress lines
  example::Observability observe(c.observe, "train_ddp", device, "samples", rank == 0, say);
  // One step: zero_grad, the micro-batches of x and y (only the last one's backward all-reduces
  // the buckets), the scaler and AdamW, adding the loss into `loss_sum`. `phases` marks the
  // profiler's phases (not inside a captured graph).
  auto train_step = [&](const Tensor& x, const Tensor& y, bool phases) {
    optimizer.zero_grad();
    accumulation.run(
        ctx,
        [&](const train::MicroBatch& mb) {
          ddp->set_sync(mb.last);  // only the last micro-batch communicates
          if (phases) profiler.phase(train::StepPhase::forward);
          const Tensor loss = criterion.forward(
              ctx, ddp->forward(ctx, x.slice(mb.index * micro, (mb.index + 1) * micro)),
              y.slice(mb.index * micro, (mb.index + 1) * micro));
          ops::add(stream, loss_sum, loss_sum, loss);
          if (phases) profiler.phase(train::StepPhase::backward);  // the all-reduces overlap it
          ddp->backward(ctx, criterion.backward(ctx, mb.dloss));
        },
        scaler.scale());
    ddp->set_sync(true);
    if (phases) profiler.phase(train::StepPhase::optimizer);
    scaler.step(stream, optimizer);
    scaler.update(stream);
  };
  // Eager steps, or with --cuda-graph one graph launch each (examples/dataset_steps.hpp).
  example::DatasetSteps steps(batches, ctx, optimizer, c.accumulate, c.cuda_graph, train_step);
  for (int64_t step = first_step; step <= c.steps; ++step) {
    const auto start = Clock::now();
    observe.step_begins(step);
    profiler.begin_step();
    schedule.apply(optimizer);
    steps.run(profiler);
    std::tie(epoch, cursor) = batches.position();
    profiler.phase(train::StepPhase::other);
    stream.synchronize();
    profiler.end_step();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    interval_seconds += seconds;
    total_seconds += seconds;
    if (!steps.graphed()) exposed += ddp->last_exposed_wait_seconds();  // replays: no host wait
    ++interval_steps;
    // The step's metrics carry the loss of the last progress line (all-reduced there only).
    const bool progress = step % c.log_every == 0 || step == c.steps;
    const double units = static_cast<double>(ranks * c.batch);
    if (!progress) observe.step_ends(step, c.steps, seconds, units, loss_value, std::nullopt);
    if (progress) {
      // The mean loss of the interval over all ranks: one small all-reduce per progress line.
      comm->all_reduce(stream, loss_sum, dist::ReduceOp::avg).wait(stream);
      loss_value = loss_sum.item() / static_cast<double>(interval_steps * c.accumulate);
      loss_sum.fill_(0.0);
      example::check_loss(loss_value, step);
      if (rank == 0) {
        ddp->eval();
        val_acc = example::accuracy(*ddp, validation, stream, 1024, precision);
        ddp->train();
      }
      say(fmt::format("step {:5d} | loss {:.4f} | val acc {} | {:7.2f} ms/step{}\n", step,
                      loss_value, percent_or_none(val_acc, validation.size()),
                      1000 * interval_seconds / static_cast<double>(interval_steps),
                      scaler.enabled() ? fmt::format(" | scale {:g} | skipped {}",
                                                     scaler.get_scale(), scaler.skipped_steps())
                                       : ""));
      const train::StepBreakdown breakdown = profiler.take();
      say(fmt::format("      {}\n", breakdown.describe()));
      observe.step_ends(step, c.steps, seconds, units, loss_value, std::nullopt);
      observe.interval(breakdown);
      interval_seconds = 0;
      interval_steps = 0;
    }
    // A signal reaches one rank or all: every rank stops after the same step.
    if (saves.after_step({.step = step,
                          .epoch = static_cast<int64_t>(epoch),
                          .data_position = cursor,
                          .micro_step = ctx.step},
                         [&](bool stop) { return dist::any_rank(*comm, stop); })) {
      say(fmt::format("stopped by signal after step {}: saved {}; continue with --resume\n", step,
                      saves.path_of(step)));
      return 0;
    }
  }
  say(fmt::format(
      "done: {} steps on {} ranks in {:.1f} s ({:.2f} ms/step, {:.1f}% of it waiting for "
      "all-reduces after backward), loss {:.4f}, validation accuracy {}\n",
      c.steps, ranks, total_seconds, 1000 * total_seconds / static_cast<double>(c.steps),
      100 * exposed / total_seconds, loss_value, percent_or_none(val_acc, validation.size())));
  say(steps.summary());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return example::run_main<Config>("train_ddp", argc, argv, parse_args, run);
}
