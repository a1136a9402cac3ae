// train::CapturedStep: a training step run as one CUDA graph launch after warm-up.
//
//   train::CapturedStep step(stream, [&] {  // ..., {.optimizers = {&optimizer}}
//     optimizer.zero_grad();
//     const Tensor loss = criterion.forward(ctx, model->forward(ctx, x), y);  // x, y: fixed
//     model->backward(ctx, criterion.backward(ctx));
//     optimizer.step(stream);
//   });
//   for (...) { x.copy_(batch.x); y.copy_(batch.y); schedule.apply(optimizer); step.run(); }
//
// The first `warmup` runs call the step directly (optimizer state and workspaces are made
// then); the next one captures it (ember::Graph, nothing runs) and replays it, and every later
// run replays it: one launch, no host work for the ops. The step must read its batch from
// tensors made before the capture (refilled between runs, device to device) and must not read
// results on the host (a loss kept in a tensor made inside the step holds the latest replay's).
//
// Where a graph is impossible from the start (the CPU; an allocator that cannot keep memory for
// replays; Options::enabled false) every run calls the step directly, and eager_reason() says
// why (the warning callback gets it once). A capture that fails once the step has begun (a host
// read inside it) is an Error naming the call: the step's host state has moved on by one step,
// so it does not silently run again.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ember/core/graph.hpp"
#include "ember/core/stream.hpp"
#include "ember/train/optimizer.hpp"

namespace ember::train {

class CapturedStep {
 public:
  struct Options {
    int warmup = 1;  // direct runs before the capture (>= 1: lazily made state must exist)
    bool enabled = true;
    // The optimizers the step runs: a replay counts as a step() call for each (steps(), which
    // learning-rate schedules follow, advances as it does in eager steps).
    std::vector<Optimizer*> optimizers;
    // Where the reason for running eagerly goes, once; default: a line on stderr.
    std::function<void(const std::string&)> warn;
  };
  CapturedStep(Stream stream, std::function<void()> step, Options options);
  CapturedStep(Stream stream, std::function<void()> step)
      : CapturedStep(std::move(stream), std::move(step), Options{}) {}

  void run();
  bool captured() const { return graph_.has_value(); }
  int64_t replays() const { return replays_; }
  const std::string& eager_reason() const { return eager_reason_; }
  // One line for a run's summary: "N of the steps replayed one captured graph", or why none did
  // ("not used, the steps ran eagerly: <reason>", or "not used: every run so far was a warm-up
  // run").
  std::string describe() const;
  const Graph* graph() const { return graph_ ? &*graph_ : nullptr; }

 private:
  void go_eager(std::string reason);
  Stream stream_;
  std::function<void()> step_;
  Options options_;
  int64_t runs_ = 0, replays_ = 0;
  std::optional<Graph> graph_;
  std::string eager_reason_;
};

}  // namespace ember::train
