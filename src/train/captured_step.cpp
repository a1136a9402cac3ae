// train::CapturedStep (ember/train/captured_step.hpp).
#include "ember/train/captured_step.hpp"

#include <cstdio>
#include <utility>

#include "ember/core/error.hpp"

namespace ember::train {

CapturedStep::CapturedStep(Stream stream, std::function<void()> step, Options options)
    : stream_(std::move(stream)), step_(std::move(step)), options_(std::move(options)) {
  EMBER_CHECK(step_ != nullptr, "CapturedStep: no step");
  EMBER_CHECK(options_.warmup >= 1,
              "CapturedStep: warmup must be at least 1 (state made on the first step cannot be "
              "made inside a graph), not {}",
              options_.warmup);
  // A schedule's set_lr between replays reaches the graph only through device memory.
  for (Optimizer* o : options_.optimizers) o->keep_lr_on_device();
  if (!options_.enabled) {
    go_eager("CUDA graphs are off");
  } else if (!stream_.device().is_cuda()) {
    go_eager(stream_.device().to_string() + " has no CUDA graphs");
  }
}

std::string CapturedStep::describe() const {
  if (graph_) return std::to_string(replays_) + " of the steps replayed one captured graph";
  if (!eager_reason_.empty()) return "not used, the steps ran eagerly: " + eager_reason_;
  return "not used: every run so far was a warm-up run";
}

void CapturedStep::go_eager(std::string reason) {
  eager_reason_ = std::move(reason);
  const std::string line = "CapturedStep: the step runs without a CUDA graph: " + eager_reason_;
  if (options_.warn) {
    options_.warn(line);
  } else if (stream_.device().is_cuda()) {  // on the CPU that is expected: nothing to say
    std::fprintf(stderr, "warning: %s\n", line.c_str());
  }
}

void CapturedStep::run() {
  if (!eager_reason_.empty() || runs_ < options_.warmup) {
    ++runs_;
    step_();
    return;
  }
  bool just_captured = false;  // its step() calls counted this step already
  if (!graph_) {
    just_captured = true;
    bool started = false;
    try {
      graph_.emplace(Graph::capture(stream_, [&] {
        started = true;
        step_();
      }));
    } catch (const Error& e) {
      if (started) throw;  // the step's host state moved on: not run again behind the user's back
      go_eager(e.message());  // refused before the step began (the allocator): run it directly
      ++runs_;
      step_();
      return;
    }
  }
  ++runs_;
  ++replays_;
  graph_->replay(stream_);
  if (!just_captured) {
    for (Optimizer* o : options_.optimizers) o->count_replayed_step();
  }
}

}  // namespace ember::train
