// bench_allocator --device cuda:N (allocator_device_replay.hpp).
#include "allocator_device_replay.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>

#include "ember/memory/adaptor.hpp"
#include "ember/memory/caching_allocator.hpp"
#include "ember/memory/cuda_upstream.hpp"
#include "ember/memory/cuda_virtual_upstream.hpp"
#include "ember/memory/replay.hpp"

namespace bench {
namespace {

using namespace ember::memory;
using Clock = std::chrono::steady_clock;

// What the upstream calls of one replay cost.
struct CallTimes {
  int64_t segment_allocs = 0, segment_frees = 0, maps = 0, unmaps = 0;
  double segment_alloc_s = 0, segment_free_s = 0, map_s = 0, unmap_s = 0;
};

// Times one upstream call, from its making to the end of its scope: adds the seconds to
// `seconds` and one to `calls`.
class CallTimer {
 public:
  CallTimer(double& seconds, int64_t& calls) : seconds_(seconds), calls_(calls) {}
  ~CallTimer() {
    seconds_ += std::chrono::duration<double>(Clock::now() - start_).count();
    ++calls_;
  }

 private:
  double& seconds_;
  int64_t& calls_;
  Clock::time_point start_ = Clock::now();
};

class TimedUpstream final : public ForwardingUpstream {
 public:
  TimedUpstream(std::shared_ptr<Upstream> inner, CallTimes& times)
      : ForwardingUpstream(std::move(inner), "TimedUpstream"), times_(times) {}
  void* allocate(size_t bytes) override {
    const CallTimer timer(times_.segment_alloc_s, times_.segment_allocs);
    return upstream_->allocate(bytes);
  }
  void deallocate(void* ptr, size_t bytes) noexcept override {
    const CallTimer timer(times_.segment_free_s, times_.segment_frees);
    upstream_->deallocate(ptr, bytes);
  }

 private:
  CallTimes& times_;
};

class TimedVirtualUpstream final : public ForwardingVirtualUpstream {
 public:
  TimedVirtualUpstream(std::shared_ptr<VirtualUpstream> inner, CallTimes& times)
      : ForwardingVirtualUpstream(std::move(inner), "TimedVirtualUpstream"), times_(times) {}
  bool map(void* address, size_t bytes) override {
    const CallTimer timer(times_.map_s, times_.maps);
    return upstream_->map(address, bytes);
  }
  void unmap(void* address, size_t bytes) noexcept override {
    const CallTimer timer(times_.unmap_s, times_.unmaps);
    upstream_->unmap(address, bytes);
  }

 private:
  CallTimes& times_;
};

struct DeviceRun {
  ReplayResult cold;            // the first replay: the allocator grows from nothing
  double warm_ns_per_pair = 0;  // the trace again through the same, now warm, allocator
  CallTimes times;              // the cold replay's upstream calls
};

// One replay on the device within `budget` bytes reserved (0: the config's own budget, if any),
// then (when it completed and `warm`) a second through the same allocator. The upstream calls
// counted are the first replay's: not the second's, nor those of emptying the cache at the end.
DeviceRun run_on_device(const std::vector<TraceEvent>& events, AllocatorConfig config, int device,
                        size_t budget, bool warm) {
  DeviceRun run;
  if (budget != 0) config.max_reserved = budget;
  std::shared_ptr<VirtualUpstream> virt;
  if (config.expandable_segments) {
    virt = std::make_shared<TimedVirtualUpstream>(std::make_shared<CudaVirtualUpstream>(device),
                                                  run.times);
  }
  CachingAllocator allocator(
      std::make_shared<TimedUpstream>(std::make_shared<CudaUpstream>(device), run.times), virt,
      config);
  run.cold = replay_through(events, allocator);
  run.cold.capacity = budget;
  const CallTimes cold_times = run.times;
  if (warm && run.cold.completed && run.cold.allocations > 0) {
    const ReplayResult again = replay_through(events, allocator);
    if (again.completed) {
      run.warm_ns_per_pair = 1e9 * again.seconds / static_cast<double>(again.allocations);
    }
  }
  allocator.empty_cache();
  run.times = cold_times;
  return run;
}

struct Column {
  std::string name;
  AllocatorConfig config;
  DeviceRun run;
  size_t smallest = 0;
  CapacitySearch search;
};

double per_call_us(double seconds, int64_t calls) {
  return calls == 0 ? 0.0 : 1e6 * seconds / static_cast<double>(calls);
}

}  // namespace

int replay_on_device(const std::string& path, const std::vector<TraceEvent>& events,
                     const AllocatorConfig& config, const DeviceReplayOptions& options) {
  std::vector<Column> columns;
  columns.push_back({"ember", config, {}, 0, {}});
  if (options.compare_pytorch) {
    AllocatorConfig pytorch = pytorch_default_policy();
    columns.push_back({"pytorch", pytorch, {}, 0, {}});
    pytorch.expandable_segments = true;
    columns.push_back({"pytorch+expand.", pytorch, {}, 0, {}});
  }
  bool all_completed = true;
  for (Column& c : columns) {
    c.run = run_on_device(events, c.config, options.device, 0, /*warm=*/true);
    all_completed = all_completed && c.run.cold.completed;
    if (c.run.cold.completed && options.smallest) {
      c.smallest = smallest_capacity_of(
          [&](size_t budget) {
            return run_on_device(events, c.config, options.device, budget, false).cold;
          },
          &c.search);
    }
  }

  std::printf("\ntrace %s on cuda:%d (real upstreams: cudaMalloc; cuMemCreate/cuMemMap)\n",
              path.c_str(), options.device);
  std::printf("  %-34s", "");
  for (const Column& c : columns) std::printf(" %16s", c.name.c_str());
  std::printf("\n");
  auto row = [&](const char* label, auto value) {
    std::printf("  %-34s", label);
    for (const Column& c : columns) std::printf(" %16s", value(c).c_str());
    std::printf("\n");
  };
  auto text = [](const char* format, double v) {
    char out[32];
    std::snprintf(out, sizeof out, format, v);
    return std::string(out);
  };
  constexpr double kMiB = 1024.0 * 1024.0;
  row("peak requested", [&](const Column& c) {
    return text("%.1f MiB", static_cast<double>(c.run.cold.peak_requested) / kMiB);
  });
  row("peak reserved", [&](const Column& c) {
    return text("%.1f MiB", static_cast<double>(c.run.cold.peak_reserved) / kMiB);
  });
  row("reserved / requested (ratio)",
      [&](const Column& c) { return text("%.3f", c.run.cold.ratio); });
  row("ext. fragmentation @peak requested",
      [&](const Column& c) { return text("%.3f", c.run.cold.fragmentation_at_peak_requested); });
  row("segment allocations (cudaMalloc)", [&](const Column& c) {
    return text("%.0f", static_cast<double>(c.run.times.segment_allocs));
  });
  row("  us per cudaMalloc", [&](const Column& c) {
    return text("%.1f", per_call_us(c.run.times.segment_alloc_s, c.run.times.segment_allocs));
  });
  row("map calls (cuMemCreate+Map+Access)",
      [&](const Column& c) { return text("%.0f", static_cast<double>(c.run.times.maps)); });
  row("  us per map call", [&](const Column& c) {
    return text("%.1f", per_call_us(c.run.times.map_s, c.run.times.maps));
  });
  row("unmap calls",
      [&](const Column& c) { return text("%.0f", static_cast<double>(c.run.times.unmaps)); });
  row("  us per unmap call", [&](const Column& c) {
    return text("%.1f", per_call_us(c.run.times.unmap_s, c.run.times.unmaps));
  });
  row("retries",
      [&](const Column& c) { return text("%.0f", static_cast<double>(c.run.cold.retries)); });
  // Per pair, the replay's bookkeeping included (peak tracking, its ID map).
  row("ns per malloc+free, first replay", [&](const Column& c) {
    if (!c.run.cold.completed || c.run.cold.allocations == 0) return std::string("n/a");
    return text("%.1f", 1e9 * c.run.cold.seconds / static_cast<double>(c.run.cold.allocations));
  });
  row("ns per malloc+free, cached (again)", [&](const Column& c) {
    return c.run.warm_ns_per_pair > 0 ? text("%.1f", c.run.warm_ns_per_pair) : std::string("n/a");
  });
  if (options.smallest) {
    row("smallest budget (2 MiB steps)", [&](const Column& c) {
      if (!c.run.cold.completed) return std::string("n/a");
      return text("%.1f MiB", static_cast<double>(c.smallest) / kMiB);
    });
    row("smallest budget / peak requested", [&](const Column& c) {
      if (!c.run.cold.completed || c.run.cold.peak_requested == 0) return std::string("n/a");
      return text("%.3f",
                  static_cast<double>(c.smallest) / static_cast<double>(c.run.cold.peak_requested));
    });
  }
  for (const Column& c : columns) {
    if (!c.run.cold.completed) {
      std::printf("  %s: the trace does not complete on the device (%zu of %zu events ran): %s\n",
                  c.name.c_str(), c.run.cold.events_applied, events.size(),
                  c.run.cold.failure.c_str());
    }
  }
  return all_completed ? 0 : 1;
}

}  // namespace bench
