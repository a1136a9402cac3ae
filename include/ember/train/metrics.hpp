// train::Metrics: a training run's figures in Prometheus' text exposition format (0.0.4), served
// over HTTP for a scraper (serve(port): GET /metrics) or written to a file for node_exporter's
// textfile collector (write_file).
//
// The figures: the step time (a histogram), throughput (tokens or samples per second), the
// loss, MFU where known, the data-wait and communication-wait fractions of the last breakdown
// (StepProfiler), the device allocator's allocated, reserved and peak bytes, its fragmentation,
// out-of-memory and retry counts, and on a GPU its utilisation, memory used, temperature and
// power from NVML (libnvidia-ml.so.1, loaded at run time; without it those lines are left out).
// Every metric is named ember_* and labelled with the job.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "ember/core/device.hpp"
#include "ember/train/step_profiler.hpp"

namespace ember::train {

class Metrics {
 public:
  // `unit`: what the throughput counts ("tokens", "samples").
  Metrics(std::string job, Device device, std::string unit);
  ~Metrics();  // stops the server
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // One step: its seconds, how many units it trained on, its loss, its MFU (fraction) if known.
  void record_step(double seconds, double units, double loss, std::optional<double> mfu);
  void record_breakdown(const StepBreakdown& breakdown);

  std::string exposition() const;  // the text format, read now (allocator, NVML)
  // Writes exposition() to `path` through a temporary file and a rename (a reader never sees a
  // partial file); an Error naming the path when it cannot.
  void write_file(const std::string& path) const;
  // Serves GET /metrics on `port` (0: any free port) from a thread of its own, on all
  // addresses; returns the port. An Error when the port cannot be bound, or in a build without
  // cpp-httplib.
  int serve(int port);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ember::train
