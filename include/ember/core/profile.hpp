// profile::Trace: host time ranges (a training step's phases, each module's forward and
// backward) recorded as Chrome trace events, which chrome://tracing and Perfetto open.
//
//   profile::Trace trace;
//   trace.start();               // from now on profile::Range records into it
//   ... steps ...
//   trace.stop();
//   trace.write("trace.json");
//
// A Range records [its construction, its destruction) on its thread while a trace records, and
// costs one atomic load otherwise. One trace records at a time (start() with another recording is
// an Error). Device kernel intervals are not in it yet (CUPTI on a GPU, the emulator's launches:
// docs/observability.md).
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

  void start();  // clears what it held
  void stop();
  bool recording() const;

  struct Event {
    std::string name;
    const char* category;
    int64_t start_us, duration_us;
    uint64_t thread;
  };
  std::vector<Event> events() const;
  // {"traceEvents":[{"name","cat","ph":"X","ts","dur","pid","tid"}, ...]} to `path`; an Error
  // naming the path when it cannot be written.
  void write(const std::string& path) const;

  void add(Event event);  // Range's

 private:
  mutable std::mutex mutex_;
  std::vector<Event> events_;
  std::chrono::steady_clock::time_point origin_{};
  friend class Range;
};

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

}  // namespace ember::profile
