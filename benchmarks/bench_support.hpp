// Helpers shared by the benchmarks: registering a benchmark timed in milliseconds of real time,
// whether the GPU rows can run, and a training step run eagerly or as a replayed CUDA graph.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "ember/ember.hpp"

namespace ember::bench {

// benchmark::RegisterBenchmark(name, fn, args...), reported in milliseconds of real time.
template <class... Args>
benchmark::internal::Benchmark* register_ms(const std::string& name, Args&&... args) {
  return benchmark::RegisterBenchmark(name.c_str(), std::forward<Args>(args)...)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
}

// Whether ember runs on cuda:0 by default, so that the GPU rows can run; when not, prints why and
// that only the CPU backend is measured.
inline bool gpu_usable() {
  std::string why;
  if (default_device(&why).is_cuda()) return true;
  std::printf("GPU benchmarks skipped: %s. Measuring the CPU backend.\n",
              why.empty() ? "no CUDA device" : why.c_str());
  return false;
}

// A training step that returns its loss: run as it is (eager), or with `graph` captured once
// after a warm-up step (train::CapturedStep) and replayed as one launch per run().
class GraphableStep {
 public:
  GraphableStep(const Stream& stream, train::Optimizer& optimizer, bool graph,
                std::function<Tensor()> step)
      : step_(std::move(step)) {
    if (graph) {
      captured_.emplace(
          stream, [this] { loss_ = step_(); },
          train::CapturedStep::Options{.warmup = 1, .optimizers = {&optimizer}});
    }
  }
  GraphableStep(const GraphableStep&) = delete;  // the graph's step refers to this one
  GraphableStep& operator=(const GraphableStep&) = delete;

  // The step's loss (with a graph, its replay's).
  Tensor run() {
    if (!captured_) return step_();
    captured_->run();
    return loss_;
  }

  // The warm-up step; with a graph also the capture (the second run).
  void warm_up() {
    run().item();
    if (captured_) run().item();
  }

  // The graph, or nothing for an eager step.
  const std::optional<train::CapturedStep>& graph() const { return captured_; }

 private:
  std::function<Tensor()> step_;
  Tensor loss_;
  std::optional<train::CapturedStep> captured_;
};

}  // namespace ember::bench
