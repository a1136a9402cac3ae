// The training steps of train_resmlp and train_ddp over DatasetBatches' batches: run eagerly, or
// (--cuda-graph) captured once after a warm-up step and replayed as one launch
// (train::CapturedStep) that reads the batch from fixed tensors the loader fills
// (DatasetBatches::next_into), the learning rate from device memory and dropout's step from
// Context::step_counter. A replay runs no host code, so run() publishes each step's number
// before it and advances ctx.step by the step's micro-batches after it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "dataset_batches.hpp"
#include "ember/ember.hpp"

namespace example {

class DatasetSteps {
 public:
  // One step on the batch (x, y): zero_grad, the micro-batches, the optimizer. `phases`: mark
  // the profiler's phases (eager steps; a graph's replay is one launch).
  using Step = std::function<void(const ember::Tensor& x, const ember::Tensor& y, bool phases)>;

  DatasetSteps(DatasetBatches& batches, ember::nn::Context& ctx, ember::train::Optimizer& optimizer,
               int64_t micro_batches, bool graph, Step step)
      : batches_(batches), ctx_(ctx), micro_batches_(micro_batches), step_(std::move(step)) {
    if (!graph) return;
    optimizer.keep_lr_on_device();
    ctx_.step_counter = ember::Tensor::zeros({1}, ember::DType::i64, ctx_.stream);
    std::tie(x_, y_) = batches_.fixed_batch(ctx_.stream);
    captured_.emplace(
        ctx_.stream, [this] { step_(x_, y_, false); },
        ember::train::CapturedStep::Options{.optimizers = {&optimizer}});
  }

  // Takes the next batch (the profiler's data phase) and runs the step on it.
  void run(ember::train::StepProfiler& profiler) {
    profiler.phase(ember::train::StepPhase::data);
    if (!captured_) {
      const std::vector<ember::Tensor> xy = batches_.next(ctx_.stream);
      step_(xy[0], xy[1], true);
      return;
    }
    batches_.next_into(ctx_.stream, x_, y_);
    profiler.phase(ember::train::StepPhase::forward);  // the whole graph: one launch
    const uint64_t first_micro_step = ctx_.step;
    ctx_.publish_step();
    captured_->run();
    ctx_.step = first_micro_step + static_cast<uint64_t>(micro_batches_);
  }

  bool graphed() const { return captured_.has_value(); }
  // "cuda graph: ..." for the run's summary, or nothing without --cuda-graph.
  std::string summary() const {
    return captured_ ? "cuda graph: " + captured_->describe() + "\n" : std::string();
  }

 private:
  DatasetBatches& batches_;
  ember::nn::Context& ctx_;
  int64_t micro_batches_;
  Step step_;
  ember::Tensor x_, y_;
  std::optional<ember::train::CapturedStep> captured_;
};

}  // namespace example
