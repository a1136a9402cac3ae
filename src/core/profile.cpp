// profile::Trace and profile::Range (ember/core/profile.hpp).
#include "ember/core/profile.hpp"

#include <atomic>
#include <fstream>
#include <functional>
#include <thread>

#include <fmt/format.h>

#include "ember/core/error.hpp"

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
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<int>(c));
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

Trace* active() {
  return g_active.load(std::memory_order_acquire);
}

Trace::~Trace() {
  Trace* self = this;
  g_active.compare_exchange_strong(self, nullptr);
}

void Trace::start() {
  {
    std::lock_guard lock(mutex_);
    events_.clear();
    origin_ = std::chrono::steady_clock::now();
  }
  Trace* expected = nullptr;
  EMBER_CHECK(g_active.compare_exchange_strong(expected, this) || expected == this,
              "profile::Trace::start: another trace is recording");
}

void Trace::stop() {
  Trace* self = this;
  g_active.compare_exchange_strong(self, nullptr);
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
  std::string json = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[";
  {
    std::lock_guard lock(mutex_);
    bool first = true;
    for (const Event& e : events_) {
      json += fmt::format(
          "{}{{\"name\":\"{}\",\"cat\":\"{}\",\"ph\":\"X\",\"ts\":{},\"dur\":{},\"pid\":1,"
          "\"tid\":{}}}",
          first ? "" : ",\n", escaped(e.name), e.category, e.start_us, e.duration_us, e.thread);
      first = false;
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
  using std::chrono::microseconds;
  // Both ends rounded the same way, so a range inside another stays inside it.
  const int64_t from = duration_cast<microseconds>(start - trace->origin_).count();
  const int64_t to = duration_cast<microseconds>(end - trace->origin_).count();
  trace->add({std::move(name), category, from, to - from, thread_number()});
}

}  // namespace ember::profile
