// profile::Trace's device intervals on a GPU: CUPTI's activity API (kernels, copies, memsets),
// with libcupti loaded at run time so that libember starts without it. The emulated build's
// streams add their intervals themselves (src/simt/shim_streams.cpp); a CPU-only build has none.
#include "ember/core/profile.hpp"

#if EMBER_WITH_CUDA && !defined(EMBER_SIMT) && __has_include(<cupti_activity.h>)
#define EMBER_WITH_CUPTI 1
#include <cuda_runtime.h>
#include <cupti_activity.h>
#include <cxxabi.h>
#include <dlfcn.h>

#include <chrono>
#include <cstdlib>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "shared_library.hpp"
#else
#define EMBER_WITH_CUPTI 0
#endif

#include <string>

namespace ember::profile {

std::string detail::kernel_label(const std::string& name) {
  // "ember::ops::map_kernel<...>(float*, ...)" -> "ember::ops::map_kernel": the template and
  // parameter lists make names of hundreds of characters that say little on a timeline.
  const size_t cut = name.find_first_of("<(");
  return cut == std::string::npos || cut == 0 ? name : name.substr(0, cut);
}

#if EMBER_WITH_CUPTI
namespace {

using Clock = std::chrono::steady_clock;

struct Cupti {
  ember::detail::SharedLibrary library;
  CUptiResult (*activity_enable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*activity_disable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc,
                                    CUpti_BuffersCallbackCompleteFunc) = nullptr;
  CUptiResult (*next_record)(uint8_t*, size_t, CUpti_Activity**) = nullptr;
  CUptiResult (*flush_all)(uint32_t) = nullptr;
  CUptiResult (*timestamp)(uint64_t*) = nullptr;
  bool registered = false;

  // The toolkit's soname, then the toolkit's usual places (libcupti is not on the loader's path
  // by default).
  static std::string find() {
    const std::string soname = fmt::format("libcupti.so.{}", CUDART_VERSION / 1000);
    std::vector<std::string> candidates{soname};
    for (const char* root :
         {static_cast<const char*>(std::getenv("CUDA_HOME")), "/usr/local/cuda"}) {
      if (root == nullptr) continue;
      for (const char* dir : {"lib64", "lib", "extras/CUPTI/lib64"}) {
        candidates.push_back(fmt::format("{}/{}/{}", root, dir, soname));
      }
    }
    for (const std::string& candidate : candidates) {
      if (void* h = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL)) {
        dlclose(h);  // SharedLibrary opens it again (reference counted)
        return candidate;
      }
    }
    return soname;  // its error names the soname
  }

  Cupti() : library(find()) {
    if (!library.loaded()) return;
    library.bind("cuptiActivityEnable", activity_enable);
    library.bind("cuptiActivityDisable", activity_disable);
    library.bind("cuptiActivityRegisterCallbacks", register_callbacks);
    library.bind("cuptiActivityGetNextRecord", next_record);
    library.bind("cuptiActivityFlushAll", flush_all);
    library.bind("cuptiGetTimestamp", timestamp);
  }
};

Cupti& cupti() {
  static Cupti instance;
  return instance;
}

constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                         CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET};

// One record, copied out of CUPTI's buffer on CUPTI's thread.
struct Interval {
  std::string name;
  const char* category;
  uint32_t stream;
  uint64_t start, end;  // CUPTI's clock, ns
};

class CuptiCollector;
std::mutex g_mutex;  // guards g_collector and its intervals (CUPTI's buffer thread, stop())
CuptiCollector* g_collector = nullptr;

class CuptiCollector : public Trace::DeviceCollector {
 public:
  CuptiCollector() {
    uint64_t now = 0;
    cupti().timestamp(&now);
    host_origin_ = Clock::now();
    cupti_origin_ = now;
  }

  void stop(Trace& trace) override {
    cudaDeviceSynchronize();  // the trace's last kernels have ended (once, when the trace stops)
    cupti().flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    for (const CUpti_ActivityKind kind : kKinds) cupti().activity_disable(kind);
    std::lock_guard lock(g_mutex);
    g_collector = nullptr;
    for (Interval& i : intervals_) {
      const auto at = [&](uint64_t t) {
        return host_origin_ + std::chrono::nanoseconds(static_cast<int64_t>(t - cupti_origin_));
      };
      trace.add_device(std::move(i.name), i.category, i.stream, at(i.start), at(i.end));
    }
    intervals_.clear();
  }

  // Records without both timestamps (CUPTI may leave a kernel's at 0, and a forced flush hands
  // over incomplete ones) are left out.
  void add(Interval interval) {
    if (interval.start == 0 || interval.end < interval.start) return;
    intervals_.push_back(std::move(interval));
  }

 private:
  Clock::time_point host_origin_;
  uint64_t cupti_origin_ = 0;
  std::vector<Interval> intervals_;
};

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  constexpr size_t kBytes = size_t{4} << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBytes));
  *size = *buffer != nullptr ? kBytes : 0;
  *max_records = 0;
}

std::string demangled(const char* name) {
  if (name == nullptr) return "kernel";
  int status = 0;
  char* text = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string out = status == 0 && text != nullptr ? text : name;
  std::free(text);
  return detail::kernel_label(out);
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  {
    std::lock_guard lock(g_mutex);
    CUpti_Activity* record = nullptr;
    while (g_collector != nullptr && cupti().next_record(buffer, valid, &record) == CUPTI_SUCCESS) {
      if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        g_collector->add({demangled(k->name), "kernel", k->streamId, k->start, k->end});
      } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
        g_collector->add(
            {fmt::format("memcpy {} bytes", m->bytes), "copy", m->streamId, m->start, m->end});
      } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
        g_collector->add(
            {fmt::format("memset {} bytes", m->bytes), "copy", m->streamId, m->start, m->end});
      }
    }
  }
  std::free(buffer);
}

}  // namespace

std::unique_ptr<Trace::DeviceCollector> detail::start_device_collector(std::string& source) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    cudaGetLastError();  // clears the error
    source = "none: no CUDA device (the host ranges hold the work)";
    return nullptr;
  }
  Cupti& c = cupti();
  if (!c.library.loaded()) {
    source = "none: " + c.library.error();
    return nullptr;
  }
  std::lock_guard lock(g_mutex);
  if (!c.registered) {
    if (const CUptiResult r = c.register_callbacks(buffer_requested, buffer_completed);
        r != CUPTI_SUCCESS) {
      source = fmt::format("none: cuptiActivityRegisterCallbacks failed ({})", static_cast<int>(r));
      return nullptr;
    }
    c.registered = true;
  }
  for (const CUpti_ActivityKind kind : kKinds) {
    if (const CUptiResult r = c.activity_enable(kind); r != CUPTI_SUCCESS) {
      for (const CUpti_ActivityKind k : kKinds) c.activity_disable(k);
      // CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED and the like: another profiler holds it.
      source = fmt::format("none: cuptiActivityEnable failed ({}; is another profiler attached?)",
                           static_cast<int>(r));
      return nullptr;
    }
  }
  auto collector = std::make_unique<CuptiCollector>();
  g_collector = collector.get();
  source = "CUPTI (" + c.library.soname() + ")";
  return collector;
}

#else

std::unique_ptr<Trace::DeviceCollector> detail::start_device_collector(std::string& source) {
#if defined(EMBER_SIMT)
  source = "the SIMT emulator's streams";
#else
  source = "none: a build without CUDA (the host ranges hold the work)";
#endif
  return nullptr;
}

#endif

}  // namespace ember::profile
