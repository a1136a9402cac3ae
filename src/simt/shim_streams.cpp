// Streams and events of the emulated runtime: in-order queues of items (a kernel, an async
// copy or memset, an event record, a wait for an event).
//
// Immediate mode: pump() runs every runnable head item on the submitting thread. A stream runs
// when it is not held, not already being run by another thread (which keeps its order), and its
// head is not a wait on an event that has not completed. Work's exceptions reach the caller.
//
// Deferred mode (what a GPU does): submission only queues; the emulator's worker thread runs
// items later, choosing among the runnable streams by a seeded random draw. Lazy scheduling
// runs only what a host wait needs (the stream or event waited for, and what its event waits
// depend on), plus anything when the host has waited for nothing for a while: host reads that
// forgot to synchronize, and streams that forgot to wait for each other, then see stale data.
// Errors thrown by work surface from the next host wait (a synchronize or a blocking copy).
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include "ember/core/error.hpp"
#include "ember/core/profile.hpp"
#include "race_check_internal.hpp"
#include "shim_internal.hpp"

namespace {

using Clock = std::chrono::steady_clock;
namespace race = ember::simt::race;

struct EventState {
  unsigned flags = 0;
  uint64_t issued = 0;     // records submitted
  uint64_t completed = 0;  // the latest record that has executed
  Clock::time_point stamp{};
  ember::simt::race::VectorClock vc;  // the recording stream's, at the latest record
  bool captured = false;  // last recorded during a capture: CUDA refuses to query or wait on it
  uint64_t capture = 0;   // captured: the capture's id (CUstream_st::capture_id)
  // captured: the joined streams' work the record follows (CUstream_st::capture_follows)
  ember::simt::race::VectorClock capture_follows;
};

struct Item {
  enum class Kind { work, record, wait } kind = Kind::work;
  std::function<void()> work;
  std::shared_ptr<EventState> event;  // record: the event; wait: the event waited for
  uint64_t generation = 0;            // record: which record; wait: the record waited for
  std::string what;                   // work: what it is ("kernel <name>"), for a profile::Trace
  std::vector<ember::simt::Access> accesses;  // work captured into a graph: checked at each launch
};

// A profile::Trace's device interval for work that ran on stream #`serial`.
void trace_interval(const std::string& what, unsigned serial, Clock::time_point start) {
  ember::profile::Trace* trace = ember::profile::active();
  if (trace == nullptr || what.empty()) return;
  const auto end = Clock::now();
  if (what.starts_with("kernel ")) {
    trace->add_device(ember::profile::detail::kernel_label(what.substr(7)), "kernel", serial, start,
                      end);
  } else {
    trace->add_device(what, what.starts_with("cudaMem") ? "copy" : "library", serial, start, end);
  }
}

}  // namespace

struct CUstream_st {
  unsigned flags = 0;
  bool held = false;
  bool running = false;  // a thread is running this stream's head item
  bool destroyed = false;
  bool capturing = false;  // cudaStreamBeginCapture: work queued now joins a graph, never runs
  bool capture_invalidated = false;  // an illegal call during the capture (EndCapture fails)
  // A stream that joined another's capture (it waited on an event recorded in it): its work goes
  // into the origin's graph, in submission order (a valid order of CUDA's dependency graph).
  // captured_items counts it. capture_follows: in a capture, for each joined stream (by serial),
  // how many of its items this stream's next work follows, through waits on events, directly or
  // transitively (a vector clock). The capture ends joined when the origin follows every item of
  // every joined stream, as CUDA requires.
  CUstream_st* capture_origin = nullptr;
  uint64_t captured_items = 0;
  ember::simt::race::VectorClock capture_follows;
  uint64_t capture_id = 0;  // an origin's capture now (ids never repeat; 0: none)
  unsigned serial = 0;      // the stream-race checker's name for it (0: the default stream)
  ember::simt::race::VectorClock vc;  // what its next work is ordered after
  std::deque<Item> backlog;
};

// The handle keeps the state alive only until destroyed; queued items share it.
struct CUevent_st {
  std::shared_ptr<EventState> state;
};

// A captured graph: its work items in capture order (the origin stream's and its joined streams').
struct CUgraph_st {
  std::vector<Item> items;
};
struct CUgraphExec_st {
  std::vector<Item> items;
};

namespace {

uint64_t next_capture_id() {
  static uint64_t next = 1;  // under Streams::mutex
  return next++;
}

// The stream whose capture `stream` takes part in: its origin when it joined one, else itself.
CUstream_st* capture_root(CUstream_st* stream) {
  return stream->capture_origin != nullptr ? stream->capture_origin : stream;
}

// An illegal call during a capture invalidates the whole capture (the origin's).
void invalidate_capture(CUstream_st* stream) {
  stream->capture_invalidated = true;
  capture_root(stream)->capture_invalidated = true;
}

// What a host thread waits for (deferred mode): a stream, an event record, or every stream.
struct Demand {
  CUstream_st* stream = nullptr;
  std::shared_ptr<EventState> event;
  uint64_t generation = 0;
  bool all = false;
};

struct Streams {
  std::mutex mutex;
  std::condition_variable changed;  // an item finished running, or the host waits for more
  CUstream_st default_stream;
  std::vector<std::unique_ptr<CUstream_st>> streams;  // created, not yet reclaimed
  std::unordered_set<CUevent_st*> events;
  ember::simt::StreamOptions options;
  std::mt19937_64 rng;
  bool worker_started = false;
  std::vector<const Demand*> demands;        // host waits in progress
  std::vector<std::exception_ptr> failures;  // thrown by deferred work, not yet reported
  ember::simt::SyncCounts counts;
  unsigned next_serial = 1;
  ember::simt::race::VectorClock host;  // what the host has waited for
  uint64_t submissions = 0;             // work items submitted so far (deferred frees)
};

ember::simt::StreamOptions options_from_env() {
  ember::simt::StreamOptions o;
  const char* env = std::getenv("EMBER_SIMT_STREAMS");
  if (env == nullptr || *env == 0) return o;
  const std::string text = env;
  const size_t colon = text.find(':');
  const std::string mode = text.substr(0, colon);
  if (mode == "immediate") {
    o.mode = ember::simt::StreamMode::immediate;
  } else if (mode == "deferred") {
    o.mode = ember::simt::StreamMode::deferred;
  } else if (mode == "lazy") {
    o.mode = ember::simt::StreamMode::deferred;
    o.lazy = true;
  } else {
    std::fprintf(stderr,
                 "ember simt: EMBER_SIMT_STREAMS=%s: expected immediate, deferred[:SEED] or "
                 "lazy[:SEED]; using immediate\n",
                 env);
    return o;
  }
  if (colon != std::string::npos) o.seed = std::strtoull(text.c_str() + colon + 1, nullptr, 10);
  return o;
}

Streams& streams() {
  static Streams* s = [] {
    auto* created = new Streams;  // never destroyed: static destructors may still call in
    created->options = options_from_env();
    created->rng.seed(created->options.seed);
    return created;
  }();
  return *s;
}

bool deferred(const Streams& s) {
  return s.options.mode == ember::simt::StreamMode::deferred;
}

// The stream behind a handle; nullptr when it is not a live stream.
CUstream_st* resolve(Streams& s, cudaStream_t handle) {
  if (handle == nullptr || handle == cudaStreamLegacy || handle == cudaStreamPerThread) {
    return &s.default_stream;
  }
  for (auto& stream : s.streams) {
    if (stream.get() == handle) return stream->destroyed ? nullptr : stream.get();
  }
  return nullptr;
}

// What `read` returns of the streams' state, read under their mutex.
template <class Read>
auto under_lock(Read read) {
  Streams& s = streams();
  std::lock_guard lock(s.mutex);
  return read(s);
}

// The live stream behind a handle that ember's own code passed to `call`: an Error otherwise.
CUstream_st& live_stream(Streams& s, cudaStream_t handle, const char* call) {
  CUstream_st* stream = resolve(s, handle);
  EMBER_CHECK(stream != nullptr, "{}: stream {} is not a live stream (destroyed, or never created)",
              call, static_cast<const void*>(handle));
  return *stream;
}

EventState* resolve(Streams& s, cudaEvent_t handle) {
  return s.events.contains(handle) ? handle->state.get() : nullptr;
}

bool idle(const CUstream_st& stream) {
  return stream.backlog.empty() && !stream.running;
}

bool runnable(const CUstream_st& stream) {
  if (stream.held || stream.capturing || stream.running || stream.backlog.empty()) return false;
  const Item& head = stream.backlog.front();
  return head.kind != Item::Kind::wait || head.event->completed >= head.generation;
}

CUstream_st* next_runnable(Streams& s) {
  if (runnable(s.default_stream)) return &s.default_stream;
  for (auto& stream : s.streams) {
    if (runnable(*stream)) return stream.get();
  }
  return nullptr;
}

void reclaim_destroyed(Streams& s) {
  std::erase_if(s.streams, [](const auto& stream) { return stream->destroyed && idle(*stream); });
}

bool any_running(const Streams& s) {
  if (s.default_stream.running) return true;
  for (const auto& stream : s.streams) {
    if (stream->running) return true;
  }
  return false;
}

bool all_idle(const Streams& s) {
  if (!idle(s.default_stream)) return false;
  for (const auto& stream : s.streams) {
    if (!idle(*stream)) return false;
  }
  return true;
}

void release_frees_if_idle(Streams& s, std::unique_lock<std::mutex>& lock) {
  reclaim_destroyed(s);
  if (all_idle(s)) {
    // Only what was freed before this moment: work submitted after the unlock below may use
    // memory freed after it.
    const uint64_t idle_at = s.submissions;
    lock.unlock();  // memory has its own lock; never hold both
    ember::simt::shim::release_deferred_frees(idle_at);
    lock.lock();
  }
}

// Runs the head item of `stream` (runnable). Work runs without the lock; its exception is
// rethrown with the stream marked idle again.
void run_head(Streams& s, std::unique_lock<std::mutex>& lock, CUstream_st& stream) {
  Item item = std::move(stream.backlog.front());
  stream.backlog.pop_front();
  if (item.kind == Item::Kind::wait) {
    s.changed.notify_all();  // the stream may be idle now: a host wait may be over
    return;
  }
  if (item.kind == Item::Kind::record) {
    EventState& e = *item.event;
    if (item.generation > e.completed) {
      e.completed = item.generation;
      e.stamp = Clock::now();
    }
    s.changed.notify_all();
    return;
  }
  stream.running = true;
  lock.unlock();
  try {
    const auto start = Clock::now();
    item.work();
    trace_interval(item.what, stream.serial, start);
  } catch (...) {
    lock.lock();
    stream.running = false;
    s.changed.notify_all();
    throw;
  }
  lock.lock();
  stream.running = false;
  s.changed.notify_all();
}

// Immediate mode: runs runnable items until none is left; rethrows the first error work
// throws (the rest stays queued for the next pump).
void pump(Streams& s, std::unique_lock<std::mutex>& lock) {
  if (deferred(s)) {
    s.changed.notify_all();  // the worker runs it
    return;
  }
  while (CUstream_st* stream = next_runnable(s)) run_head(s, lock, *stream);
  release_frees_if_idle(s, lock);
}

std::vector<CUstream_st*> all_streams(Streams& s) {
  std::vector<CUstream_st*> out{&s.default_stream};
  for (auto& stream : s.streams) out.push_back(stream.get());
  return out;
}

// The streams whose work `demands` need: the streams waited for, the streams holding the
// event records waited for, and, transitively, those holding the records that their queued
// cudaStreamWaitEvent items wait for.
std::unordered_set<const CUstream_st*> needed(Streams& s,
                                              const std::vector<const Demand*>& demands) {
  const std::vector<CUstream_st*> all = all_streams(s);
  std::unordered_set<const CUstream_st*> out;
  std::vector<const CUstream_st*> todo;
  auto add = [&](const CUstream_st* stream) {
    if (out.insert(stream).second) todo.push_back(stream);
  };
  auto add_recorder = [&](const EventState* event, uint64_t generation) {
    if (event->completed >= generation) return;
    for (const CUstream_st* stream : all) {
      for (const Item& item : stream->backlog) {
        if (item.kind == Item::Kind::record && item.event.get() == event &&
            item.generation <= generation) {
          add(stream);
          break;
        }
      }
    }
  };
  for (const Demand* d : demands) {
    if (d->all) {
      for (const CUstream_st* stream : all) add(stream);
    } else if (d->stream != nullptr) {
      add(d->stream);
    } else if (d->event) {
      add_recorder(d->event.get(), d->generation);
    }
  }
  while (!todo.empty()) {
    const CUstream_st* stream = todo.back();
    todo.pop_back();
    for (const Item& item : stream->backlog) {
      if (item.kind == Item::Kind::wait) add_recorder(item.event.get(), item.generation);
    }
  }
  return out;
}

// Deferred mode: the stream whose head item the worker runs next, drawn among the candidates;
// nullptr when none. Lazy scheduling draws only among what host waits need, unless `any`.
CUstream_st* pick(Streams& s, bool any) {
  std::vector<CUstream_st*> candidates;
  const bool only_needed = s.options.lazy && !any;
  std::unordered_set<const CUstream_st*> need;
  if (only_needed) need = needed(s, s.demands);
  for (CUstream_st* stream : all_streams(s)) {
    if (runnable(*stream) && (!only_needed || need.contains(stream))) candidates.push_back(stream);
  }
  if (candidates.empty()) return nullptr;
  return candidates[s.rng() % candidates.size()];
}

// How long lazy scheduling lets queued work sit while no host wait needs it.
constexpr auto kLazyPatience = std::chrono::milliseconds(20);

[[noreturn]] void worker_loop() {
  Streams& s = streams();
  std::unique_lock lock(s.mutex);
  auto last_activity = Clock::now();
  for (;;) {
    bool any = false;
    if (s.options.lazy && Clock::now() - last_activity >= kLazyPatience) any = true;
    CUstream_st* stream = deferred(s) ? pick(s, any) : nullptr;
    if (stream == nullptr) {
      if (s.options.lazy && next_runnable(s) != nullptr) {
        s.changed.wait_until(lock, last_activity + kLazyPatience);
      } else {
        s.changed.wait(lock);
      }
      if (!s.demands.empty()) last_activity = Clock::now();
      continue;
    }
    try {
      run_head(s, lock, *stream);
    } catch (...) {
      s.failures.push_back(std::current_exception());
      s.changed.notify_all();
    }
    last_activity = Clock::now();
    release_frees_if_idle(s, lock);
  }
}

void start_worker(Streams& s) {
  if (s.worker_started) return;
  s.worker_started = true;
  std::thread(worker_loop).detach();  // lives as long as the process
}

// Rethrows the oldest error deferred work threw and has not been reported yet: each error is
// reported once, by the next host wait to finish (as on a GPU, any wait may report it).
void report_failures(Streams& s) {
  if (s.failures.empty()) return;
  std::exception_ptr first = s.failures.front();
  s.failures.erase(s.failures.begin());
  std::rethrow_exception(first);
}

std::string describe_holds(const Streams& s) {
  std::string text;
  auto add = [&](const CUstream_st& stream, const char* name) {
    if (!stream.held || stream.backlog.empty()) return;
    text += fmt::format("{}stream {} ({} items held)", text.empty() ? "" : ", ",
                        name ? name : fmt::format("{}", static_cast<const void*>(&stream)),
                        stream.backlog.size());
  };
  add(s.default_stream, "<default>");
  for (const auto& stream : s.streams) add(*stream, nullptr);
  for (const auto& stream : s.streams) {
    if (stream->capturing) {
      text += fmt::format("{}stream {} capturing a graph", text.empty() ? "" : ", ",
                          static_cast<const void*>(stream.get()));
    }
  }
  return text;
}

[[noreturn]] void throw_wait_forever(const Streams& s, const char* call) {
  EMBER_THROW(
      "{} would wait forever: the work it waits for is queued behind a stream held by "
      "ember::simt::hold_stream or capturing a graph ({}); call ember::simt::release_stream "
      "(or end the capture) first",
      call, describe_holds(s));
}

// Waits until `done()`; throws instead when only a hold could make it true. In deferred mode
// the worker runs the work (what `demand` needs first, when lazy), and an error that deferred
// work threw is rethrown here.
template <class Done>
void wait_until(Streams& s, std::unique_lock<std::mutex>& lock, const char* call,
                const Demand& demand, Done done) {
  if (!deferred(s)) {
    for (;;) {
      pump(s, lock);
      if (done()) return;
      if (!any_running(s)) throw_wait_forever(s, call);
      s.changed.wait(lock);
    }
  }
  start_worker(s);
  // Failures are reported after the wait, never before it: the caller's queued work (a copy
  // into its buffer) must have run before it may return.
  s.demands.push_back(&demand);
  s.changed.notify_all();
  struct Withdraw {
    Streams& s;
    const Demand* d;
    ~Withdraw() { std::erase(s.demands, d); }
  } withdraw{s, &demand};
  while (!done()) {
    bool progress = false;
    for (const CUstream_st* stream : needed(s, {&demand})) {
      if (stream->running || runnable(*stream)) progress = true;
    }
    if (!progress && !any_running(s)) throw_wait_forever(s, call);
    s.changed.wait(lock);
  }
  report_failures(s);
}

// Advances `stream`'s clock for a new operation, after all the host has waited for; checks
// the operation's accesses when the race checker is on.
void stamp(Streams& s, CUstream_st& stream, const std::vector<ember::simt::Access>& accesses,
           const std::string& what) {
  namespace race = ember::simt::race;
  race::merge(stream.vc, s.host);
  if (stream.vc.size() <= stream.serial) stream.vc.resize(stream.serial + 1, 0);
  ++stream.vc[stream.serial];
  if (!accesses.empty() && ember::simt::race_check_enabled()) {
    race::check(stream.serial, stream.vc, accesses,
                fmt::format("{} on stream #{}", what.empty() ? "work" : what, stream.serial));
  }
}

void submit_item(cudaStream_t handle, Item item, const char* call,
                 const std::vector<ember::simt::Access>& accesses = {},
                 const std::string& what = {}) {
  Streams& s = streams();
  std::unique_lock lock(s.mutex);
  CUstream_st* stream = &live_stream(s, handle, call);
  item.what = what;
  if (stream->capturing) {  // joins the graph: checked when a launch of it runs
    item.accesses = accesses;
    if (stream->capture_origin != nullptr) ++stream->captured_items;
    capture_root(stream)->backlog.push_back(std::move(item));
    return;
  }
  stamp(s, *stream, accesses, what);
  ++s.submissions;
  stream->backlog.push_back(std::move(item));
  if (deferred(s)) start_worker(s);
  pump(s, lock);
}

}  // namespace

namespace ember::simt {

void stream_submit(cudaStream_t stream, std::function<void()> work) {
  submit_item(stream, Item{.kind = Item::Kind::work, .work = std::move(work)}, "stream_submit");
}

void stream_submit(cudaStream_t stream, std::function<void()> work, std::vector<Access> accesses,
                   std::string what) {
  submit_item(stream, Item{.kind = Item::Kind::work, .work = std::move(work)}, "stream_submit",
              accesses, what);
}

void set_stream_options(const StreamOptions& options) {
  cudaDeviceSynchronize();  // work queued under the old options finishes under them
  Streams& s = streams();
  std::lock_guard lock(s.mutex);
  s.options = options;
  s.rng.seed(options.seed);
  s.changed.notify_all();
}

StreamOptions stream_options() {
  return under_lock([](Streams& s) { return s.options; });
}

SyncCounts sync_counts() {
  return under_lock([](Streams& s) { return s.counts; });
}

void hold_stream(cudaStream_t handle) {
  Streams& s = streams();
  std::lock_guard lock(s.mutex);
  live_stream(s, handle, "hold_stream").held = true;
}

void release_stream(cudaStream_t handle) {
  Streams& s = streams();
  std::unique_lock lock(s.mutex);
  live_stream(s, handle, "release_stream").held = false;
  pump(s, lock);
}

size_t pending_work(cudaStream_t handle) {
  Streams& s = streams();
  std::lock_guard lock(s.mutex);
  const CUstream_st& stream = live_stream(s, handle, "pending_work");
  return stream.backlog.size() + (stream.running ? 1 : 0);
}

namespace shim {

bool stream_valid(cudaStream_t handle) {
  return under_lock([&](Streams& s) { return resolve(s, handle) != nullptr; });
}

bool refuse_in_capture(cudaStream_t handle) {
  Streams& s = streams();
  std::lock_guard lock(s.mutex);
  CUstream_st* stream = resolve(s, handle);
  if (stream == nullptr || !stream->capturing) return false;
  invalidate_capture(stream);
  return true;
}

void submit_and_wait(cudaStream_t handle, std::function<void()> work, const char* call,
                     std::vector<Access> accesses) {
  Streams& s = streams();
  std::unique_lock lock(s.mutex);
  CUstream_st* stream = &live_stream(s, handle, call);
  if (stream->capturing) invalidate_capture(stream);  // the wait below fails too
  ++s.counts.blocking_copies;
  stamp(s, *stream, accesses, call);
  const race::VectorClock known = stream->vc;
  auto done = std::make_shared<EventState>();
  // If the wait throws (a hold or a capture keeps the copy from running), the copy must never
  // run later: its destination is the caller's, about to go out of scope.
  auto cancelled = std::make_shared<bool>(false);
  ++s.submissions;
  stream->backlog.push_back(Item{.kind = Item::Kind::work,
                                 .work =
                                     [work = std::move(work), cancelled] {
                                       if (!*cancelled) work();
                                     },
                                 .what = call});
  stream->backlog.push_back(Item{.kind = Item::Kind::record, .event = done, .generation = 1});
  done->issued = 1;
  if (deferred(s)) start_worker(s);
  pump(s, lock);
  try {
    wait_until(s, lock, call, Demand{.event = done, .generation = 1},
               [&] { return done->completed >= 1; });
  } catch (...) {
    if (done->completed < 1) *cancelled = true;  // not run (nothing runs while nothing can)
    throw;
  }
  race::merge(s.host, known);
}

uint64_t submissions() {
  return under_lock([](Streams& s) { return s.submissions; });
}

bool any_pending_work() {
  return under_lock([](Streams& s) { return !all_idle(s); });
}

}  // namespace shim
}  // namespace ember::simt

using ember::simt::shim::fail;

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  if (!stream || (flags & ~unsigned{cudaStreamNonBlocking}) != 0)
    return fail(cudaErrorInvalidValue);
  Streams& s = streams();
  std::lock_guard lock(s.mutex);
  auto created = std::make_unique<CUstream_st>();
  created->flags = flags;
  created->serial = s.next_serial++;
  *stream = created.get();
  s.streams.push_back(std::move(created));
  return cudaSuccess;
}

// Like the real runtime, returns at once and lets queued work finish; a hold
// on the stream ends with it (else its work could never run). Errors that work
// throws cannot propagate from here (ember calls this from destructors): they
// are printed and returned as cudaErrorLaunchFailure.
cudaError_t cudaStreamDestroy(cudaStream_t handle) {
  Streams& s = streams();
  std::unique_lock lock(s.mutex);
  CUstream_st* stream = resolve(s, handle);
  if (!stream || stream == &s.default_stream) return fail(cudaErrorInvalidResourceHandle);
  // A capture's streams: an origin destroyed mid-capture lets its joined streams go (their
  // captured work went with its graph), and a joined stream destroyed invalidates the capture.
  if (stream->capturing) {
    if (stream->capture_origin != nullptr) {
      invalidate_capture(stream);
    } else {
      for (CUstream_st* other : all_streams(s)) {
        if (other->capture_origin != stream) continue;
        other->capturing = false;
        other->capture_invalidated = false;
        other->capture_origin = nullptr;
        other->captured_items = 0;
        other->capture_follows.clear();
      }
    }
  }
  stream->destroyed = true;
  stream->held = false;
  try {
    pump(s, lock);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ember simt: work on a destroyed stream failed: %s\n", e.what());
    return fail(cudaErrorLaunchFailure);
  }
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t handle, cudaStreamCaptureMode) {
  Streams& s = streams();
  std::unique_lock lock(s.mutex);
  CUstream_st* stream = resolve(s, handle);
  if (!stream || stream == &s.default_stream) return fail(cudaErrorInvalidResourceHandle);
  if (stream->capturing) return fail(cudaErrorIllegalState);  // its own, or one it joined
  // Work queued before the capture still runs: only what follows joins the graph.
  wait_until(s, lock, "cudaStreamBeginCapture", Demand{.stream = stream},
             [&] { return idle(*stream); });
  stream->capturing = true;
  stream->capture_invalidated = false;
  stream->capture_id = next_capture_id();
  stream->capture_follows.clear();
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t handle, cudaGraph_t* graph) {
  Streams& s = streams();
  std::lock_guard lock(s.mutex);
  CUstream_st* stream = resolve(s, handle);
  if (!stream || !graph) return fail(cudaErrorInvalidValue);
  if (!stream->capturing || stream->capture_origin != nullptr) return fail(cudaErrorIllegalState);
  // The streams that joined: each leaves the capture; work of theirs that the origin does not
  // follow (waited for directly, or through another stream that waited for it) is CUDA's
  // unjoined error.
  bool unjoined = false;
  for (CUstream_st* other : all_streams(s)) {
    if (other->capture_origin != stream) continue;
    const race::VectorClock& follows = stream->capture_follows;
    const uint64_t joined = other->serial < follows.size() ? follows[other->serial] : 0;
    if (other->captured_items > joined) unjoined = true;
    other->capturing = false;
    other->capture_invalidated = false;
    other->capture_origin = nullptr;
    other->captured_items = 0;
    other->capture_follows.clear();
  }
  stream->capture_follows.clear();
  stream->capturing = false;
  stream->capture_id = 0;
  std::deque<Item> captured = std::move(stream->backlog);
  stream->backlog.clear();
  *graph = nullptr;
  if (stream->capture_invalidated) return fail(cudaErrorStreamCaptureInvalidated);
  if (unjoined) return fail(cudaErrorStreamCaptureUnjoined);
  auto* made = new CUgraph_st;
  for (Item& item : captured) {
    if (item.kind == Item::Kind::work) made->items.push_back(std::move(item));
  }
  *graph = made;
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  if (!exec || !graph) return fail(cudaErrorInvalidValue);
  *exec = new CUgraphExec_st{graph->items};
  return cudaSuccess;
}

// Queues the graph's work on `handle` in capture order, each item checked by the race checker
// as it is queued, like the launches it was captured from.
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t handle) {
  if (!exec) return fail(cudaErrorInvalidValue);
  Streams& s = streams();
  std::unique_lock lock(s.mutex);
  CUstream_st* stream = resolve(s, handle);
  if (!stream) return fail(cudaErrorInvalidResourceHandle);
  if (stream->capturing) return fail(cudaErrorStreamCaptureUnsupported);  // not emulated
  ++s.counts.graph_launches;
  for (const Item& item : exec->items) {
    stamp(s, *stream, item.accesses, item.what);
    ++s.submissions;
    stream->backlog.push_back(Item{.kind = Item::Kind::work, .work = item.work, .what = item.what});
  }
  if (deferred(s)) start_worker(s);
  pump(s, lock);
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}

cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count) {
  if (!graph || !count) return fail(cudaErrorInvalidValue);
  if (nodes != nullptr) {
    for (size_t i = 0; i < std::min(*count, graph->items.size()); ++i) {
      nodes[i] = reinterpret_cast<cudaGraphNode_t>(i + 1);
    }
  }
  *count = graph->items.size();
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t handle, cudaStreamCaptureStatus* status) {
  Streams& s = streams();
  std::lock_guard lock(s.mutex);
  CUstream_st* stream = resolve(s, handle);
  if (!stream || !status) return fail(cudaErrorInvalidValue);
  *status = !stream->capturing                          ? cudaStreamCaptureStatusNone
            : capture_root(stream)->capture_invalidated ? cudaStreamCaptureStatusInvalidated
                                                        : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t handle) {
  Streams& s = streams();
  std::unique_lock lock(s.mutex);
  CUstream_st* stream = resolve(s, handle);
  if (!stream) return fail(cudaErrorInvalidResourceHandle);
  if (stream->capturing) {  // as CUDA: refused, and the capture is invalidated
    invalidate_capture(stream);
    return fail(cudaErrorStreamCaptureUnsupported);
  }
  ++s.counts.stream_synchronize;
  const race::VectorClock known = stream->vc;
  wait_until(s, lock, "cudaStreamSynchronize", Demand{.stream = stream},
             [&] { return idle(*stream); });
  race::merge(s.host, known);
  return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t handle, cudaHostFn_t fn, void* user_data) {
  if (fn == nullptr) return fail(cudaErrorInvalidValue);
  {
    Streams& s = streams();
    std::lock_guard lock(s.mutex);
    if (!resolve(s, handle)) return fail(cudaErrorInvalidResourceHandle);
  }
  try {
    ember::simt::stream_submit(
        handle, [fn, user_data] { fn(user_data); }, {}, "host function");
  } catch (const ember::Error&) {  // the stream was destroyed meanwhile
    return fail(cudaErrorInvalidResourceHandle);
  }
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t handle) {
  Streams& s = streams();
  std::lock_guard lock(s.mutex);
  CUstream_st* stream = resolve(s, handle);
  if (!stream) return fail(cudaErrorInvalidResourceHandle);
  if (stream->capturing) {
    invalidate_capture(stream);
    return fail(cudaErrorStreamCaptureUnsupported);
  }
  // Like the real runtime, "not ready" is also left as the last error: callers clear it.
  if (!idle(*stream)) return fail(cudaErrorNotReady);
  race::merge(s.host, stream->vc);
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  Streams& s = streams();
  std::unique_lock lock(s.mutex);
  bool capturing = false;  // global capture mode: a device-wide wait is illegal during any capture
  for (CUstream_st* stream : all_streams(s)) {
    if (stream->capturing) {
      invalidate_capture(stream);
      capturing = true;
    }
  }
  if (capturing) return fail(cudaErrorStreamCaptureUnsupported);
  ++s.counts.device_synchronize;
  race::VectorClock known;
  for (const CUstream_st* stream : all_streams(s)) race::merge(known, stream->vc);
  wait_until(s, lock, "cudaDeviceSynchronize", Demand{.all = true}, [&] { return all_idle(s); });
  race::merge(s.host, known);
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t handle, cudaEvent_t event, unsigned flags) {
  if (flags != 0) return fail(cudaErrorInvalidValue);
  Streams& s = streams();
  std::unique_lock lock(s.mutex);
  CUstream_st* stream = resolve(s, handle);
  EventState* e = resolve(s, event);
  if (!stream || !e) return fail(cudaErrorInvalidResourceHandle);
  if (stream->capturing) {
    // A record in the same capture: the graph's order (submission order) has it already; this
    // stream now follows what the record followed. A wait for work outside the graph is CUDA's
    // isolation error.
    CUstream_st* root = capture_root(stream);
    if (e->captured && e->capture == root->capture_id) {
      race::merge(stream->capture_follows, e->capture_follows);  // follows what it followed
      return cudaSuccess;
    }
    invalidate_capture(stream);
    return fail(cudaErrorStreamCaptureIsolation);
  }
  // The origin whose capture recorded the event, while that capture runs.
  auto running_origin = [&]() -> CUstream_st* {
    if (!e->captured || e->capture == 0) return nullptr;
    for (CUstream_st* other : all_streams(s)) {
      if (other->capture_id == e->capture) return other;
    }
    return nullptr;
  };
  if (running_origin() != nullptr) {
    // Waiting on a record of a running capture: this stream joins it (CUDA's fork). Its own
    // earlier work is not part of the graph: it finishes first. The legacy default stream
    // cannot take part in a capture.
    if (stream == &s.default_stream) return fail(cudaErrorStreamCaptureImplicit);
    wait_until(s, lock, "cudaStreamWaitEvent", Demand{.stream = stream},
               [&] { return idle(*stream); });
    CUstream_st* origin = running_origin();
    if (origin == nullptr) return fail(cudaErrorStreamCaptureInvalidated);  // ended meanwhile
    stream->capturing = true;
    stream->capture_invalidated = false;
    stream->capture_origin = origin;
    stream->captured_items = 0;
    stream->capture_follows = e->capture_follows;
    return cudaSuccess;
  }
  // Waits for the record most recently submitted, as in CUDA; nothing to wait
  // for when it has completed (or the event was never recorded).
  race::merge(stream->vc, e->vc);  // ordered after the record, whether or not it has run
  if (e->completed >= e->issued) return cudaSuccess;
  stream->backlog.push_back(
      Item{.kind = Item::Kind::wait, .event = event->state, .generation = e->issued});
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  constexpr unsigned kKnown =
      cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
  if (!event || (flags & ~kKnown) != 0) return fail(cudaErrorInvalidValue);
  Streams& s = streams();
  std::lock_guard lock(s.mutex);
  auto* created = new CUevent_st{std::make_shared<EventState>()};
  created->state->flags = flags;
  s.events.insert(created);
  *event = created;
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  Streams& s = streams();
  std::lock_guard lock(s.mutex);
  if (!s.events.erase(event)) return fail(cudaErrorInvalidResourceHandle);
  delete event;  // queued records and waits keep the state alive
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t handle) {
  Streams& s = streams();
  std::unique_lock lock(s.mutex);
  CUstream_st* stream = resolve(s, handle);
  EventState* e = resolve(s, event);
  if (!stream || !e) return fail(cudaErrorInvalidResourceHandle);
  if (stream->capturing) {  // joins the graph: never runs here, never awaited
    e->captured = true;
    e->capture = capture_root(stream)->capture_id;
    e->capture_follows = stream->capture_follows;
    if (stream->capture_origin != nullptr) {
      if (e->capture_follows.size() <= stream->serial)
        e->capture_follows.resize(stream->serial + 1);
      e->capture_follows[stream->serial] = stream->captured_items;  // and its own work so far
    }
    return cudaSuccess;
  }
  e->captured = false;
  e->capture = 0;
  e->capture_follows.clear();
  stamp(s, *stream, {}, {});
  e->vc = stream->vc;
  stream->backlog.push_back(
      Item{.kind = Item::Kind::record, .event = event->state, .generation = ++e->issued});
  pump(s, lock);
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  Streams& s = streams();
  std::lock_guard lock(s.mutex);
  EventState* e = resolve(s, event);
  if (!e) return fail(cudaErrorInvalidResourceHandle);
  if (e->captured) return fail(cudaErrorCapturedEvent);
  // Like the real runtime, "not ready" is also left as the last error: callers clear it.
  if (e->completed < e->issued) return fail(cudaErrorNotReady);
  race::merge(s.host, e->vc);
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  Streams& s = streams();
  std::unique_lock lock(s.mutex);
  EventState* e = resolve(s, event);
  if (!e) return fail(cudaErrorInvalidResourceHandle);
  if (e->captured) return fail(cudaErrorCapturedEvent);
  const std::shared_ptr<EventState> keep = event->state;  // the handle may be destroyed meanwhile
  const uint64_t target = keep->issued;
  ++s.counts.event_synchronize;
  const race::VectorClock known = keep->vc;
  wait_until(s, lock, "cudaEventSynchronize", Demand{.event = keep, .generation = target},
             [&] { return keep->completed >= target; });
  race::merge(s.host, known);
  return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!ms) return fail(cudaErrorInvalidValue);
  Streams& s = streams();
  std::lock_guard lock(s.mutex);
  EventState* a = resolve(s, start);
  EventState* b = resolve(s, end);
  if (!a || !b) return fail(cudaErrorInvalidResourceHandle);
  if ((a->flags | b->flags) & cudaEventDisableTiming) return fail(cudaErrorInvalidResourceHandle);
  if (a->issued == 0 || b->issued == 0) return fail(cudaErrorInvalidResourceHandle);
  if (a->completed < a->issued || b->completed < b->issued) return fail(cudaErrorNotReady);
  *ms = std::chrono::duration<float, std::milli>(b->stamp - a->stamp).count();
  return cudaSuccess;
}
