// Streams and events of the emulated runtime: in-order queues whose work runs
// on the submitting thread unless a test holds the stream (ember/simt/shim.hpp).
//
// Each stream is a queue of items: work (a kernel, an async copy or memset), an
// event record, or a wait for an event (cudaStreamWaitEvent). pump() runs every
// runnable head item: a stream runs when it is not held, not already being run
// by another thread (which keeps its order), and its head is not a wait on an
// event that has not completed. So with no holds, work runs at once on the
// submitting thread and its exceptions reach the caller; with holds, it runs
// from release_stream (or a later pump) and its exceptions surface there.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "ember/core/error.hpp"
#include "shim_internal.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct EventState {
  unsigned flags = 0;
  uint64_t issued = 0;     // records submitted
  uint64_t completed = 0;  // the latest record that has executed
  Clock::time_point stamp{};
};

struct Item {
  enum class Kind { work, record, wait } kind = Kind::work;
  std::function<void()> work;
  std::shared_ptr<EventState> event;  // record: the event; wait: the event waited for
  uint64_t generation = 0;            // record: which record; wait: the record waited for
};

}  // namespace

struct CUstream_st {
  unsigned flags = 0;
  bool held = false;
  bool running = false;  // a thread is running this stream's head item
  bool destroyed = false;
  std::deque<Item> backlog;
};

// The handle keeps the state alive only until destroyed; queued items share it.
struct CUevent_st {
  std::shared_ptr<EventState> state;
};

namespace {

struct Streams {
  std::mutex mutex;
  std::condition_variable changed;  // an item finished running
  CUstream_st default_stream;
  std::vector<std::unique_ptr<CUstream_st>> streams;  // created, not yet reclaimed
  std::unordered_set<CUevent_st*> events;
};

Streams& streams() {
  static Streams* s = new Streams;  // never destroyed: static destructors may still call in
  return *s;
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

EventState* resolve(Streams& s, cudaEvent_t handle) {
  return s.events.contains(handle) ? handle->state.get() : nullptr;
}

bool idle(const CUstream_st& stream) {
  return stream.backlog.empty() && !stream.running;
}

bool runnable(const CUstream_st& stream) {
  if (stream.held || stream.running || stream.backlog.empty()) return false;
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

// Runs runnable items until none is left; rethrows the first error work throws
// (the rest stays queued for the next pump).
void pump(Streams& s, std::unique_lock<std::mutex>& lock) {
  while (CUstream_st* stream = next_runnable(s)) {
    Item item = std::move(stream->backlog.front());
    stream->backlog.pop_front();
    if (item.kind == Item::Kind::wait) continue;
    if (item.kind == Item::Kind::record) {
      EventState& e = *item.event;
      if (item.generation > e.completed) {
        e.completed = item.generation;
        e.stamp = Clock::now();
      }
      continue;
    }
    stream->running = true;
    lock.unlock();
    try {
      item.work();
    } catch (...) {
      lock.lock();
      stream->running = false;
      s.changed.notify_all();
      throw;
    }
    lock.lock();
    stream->running = false;
    s.changed.notify_all();
  }
  reclaim_destroyed(s);
  if (all_idle(s)) {
    lock.unlock();  // memory has its own lock; never hold both
    ember::simt::shim::release_deferred_frees();
    lock.lock();
  }
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
  return text;
}

// Waits until `done()`; throws instead when only a hold could make it true.
template <class Done>
void wait_until(Streams& s, std::unique_lock<std::mutex>& lock, const char* call, Done done) {
  for (;;) {
    pump(s, lock);
    if (done()) return;
    if (!any_running(s)) {
      EMBER_THROW(
          "{} would wait forever: the work it waits for is queued behind a stream held by "
          "ember::simt::hold_stream (held: {}); call ember::simt::release_stream first",
          call, describe_holds(s));
    }
    s.changed.wait(lock);
  }
}

void submit_item(cudaStream_t handle, Item item, const char* call) {
  Streams& s = streams();
  std::unique_lock lock(s.mutex);
  CUstream_st* stream = resolve(s, handle);
  EMBER_CHECK(stream != nullptr, "{}: stream {} is not a live stream (destroyed, or never created)",
              call, static_cast<const void*>(handle));
  stream->backlog.push_back(std::move(item));
  pump(s, lock);
}

}  // namespace

namespace ember::simt {

void stream_submit(cudaStream_t stream, std::function<void()> work) {
  submit_item(stream, Item{.kind = Item::Kind::work, .work = std::move(work)}, "stream_submit");
}

void hold_stream(cudaStream_t handle) {
  Streams& s = streams();
  std::lock_guard lock(s.mutex);
  CUstream_st* stream = resolve(s, handle);
  EMBER_CHECK(stream != nullptr, "hold_stream: {} is not a live stream",
              static_cast<const void*>(handle));
  stream->held = true;
}

void release_stream(cudaStream_t handle) {
  Streams& s = streams();
  std::unique_lock lock(s.mutex);
  CUstream_st* stream = resolve(s, handle);
  EMBER_CHECK(stream != nullptr, "release_stream: {} is not a live stream",
              static_cast<const void*>(handle));
  stream->held = false;
  pump(s, lock);
}

size_t pending_work(cudaStream_t handle) {
  Streams& s = streams();
  std::lock_guard lock(s.mutex);
  CUstream_st* stream = resolve(s, handle);
  EMBER_CHECK(stream != nullptr, "pending_work: {} is not a live stream",
              static_cast<const void*>(handle));
  return stream->backlog.size() + (stream->running ? 1 : 0);
}

namespace shim {

bool any_pending_work() {
  Streams& s = streams();
  std::lock_guard lock(s.mutex);
  return !all_idle(s);
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

cudaError_t cudaStreamSynchronize(cudaStream_t handle) {
  Streams& s = streams();
  std::unique_lock lock(s.mutex);
  CUstream_st* stream = resolve(s, handle);
  if (!stream) return fail(cudaErrorInvalidResourceHandle);
  wait_until(s, lock, "cudaStreamSynchronize", [&] { return idle(*stream); });
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t handle) {
  Streams& s = streams();
  std::lock_guard lock(s.mutex);
  CUstream_st* stream = resolve(s, handle);
  if (!stream) return fail(cudaErrorInvalidResourceHandle);
  return idle(*stream) ? cudaSuccess : cudaErrorNotReady;  // not an error: not recorded
}

cudaError_t cudaDeviceSynchronize() {
  Streams& s = streams();
  std::unique_lock lock(s.mutex);
  wait_until(s, lock, "cudaDeviceSynchronize", [&] { return all_idle(s); });
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t handle, cudaEvent_t event, unsigned flags) {
  if (flags != 0) return fail(cudaErrorInvalidValue);
  Streams& s = streams();
  std::unique_lock lock(s.mutex);
  CUstream_st* stream = resolve(s, handle);
  EventState* e = resolve(s, event);
  if (!stream || !e) return fail(cudaErrorInvalidResourceHandle);
  // Waits for the record most recently submitted, as in CUDA; nothing to wait
  // for when it has completed (or the event was never recorded).
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
  return e->completed >= e->issued ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  Streams& s = streams();
  std::unique_lock lock(s.mutex);
  EventState* e = resolve(s, event);
  if (!e) return fail(cudaErrorInvalidResourceHandle);
  const std::shared_ptr<EventState> keep = event->state;  // the handle may be destroyed meanwhile
  const uint64_t target = keep->issued;
  wait_until(s, lock, "cudaEventSynchronize", [&] { return keep->completed >= target; });
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
