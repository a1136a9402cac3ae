// train::Metrics' state, shared by metrics.cpp and metrics_server.cpp.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ember/train/metrics.hpp"

namespace ember::train {

struct Metrics::Impl {
  mutable std::mutex mutex;
  std::string job, unit;
  Device device;
  int64_t steps = 0;
  double step_seconds_sum = 0, units_total = 0, throughput = 0, loss = 0;
  std::optional<double> mfu;
  double data_wait = 0, communication_wait = 0;
  std::vector<int64_t> bucket_counts;
  std::shared_ptr<void> server;  // metrics_server.cpp's
};

// metrics_server.cpp: serves `text()` on GET /metrics; returns the bound port.
int start_server(Metrics::Impl& impl, int port, std::function<std::string()> text);
void stop_server(Metrics::Impl& impl);

}  // namespace ember::train
