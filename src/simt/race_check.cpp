// The stream-race checker (ember/simt/race_check.hpp): shadow state per range of device bytes
// (the last write and the reads since, each stamped with its stream and that stream's clock)
// checked against the submitting operation's vector clock.
#include "race_check_internal.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>

#include "ember/core/error.hpp"
#include "shim_internal.hpp"

namespace ember::simt {
namespace {

std::atomic<bool>& enabled() {
  static std::atomic<bool> on{[] {
    const char* env = std::getenv("EMBER_SIMT_RACECHECK");
    return env != nullptr && env[0] == '1';
  }()};
  return on;
}

// One operation's mark on a range: who, on which stream, at which point of that stream.
struct Stamp {
  unsigned stream = 0;  // serial
  uint64_t clock = 0;
  std::shared_ptr<const std::string> what;  // "kernel ... on stream #2"
};

struct Shadow {
  uintptr_t end = 0;
  Stamp write;               // clock 0: never written
  std::vector<Stamp> reads;  // since the write, the latest per stream
};

struct State {
  std::mutex mutex;
  std::map<uintptr_t, Shadow> ranges;  // disjoint, by start
  std::map<uintptr_t, size_t> blocks;  // allocator blocks: start -> bytes
};

State& state() {
  static auto* s = new State;  // never destroyed: frees may come during static destruction
  return *s;
}

// Splits the shadow ranges so that `at` starts one (when it falls inside one).
void split_at(std::map<uintptr_t, Shadow>& ranges, uintptr_t at) {
  auto it = ranges.upper_bound(at);
  if (it == ranges.begin()) return;
  --it;
  if (it->first == at || it->second.end <= at) return;
  Shadow tail = it->second;
  it->second.end = at;
  ranges.emplace(at, std::move(tail));
}

// The bytes a pointer reaches: to the end of its allocator block, else of its cudaMalloc
// allocation; empty when it is not device memory.
std::pair<uintptr_t, uintptr_t> extent(State& s, const Access& a) {
  const auto p = reinterpret_cast<uintptr_t>(a.ptr);
  if (a.bytes != 0) return {p, p + a.bytes};
  auto it = s.blocks.upper_bound(p);
  if (it != s.blocks.begin()) {
    --it;
    if (p < it->first + it->second) return {p, it->first + it->second};
  }
  uintptr_t end = 0;
  if (shim::device_allocation_end(a.ptr, &end)) return {p, end};
  if (shim::vmm_range_mapped(a.ptr, 1)) return {p, p + 1};
  return {p, p};
}

bool ordered(const Stamp& earlier, const race::VectorClock& now) {
  return earlier.clock == 0 ||
         (earlier.stream < now.size() && now[earlier.stream] >= earlier.clock);
}

[[noreturn]] void report(const Stamp& earlier, bool earlier_wrote, const Stamp& now, bool writes,
                         uintptr_t begin, uintptr_t end) {
  EMBER_THROW(
      "stream race on device memory [{:#x}, {:#x}) ({} bytes): {} {} it, but {} {} it with no "
      "event or synchronization ordering the two. Record an ember::Event after the first and "
      "make the second's stream wait for it (Stream::wait), or run both on one stream; a tensor "
      "used on another stream also needs Tensor::record_stream",
      begin, end, end - begin, *now.what, writes ? "writes" : "reads", *earlier.what,
      earlier_wrote ? "last wrote" : "still reads");
}

}  // namespace

bool race_check_enabled() {
  return enabled().load(std::memory_order_relaxed);
}

void set_race_check(bool on) {
  enabled().store(on);
}

void note_block(const void* ptr, size_t bytes) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  s.blocks[reinterpret_cast<uintptr_t>(ptr)] = bytes;
}

void forget_block(const void* ptr) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  s.blocks.erase(reinterpret_cast<uintptr_t>(ptr));
}

namespace race {

void merge(VectorClock& into, const VectorClock& from) {
  if (into.size() < from.size()) into.resize(from.size(), 0);
  for (size_t i = 0; i < from.size(); ++i) into[i] = std::max(into[i], from[i]);
}

void check(unsigned stream, const VectorClock& clock, const std::vector<Access>& accesses,
           const std::string& what) {
  if (accesses.empty()) return;
  State& s = state();
  std::lock_guard lock(s.mutex);
  const Stamp now{stream, clock[stream], std::make_shared<const std::string>(what)};
  for (const Access& a : accesses) {
    const auto [begin, end] = extent(s, a);
    if (begin >= end) continue;
    split_at(s.ranges, begin);
    split_at(s.ranges, end);
    // Check every covered range (and the gaps, which nothing touched) before changing any.
    for (auto it = s.ranges.lower_bound(begin); it != s.ranges.end() && it->first < end; ++it) {
      const Shadow& sh = it->second;
      if (!ordered(sh.write, clock)) report(sh.write, true, now, a.write, it->first, sh.end);
      if (a.write) {
        for (const Stamp& r : sh.reads) {
          if (!ordered(r, clock)) report(r, false, now, true, it->first, sh.end);
        }
      }
    }
    // Record: fill the gaps with fresh ranges, then stamp each.
    uintptr_t at = begin;
    auto it = s.ranges.lower_bound(begin);
    while (at < end) {
      if (it == s.ranges.end() || it->first > at) {
        const uintptr_t gap_end = it == s.ranges.end() ? end : std::min(end, it->first);
        it = s.ranges.emplace(at, Shadow{gap_end, {}, {}}).first;
      }
      Shadow& sh = it->second;
      if (a.write) {
        sh.write = now;
        sh.reads.clear();
      } else {
        auto same = std::find_if(sh.reads.begin(), sh.reads.end(),
                                 [&](const Stamp& r) { return r.stream == stream; });
        if (same != sh.reads.end()) {
          *same = now;
        } else {
          sh.reads.push_back(now);
        }
      }
      at = sh.end;
      ++it;
    }
  }
}

void forget_range(const void* ptr, size_t bytes) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  const auto begin = reinterpret_cast<uintptr_t>(ptr);
  split_at(s.ranges, begin);
  split_at(s.ranges, begin + bytes);
  s.ranges.erase(s.ranges.lower_bound(begin), s.ranges.lower_bound(begin + bytes));
}

}  // namespace race
}  // namespace ember::simt
