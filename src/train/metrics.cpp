// train::Metrics (ember/train/metrics.hpp): the figures and their exposition; the HTTP server is
// in metrics_server.cpp, NVML below.
#include "ember/train/metrics.hpp"

#include <dlfcn.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>

#include <fmt/format.h>

#include "ember/core/error.hpp"
#include "ember/memory/device_memory.hpp"
#include "train/metrics_impl.hpp"

namespace ember::train {
namespace {

// NVML's C API, the few calls used (libnvidia-ml.so.1 comes with the driver).
struct NvmlUtilization {
  unsigned gpu, memory;
};
struct NvmlMemory {
  unsigned long long total, free, used;
};
struct Nvml {
  using Device = void*;
  int (*init)() = nullptr;
  int (*handle_by_index)(unsigned, Device*) = nullptr;
  int (*utilization)(Device, NvmlUtilization*) = nullptr;
  int (*memory)(Device, NvmlMemory*) = nullptr;
  int (*temperature)(Device, int, unsigned*) = nullptr;
  int (*power)(Device, unsigned*) = nullptr;
  bool ok = false;
};

const Nvml& nvml() {
  static const Nvml n = [] {
    Nvml x;
    void* h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) return x;
    auto bind = [&](auto& f, const char* name) {
      f = reinterpret_cast<std::remove_reference_t<decltype(f)>>(dlsym(h, name));
      return f != nullptr;
    };
    x.ok = bind(x.init, "nvmlInit_v2") &&
           bind(x.handle_by_index, "nvmlDeviceGetHandleByIndex_v2") &&
           bind(x.utilization, "nvmlDeviceGetUtilizationRates") &&
           bind(x.memory, "nvmlDeviceGetMemoryInfo") &&
           bind(x.temperature, "nvmlDeviceGetTemperature") &&
           bind(x.power, "nvmlDeviceGetPowerUsage") && x.init() == 0;
    return x;
  }();
  return n;
}

constexpr std::array<double, 13> kStepBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                 0.25,  0.5,    1,     2.5,  5,     10};

std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);
}

}  // namespace

Metrics::Metrics(std::string job, Device device, std::string unit)
    : impl_(std::make_unique<Impl>()) {
  EMBER_CHECK(!job.empty() && job.find_first_of("\"\\\n") == std::string::npos,
              "train::Metrics: the job name must be non-empty, without quotes, backslashes or "
              "newlines, not '{}'",
              job);
  impl_->job = std::move(job);
  impl_->device = device;
  impl_->unit = std::move(unit);
  impl_->bucket_counts.assign(kStepBuckets.size(), 0);
}

Metrics::~Metrics() {
  stop_server(*impl_);
}

void Metrics::record_step(double seconds, double units, double loss, std::optional<double> mfu) {
  std::lock_guard lock(impl_->mutex);
  Impl& m = *impl_;
  ++m.steps;
  m.step_seconds_sum += seconds;
  for (size_t i = 0; i < kStepBuckets.size(); ++i) {
    if (seconds <= kStepBuckets[i]) ++m.bucket_counts[i];
  }
  m.units_total += units;
  m.throughput = seconds > 0 ? units / seconds : 0;
  m.loss = loss;
  m.mfu = mfu;
}

void Metrics::record_breakdown(const StepBreakdown& b) {
  if (b.steps == 0) return;
  std::lock_guard lock(impl_->mutex);
  impl_->data_wait = b.fraction(StepPhase::data);
  impl_->communication_wait = b.fraction(StepPhase::communication);
}

std::string Metrics::exposition() const {
  std::lock_guard lock(impl_->mutex);
  const Impl& m = *impl_;
  const std::string labels = fmt::format("job=\"{}\",device=\"{}\"", m.job, m.device.to_string());
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help, double value) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{}{{{}}} {}\n", name, help, name, type, name,
                       labels, number(value));
  };
  out += "# HELP ember_step_seconds Training step time.\n# TYPE ember_step_seconds histogram\n";
  for (size_t i = 0; i < kStepBuckets.size(); ++i) {
    out += fmt::format("ember_step_seconds_bucket{{{},le=\"{}\"}} {}\n", labels,
                       number(kStepBuckets[i]), m.bucket_counts[i]);
  }
  out += fmt::format("ember_step_seconds_bucket{{{},le=\"+Inf\"}} {}\n", labels, m.steps);
  out += fmt::format("ember_step_seconds_sum{{{}}} {}\n", labels, number(m.step_seconds_sum));
  out += fmt::format("ember_step_seconds_count{{{}}} {}\n", labels, m.steps);
  metric("ember_steps_total", "counter", "Training steps taken.", static_cast<double>(m.steps));
  const std::string units_name = fmt::format("ember_{}_total", m.unit);
  metric(units_name.c_str(), "counter", "Units (tokens or samples) trained on.", m.units_total);
  const std::string rate_name = fmt::format("ember_{}_per_second", m.unit);
  metric(rate_name.c_str(), "gauge", "Throughput of the last step.", m.throughput);
  metric("ember_loss", "gauge", "Training loss of the last step.", m.loss);
  if (m.mfu) metric("ember_mfu", "gauge", "Model FLOPs utilisation of the last step.", *m.mfu);
  metric("ember_data_wait_fraction", "gauge",
         "Fraction of step time waiting for data (last breakdown).", m.data_wait);
  metric("ember_communication_wait_fraction", "gauge",
         "Fraction of step time waiting for communication (last breakdown).", m.communication_wait);
  try {
    const memory::AllocatorStats s = memory::stats(m.device);
    const double reserved = static_cast<double>(s.reserved.current);
    const double allocated = static_cast<double>(s.allocated.current);
    metric("ember_memory_allocated_bytes", "gauge", "Bytes the allocator has handed out.",
           allocated);
    metric("ember_memory_reserved_bytes", "gauge", "Bytes the allocator holds from the device.",
           reserved);
    metric("ember_memory_peak_allocated_bytes", "gauge", "Peak allocated bytes.",
           static_cast<double>(s.allocated.peak));
    const double free_bytes = reserved - allocated;
    const double largest =
        static_cast<double>(memory::caching_allocator(m.device).largest_free_block());
    metric("ember_memory_fragmentation", "gauge",
           "1 - largest free block / free bytes held (0: none free).",
           free_bytes > 0 ? 1.0 - largest / free_bytes : 0.0);
    metric("ember_memory_ooms_total", "counter", "Out-of-memory errors.",
           static_cast<double>(s.ooms));
    metric("ember_memory_retries_total", "counter", "Allocations retried after freeing the cache.",
           static_cast<double>(s.retries));
  } catch (const Error&) {
    // Another allocator than ember's (set_allocator): no memory lines.
  }
  if (m.device.is_cuda() && nvml().ok) {
    Nvml::Device d = nullptr;
    if (nvml().handle_by_index(static_cast<unsigned>(m.device.index()), &d) == 0) {
      NvmlUtilization u{};
      if (nvml().utilization(d, &u) == 0) {
        metric("ember_gpu_utilization_ratio", "gauge", "GPU busy fraction (NVML).", u.gpu / 100.0);
      }
      NvmlMemory mem{};
      if (nvml().memory(d, &mem) == 0) {
        metric("ember_gpu_memory_used_bytes", "gauge", "GPU memory used, all processes (NVML).",
               static_cast<double>(mem.used));
      }
      unsigned celsius = 0;
      if (nvml().temperature(d, 0, &celsius) == 0) {
        metric("ember_gpu_temperature_celsius", "gauge", "GPU temperature (NVML).", celsius);
      }
      unsigned milliwatts = 0;
      if (nvml().power(d, &milliwatts) == 0) {
        metric("ember_gpu_power_watts", "gauge", "GPU power draw (NVML).", milliwatts / 1000.0);
      }
    }
  }
  return out;
}

void Metrics::write_file(const std::string& path) const {
  const std::string text = exposition();
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary);
    out << text;
    out.close();
    EMBER_CHECK(out.good(), "train::Metrics: cannot write {}", temporary);
  }
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  EMBER_CHECK(!ec, "train::Metrics: cannot rename {} to {}: {}", temporary, path, ec.message());
}

int Metrics::serve(int port) {
  EMBER_CHECK(port >= 0 && port <= 65535, "train::Metrics::serve: port {} is not in 0..65535",
              port);
  return start_server(*impl_, port, [this] { return exposition(); });
}

}  // namespace ember::train
