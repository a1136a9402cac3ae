// profile::Trace and profile::Range (ember/core/profile.hpp).
#include "ember/core/profile.hpp"

#include <atomic>
#include <fstream>
#include <functional>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "ember/core/error.hpp"

// NVTX 3 (header-only, in the CUDA toolkit) for ops' ranges; without the toolkit's headers (a
// CPU-only build, the emulated one) no NVTX.
#if __has_include(<nvtx3/nvToolsExt.h>) && !defined(EMBER_SIMT)
#include <nvtx3/nvToolsExt.h>
#define EMBER_NVTX 1
#else
#define EMBER_NVTX 0
#endif

namespace ember::profile {
namespace {

std::atomic<Trace*> g_active{nullptr};

uint64_t thread_number() {
  return static_cast<uint64_t>(std::hash<std::thread::id>{}(std::this_thread::get_id()) % 100000);
}

// JSON string escaping for names (module paths, phase names).
std::string escaped(const std::string& s) {
  std::string out;
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x80) {
      // Control characters, and every byte beyond ASCII as its Latin-1 character: the file
      // stays valid JSON whatever bytes a name holds (names are ASCII in practice).
      out += fmt::format("\\u{:04x}", static_cast<int>(static_cast<unsigned char>(c)));
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

void nvtx_push(const char* name) {
#if EMBER_NVTX
  nvtxRangePushA(name);
#else
  (void)name;
#endif
}

void nvtx_pop() {
#if EMBER_NVTX
  nvtxRangePop();
#endif
}

Trace* active() {
  return g_active.load(std::memory_order_acquire);
}

Trace::~Trace() {
  stop();
}

void Trace::start(bool device_intervals) {
  stop();  // a collector of an earlier start
  {
    std::lock_guard lock(mutex_);
    events_.clear();
    origin_ = std::chrono::steady_clock::now();
  }
  Trace* expected = nullptr;
  EMBER_CHECK(g_active.compare_exchange_strong(expected, this) || expected == this,
              "profile::Trace::start: another trace is recording");
  std::string source = "none: not asked for (Trace::start(false))";
  if (device_intervals) {
    try {
      collector_ = detail::start_device_collector(source);
    } catch (const std::exception& e) {  // a CUPTI older than its header: host ranges only
      source = std::string("none: ") + e.what();
    }
  }
  std::lock_guard lock(mutex_);
  device_source_ = std::move(source);
}

void Trace::stop() {
  if (collector_ != nullptr) {
    std::unique_ptr<DeviceCollector> collector = std::move(collector_);
    collector->stop(*this);
  }
  Trace* self = this;
  g_active.compare_exchange_strong(self, nullptr);
}

std::string Trace::device_intervals() const {
  std::lock_guard lock(mutex_);
  return device_source_;
}

void Trace::add_device(std::string name, const char* category, uint64_t stream,
                       std::chrono::steady_clock::time_point start,
                       std::chrono::steady_clock::time_point end) {
  using std::chrono::duration_cast;
  using std::chrono::nanoseconds;
  std::lock_guard lock(mutex_);
  // An interval that began before start() is cut there.
  const int64_t from = std::max<int64_t>(duration_cast<nanoseconds>(start - origin_).count(), 0);
  const int64_t to = duration_cast<nanoseconds>(end - origin_).count();
  events_.push_back(
      {std::move(name), category, from, std::max<int64_t>(to - from, 0), stream, true});
}

bool Trace::recording() const {
  return active() == this;
}

void Trace::add(Event event) {
  std::lock_guard lock(mutex_);
  events_.push_back(std::move(event));
}

std::vector<Trace::Event> Trace::events() const {
  std::lock_guard lock(mutex_);
  return events_;
}

void Trace::write(const std::string& path) const {
  // Microseconds with nanosecond digits: a GPU kernel may take a few microseconds.
  const auto micros = [](int64_t ns) {
    return fmt::format("{}{}.{:03}", ns < 0 ? "-" : "", std::abs(ns) / 1000, std::abs(ns) % 1000);
  };
  std::string json =
      "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n"
      "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"args\":{\"name\":\"host\"}},\n"
      "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":2,\"args\":{\"name\":\"device\"}}";
  {
    std::lock_guard lock(mutex_);
    std::set<uint64_t> streams;
    for (const Event& e : events_) {
      json += fmt::format(
          ",\n{{\"name\":\"{}\",\"cat\":\"{}\",\"ph\":\"X\",\"ts\":{},\"dur\":{},\"pid\":{},"
          "\"tid\":{}}}",
          escaped(e.name), e.category != nullptr ? e.category : "", micros(e.start_ns),
          micros(e.duration_ns), e.device ? 2 : 1, e.thread);
      if (e.device) streams.insert(e.thread);
    }
    for (const uint64_t stream : streams) {
      json += fmt::format(
          ",\n{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":2,\"tid\":{},"
          "\"args\":{{\"name\":\"stream {}\"}}}}",
          stream, stream);
    }
  }
  json += "]}\n";
  std::ofstream out(path);
  out << json;
  out.close();
  EMBER_CHECK(out.good(), "profile::Trace::write: cannot write {}", path);
}

Range::Range(std::string owned, const char* name, const char* category) {
  Trace* trace = active();
  if (trace == nullptr) return;
  trace_ = trace;
  name_ = name != nullptr ? std::string(name) : std::move(owned);
  category_ = category;
  start_ = std::chrono::steady_clock::now();
}

Range::~Range() {
  if (trace_ == nullptr || active() != trace_) return;  // stopped meanwhile: not recorded
  record(trace_, std::move(name_), category_, start_);
}

void Range::record(Trace* trace, std::string name, const char* category,
                   std::chrono::steady_clock::time_point start) {
  const auto end = std::chrono::steady_clock::now();
  using std::chrono::duration_cast;
  using std::chrono::nanoseconds;
  // Both ends rounded the same way, so a range inside another stays inside it.
  // A range open across start() is cut there.
  const int64_t from =
      std::max<int64_t>(duration_cast<nanoseconds>(start - trace->origin_).count(), 0);
  const int64_t to =
      std::max<int64_t>(duration_cast<nanoseconds>(end - trace->origin_).count(), from);
  trace->add({std::move(name), category, from, to - from, thread_number()});
}

OpRange::OpRange(const char* name) : name_(name) {
  nvtx_push(name);
  trace_ = active();
  if (trace_ != nullptr) start_ = std::chrono::steady_clock::now();
}

OpRange::~OpRange() {
  nvtx_pop();
  if (trace_ != nullptr && active() == trace_) Range::record(trace_, name_, "op", start_);
}

}  // namespace ember::profile
