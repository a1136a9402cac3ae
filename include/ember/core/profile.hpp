// profile::Trace: a timeline of host ranges (a training step's phases, each module's forward and
// backward, each op) and device intervals (kernels, copies, library calls), written as Chrome
// trace events, which chrome://tracing and Perfetto open.
//
//   profile::Trace trace;
//   trace.start();               // from now on ranges and device intervals record into it
//   ... steps ...
//   trace.stop();
//   trace.write("trace.json");
//
// A Range records [its construction, its destruction) on its thread while a trace records, and
// costs one atomic load otherwise. One trace records at a time (start() with another recording is
// an Error). Host ranges are process 1 of the file, one track per thread; device intervals are
// process 2, one track per stream. Device intervals come from the SIMT emulator's streams in the
// emulated build, and from CUPTI's activity API (libcupti, loaded at run time) on a GPU; where
// neither is available the trace holds host ranges only (device_intervals() says why).
//
// OpRange (EMBER_OP_RANGE) marks an op's launch: an NVTX range in CUDA builds (Nsight Systems
// shows it; with no tool attached it costs a branch) and a Range of category "op".
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ember::profile {

class Trace {
 public:
  Trace() = default;
  ~Trace();  // stops recording
  Trace(const Trace&) = delete;
  Trace& operator=(const Trace&) = delete;

  // Clears what it held. `device_intervals`: collect the device's (CUPTI on a GPU); false for a
  // CPU run on a machine with a GPU, which then never touches the GPU.
  void start(bool device_intervals = true);
  void stop();
  bool recording() const;

  struct Event {
    std::string name;
    const char* category;
    int64_t start_ns, duration_ns;  // from start()
    uint64_t thread;                // host: a thread number; device: a stream number
    bool device = false;            // a device interval (process 2 of the file)
  };
  std::vector<Event> events() const;
  // {"traceEvents":[{"name","cat","ph":"X","ts","dur","pid","tid"}, ...]} to `path`; an Error
  // naming the path when it cannot be written.
  void write(const std::string& path) const;

  void add(Event event);  // Range's
  // A device interval on stream `stream` (a small number naming it), in host clock time: the
  // emulator's streams and the CUPTI reader add them.
  void add_device(std::string name, const char* category, uint64_t stream,
                  std::chrono::steady_clock::time_point start,
                  std::chrono::steady_clock::time_point end);
  // Where this trace's device intervals come from ("the SIMT emulator's streams", "CUPTI"), or
  // why there are none ("no device collector: a CPU-only build", "libcupti.so.13 not found ...").
  std::string device_intervals() const;

  // Reads device intervals into a trace (CUPTI): made by start(), ended by stop().
  struct DeviceCollector {
    virtual ~DeviceCollector() = default;
    virtual void stop(Trace& trace) = 0;  // flushes its intervals into `trace`
  };

 private:
  mutable std::mutex mutex_;
  std::vector<Event> events_;
  std::chrono::steady_clock::time_point origin_{};
  std::unique_ptr<DeviceCollector> collector_;
  std::string device_source_;
  friend class Range;
};

namespace detail {
// The build's device collector (CUPTI in CUDA builds with a GPU), or null. `source` says where
// the trace's device intervals come from, or why there are none (the emulated build returns null
// and names the emulator: its streams add intervals themselves).
std::unique_ptr<Trace::DeviceCollector> start_device_collector(std::string& source);
// A kernel's demangled name without its template and parameter lists, for a timeline.
std::string kernel_label(const std::string& name);
}  // namespace detail

// The trace recording now, or null.
Trace* active();

class Range {
 public:
  Range(const char* name, const char* category) : Range(std::string(), name, category) {}
  Range(std::string name, const char* category) : Range(std::move(name), nullptr, category) {}
  ~Range();
  Range(const Range&) = delete;
  // An event of [start, now) on this thread into `trace` (for ranges that are not scopes, such
  // as a step's phases).
  static void record(Trace* trace, std::string name, const char* category,
                     std::chrono::steady_clock::time_point start);
  Range& operator=(const Range&) = delete;

 private:
  Range(std::string owned, const char* name, const char* category);
  Trace* trace_ = nullptr;
  std::string name_;
  const char* category_ = nullptr;
  std::chrono::steady_clock::time_point start_{};
};

// An NVTX range (Nsight Systems shows it) on this thread: NVTX 3 is header-only and costs a
// branch when no tool is attached. Without the CUDA toolkit's headers (a CPU-only build, the
// emulated one) nothing.
void nvtx_push(const char* name);
void nvtx_pop();

// An op's range: NVTX (CUDA builds) and a Range of category "op" while a trace records.
class OpRange {
 public:
  explicit OpRange(const char* name);
  ~OpRange();
  OpRange(const OpRange&) = delete;
  OpRange& operator=(const OpRange&) = delete;

 private:
  Trace* trace_ = nullptr;
  const char* name_;
  std::chrono::steady_clock::time_point start_{};
};

}  // namespace ember::profile

#define EMBER_OP_RANGE_CONCAT2(a, b) a##b
#define EMBER_OP_RANGE_CONCAT(a, b) EMBER_OP_RANGE_CONCAT2(a, b)
// EMBER_OP_RANGE("matmul"); at the top of an op's entry point.
#define EMBER_OP_RANGE(name) \
  ::ember::profile::OpRange EMBER_OP_RANGE_CONCAT(ember_op_range_, __LINE__)(name)
