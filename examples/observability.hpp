// --trace FILE --trace-steps A:B --metrics-port N --metrics-file F, shared by the training
// examples: a Chrome trace of steps A to B (profile::Trace), and Prometheus metrics
// (train::Metrics) served or written at each progress line. Rank 0 alone traces and serves.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "cli.hpp"
#include "ember/core/profile.hpp"
#include "ember/train/metrics.hpp"
#include "ember/train/step_profiler.hpp"

namespace example {

struct ObservabilityConfig {
  std::string trace;                        // --trace FILE
  int64_t trace_first = 2, trace_last = 3;  // --trace-steps A:B
  int metrics_port = -1;                    // -1: no server
  std::string metrics_file;
};

// kUsage's lines followed by those of the options above and -h.
inline std::string usage_with_observability(const char* usage) {
  return std::string(usage) +
         R"(  --trace FILE       write steps --trace-steps A:B (default 2:3) as a Chrome trace (phases and
                     modules; chrome://tracing and Perfetto open it)
  --metrics-port N   serve Prometheus metrics on http://0.0.0.0:N/metrics (rank 0 under mpirun;
                     0: any free port, printed)
  --metrics-file F   write them to F at every progress line (node_exporter's textfile collector)
  -h, --help         show this help
)";
}

inline void add_observability_options(std::map<std::string_view, Setter>& options,
                                      ObservabilityConfig& c) {
  options["--trace"] = file_option("--trace", c.trace);
  options["--trace-steps"] = [&c](const std::string& v) {
    const size_t colon = v.find(':');
    if (colon == std::string::npos) {
      throw UsageError{fmt::format("--trace-steps needs A:B (steps A to B), not '{}'", v)};
    }
    c.trace_first = parse_int("--trace-steps A", v.substr(0, colon), 1);
    c.trace_last = parse_int("--trace-steps B", v.substr(colon + 1), c.trace_first);
  };
  options["--metrics-port"] = [&c](const std::string& v) {
    const int64_t port = parse_int("--metrics-port", v, 0);
    if (port > 65535) throw UsageError{fmt::format("--metrics-port {} is not a port", v)};
    c.metrics_port = static_cast<int>(port);
  };
  options["--metrics-file"] = file_option("--metrics-file", c.metrics_file);
}

class Observability {
 public:
  // `say` prints on rank 0; `unit` is what throughput counts ("tokens", "samples").
  Observability(const ObservabilityConfig& c, const char* job, ember::Device device,
                const char* unit, bool rank0, std::function<void(const std::string&)> say)
      : c_(c),
        rank0_(rank0),
        device_intervals_(device.is_cuda()),
        say_(std::move(say)),
        metrics_(job, device, unit) {
    if (rank0_ && !c_.trace.empty()) {
      // A path that cannot be written fails now, not after the traced steps.
      const bool existed = std::filesystem::exists(c_.trace);
      std::ofstream probe(c_.trace, std::ios::app);
      if (!probe) {
        throw ember::Error(
            fmt::format("--trace: cannot write {} (a directory, or a missing or "
                        "read-only one?)",
                        c_.trace));
      }
      probe.close();
      if (!existed) std::filesystem::remove(c_.trace);
    }
    if (rank0_ && c_.metrics_port >= 0) {
      say_(fmt::format("metrics: http://0.0.0.0:{}/metrics\n", metrics_.serve(c_.metrics_port)));
    }
  }

  ~Observability() {
    if (rank0_ && !c_.trace.empty() && !traced_) {
      say_(fmt::format("warning: --trace {}: steps {}:{} did not run here: no trace written\n",
                       c_.trace, c_.trace_first, c_.trace_last));
    }
  }
  Observability(const Observability&) = delete;
  Observability& operator=(const Observability&) = delete;

  void step_begins(int64_t step) {
    if (rank0_ && !c_.trace.empty() && step == c_.trace_first) trace_.start(device_intervals_);
  }
  // After the step's work: its metrics, and the trace written after step B (or the last).
  void step_ends(int64_t step, int64_t last_step, double seconds, double units, double loss,
                 std::optional<double> mfu) {
    metrics_.record_step(seconds, units, loss, mfu);
    if (trace_.recording() && (step == c_.trace_last || step == last_step)) {
      trace_.stop();
      trace_.write(c_.trace);
      traced_ = true;
      say_(fmt::format("trace: {} events of steps {}:{} in {}\n", trace_.events().size(),
                       c_.trace_first, std::min(c_.trace_last, last_step), c_.trace));
    }
  }
  // At a progress line: the interval's breakdown, and the metrics file.
  void interval(const ember::train::StepBreakdown& breakdown) {
    metrics_.record_breakdown(breakdown);
    if (rank0_ && !c_.metrics_file.empty()) metrics_.write_file(c_.metrics_file);
  }

 private:
  ObservabilityConfig c_;
  bool rank0_;
  bool device_intervals_;  // on a GPU: CUPTI's kernel intervals in the trace
  bool traced_ = false;
  std::function<void(const std::string&)> say_;
  ember::train::Metrics metrics_;
  ember::profile::Trace trace_;
};

}  // namespace example
