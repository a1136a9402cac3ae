#include "ember/core/stream.hpp"

#include <exception>
#include <iterator>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "cuda_backend.hpp"
#include "ember/core/error.hpp"

namespace ember {

namespace {
void run_checks_of_dying_stream(void* native) noexcept;  // below
}  // namespace

namespace {
// Native streams are never destroyed: the last Stream of one leaves it here for the next Stream
// made on its device. Allocators key cached blocks by the native handle (StreamId), and a
// destroyed handle can come back from cudaStreamCreate for a new stream whose work is not
// ordered after the old one's: a block the old stream freed while its queued work still used it
// would go to the new stream with no event. A reused native stream orders the new work after
// the old, as the allocator assumes.
struct IdleStreams {
  std::mutex mutex;
  std::map<int, std::vector<void*>> by_device;
};
IdleStreams& idle_streams() {
  static auto* idle = new IdleStreams;  // leaked: Streams may die during static destruction
  return *idle;
}

void* take_stream(int device) {
  {
    IdleStreams& idle = idle_streams();
    std::lock_guard lock(idle.mutex);
    std::vector<void*>& streams = idle.by_device[device];
    if (!streams.empty()) {
      void* native = streams.back();
      streams.pop_back();
      return native;
    }
  }
  return cuda_backend::stream_create(device);
}

void keep_stream(int device, void* native) noexcept {
  try {
    // A stream left capturing (its capture never ended) would hand the capture on: destroyed.
    if (cuda_backend::stream_capturing(native)) {
      cuda_backend::stream_destroy(native);
      return;
    }
    IdleStreams& idle = idle_streams();
    std::lock_guard lock(idle.mutex);
    idle.by_device[device].push_back(native);
  } catch (...) {
    cuda_backend::stream_destroy(native);  // out of memory for the list: the old behaviour
  }
}
}  // namespace

// Owns a cudaStream_t while a Stream or tensor storage shares it; the last one gives it back for
// reuse (idle_streams).
struct Stream::Handle {
  int device;
  void* native = nullptr;
  explicit Handle(int device_index) : device(device_index), native(take_stream(device_index)) {}
  ~Handle() {
    run_checks_of_dying_stream(native);
    keep_stream(device, native);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
};

Stream::Stream(Device device) : device_(device) {
  if (device.is_cuda()) {
    require_available(device);
    handle_ = std::make_shared<Handle>(device.index());
  }
}

void* Stream::native() const {
  return handle_ ? handle_->native : nullptr;
}

namespace {
struct PendingChecks {
  std::mutex mutex;
  std::map<StreamId, std::vector<std::function<void()>>> checks;
  // Failures of the checks of streams destroyed before a synchronize: the next synchronize of
  // any stream reports them (a destructor cannot).
  std::vector<std::exception_ptr> orphaned;
};
PendingChecks& pending_checks() {
  static auto* p = new PendingChecks;  // leaked: streams may synchronize during static destruction
  return *p;
}

std::vector<std::function<void()>> take_checks(StreamId id) {
  PendingChecks& p = pending_checks();
  std::lock_guard lock(p.mutex);
  std::vector<std::function<void()>> out;
  auto it = p.checks.find(id);
  if (it != p.checks.end()) {
    out.swap(it->second);
    p.checks.erase(it);
  }
  return out;
}

// Runs every check; rethrows the first failure after all have run.
void run_checks(std::vector<std::function<void()>>& checks) {
  std::exception_ptr first;
  for (auto& check : checks) {
    try {
      check();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

void run_checks_of_dying_stream(void* native) noexcept {
  std::vector<std::function<void()>> checks = take_checks(reinterpret_cast<StreamId>(native));
  if (checks.empty()) return;
  try {
    cuda_backend::stream_synchronize(native);
    run_checks(checks);
  } catch (...) {
    PendingChecks& p = pending_checks();
    std::lock_guard lock(p.mutex);
    p.orphaned.push_back(std::current_exception());
  }
}
}  // namespace

void check_after_synchronize(const Stream& stream, std::function<void()> check) {
  if (stream.native() == nullptr) {  // the CPU: the work is already done
    check();
    return;
  }
  PendingChecks& p = pending_checks();
  std::lock_guard lock(p.mutex);
  p.checks[stream.id()].push_back(std::move(check));
}

void Stream::synchronize() const {
  if (!handle_) return;
  refuse_capture("Stream::synchronize");
  // The checks registered so far are those this synchronize waits for (later ones may belong to
  // work queued after it started).
  std::vector<std::function<void()>> checks = take_checks(id());
  try {
    cuda_backend::stream_synchronize(handle_->native);
  } catch (...) {
    PendingChecks& p = pending_checks();
    std::lock_guard lock(p.mutex);
    auto& slot = p.checks[id()];
    slot.insert(slot.begin(), std::make_move_iterator(checks.begin()),
                std::make_move_iterator(checks.end()));
    throw;
  }
  std::exception_ptr orphan;
  {
    PendingChecks& p = pending_checks();
    std::lock_guard lock(p.mutex);
    if (!p.orphaned.empty()) {
      orphan = p.orphaned.front();
      p.orphaned.erase(p.orphaned.begin());
    }
  }
  std::exception_ptr own;
  try {
    run_checks(checks);
  } catch (...) {
    own = std::current_exception();
  }
  if (orphan) {
    if (own) {  // reported by the next synchronize, not lost
      PendingChecks& p = pending_checks();
      std::lock_guard lock(p.mutex);
      p.orphaned.push_back(own);
    }
    std::rethrow_exception(orphan);
  }
  if (own) std::rethrow_exception(own);
}

void Stream::wait(const Stream& other) const {
  EMBER_CHECK(other.device_ == device_ || other.device_.is_cpu() || device_.is_cpu(),
              "Stream::wait: a stream on {} cannot wait for a stream on {}; record an Event "
              "there and wait for it",
              device_.to_string(), other.device_.to_string());
  if (!handle_ || !other.handle_ || handle_ == other.handle_) return;
  cuda_backend::stream_wait_stream(handle_->native, other.handle_->native, device_.index());
}

bool Stream::capturing() const {
  return handle_ && cuda_backend::stream_capturing(handle_->native);
}

void Stream::refuse_capture(const char* what) const {
  EMBER_CHECK(!capturing(),
              "{}: the stream is capturing a CUDA graph, and a graph cannot hold a host wait or "
              "a copy to or from host memory; do it outside Graph::capture (fill input tensors "
              "made before the capture between replays)",
              what);
}

void Stream::wait(const Event& event) const {
  EMBER_CHECK(event.recorded(), "Stream::wait: the event was never recorded");
  if (!handle_ || event.native() == nullptr) return;  // CPU work is complete when recorded
  cuda_backend::stream_wait_event(handle_->native, event.native());
}

namespace {

struct DefaultStreams {
  std::mutex mutex;
  std::map<int, Stream*> streams;  // by CUDA device index; never destroyed
};

DefaultStreams& default_streams() {
  static auto* d = new DefaultStreams;  // leaked: tensors may be freed during static destruction
  return *d;
}

// This thread's StreamGuards, innermost last.
thread_local std::vector<Stream> guarded;

}  // namespace

Stream default_stream(Device device) {
  if (device.is_cpu()) return Stream(device);
  DefaultStreams& d = default_streams();
  std::lock_guard lock(d.mutex);
  Stream*& slot = d.streams[device.index()];
  if (slot == nullptr) slot = new Stream(device);
  return *slot;
}

Stream current_stream(Device device) {
  if (device.is_cpu()) return Stream(device);
  for (auto it = guarded.rbegin(); it != guarded.rend(); ++it) {
    if (it->device() == device) return *it;
  }
  return default_stream(device);
}

StreamGuard::StreamGuard(const Stream& stream) : device_(stream.device()) {
  guarded.push_back(stream);
}

StreamGuard::~StreamGuard() {
  // Guards nest: this one is the innermost for its device.
  for (auto it = guarded.rbegin(); it != guarded.rend(); ++it) {
    if (it->device() == device_) {
      guarded.erase(std::next(it).base());
      return;
    }
  }
}

Event::Event(Device device) : device_(device) {
  if (device.is_cuda()) {
    require_available(device);
    handle_ = cuda_backend::event_create(device.index());
  }
}

Event::~Event() {
  if (handle_) cuda_backend::event_destroy(handle_);
}

Event::Event(Event&& other) noexcept
    : device_(other.device_),
      handle_(std::exchange(other.handle_, nullptr)),
      recorded_(other.recorded_),
      cpu_time_(other.cpu_time_) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (handle_) cuda_backend::event_destroy(handle_);
    device_ = other.device_;
    handle_ = std::exchange(other.handle_, nullptr);
    recorded_ = other.recorded_;
    cpu_time_ = other.cpu_time_;
  }
  return *this;
}

void Event::record(const Stream& stream) {
  EMBER_CHECK(stream.device() == device_, "Event on {} cannot be recorded on a stream of {}",
              device_.to_string(), stream.device().to_string());
  if (handle_) {
    cuda_backend::event_record(handle_, stream.native(), device_.index());
  } else {
    cpu_time_ = std::chrono::steady_clock::now();  // CPU work before this point is done
  }
  recorded_ = true;
}

bool Event::query() const {
  EMBER_CHECK(recorded_, "Event::query: the event was never recorded");
  return handle_ ? cuda_backend::event_query(handle_) : true;
}

void Event::synchronize() const {
  EMBER_CHECK(recorded_, "Event::synchronize: the event was never recorded");
  if (handle_) cuda_backend::event_synchronize(handle_);
}

float Event::elapsed_ms(const Event& start) const {
  EMBER_CHECK(recorded_ && start.recorded_, "Event::elapsed_ms: both events must be recorded");
  EMBER_CHECK(device_ == start.device_, "Event::elapsed_ms: events are on {} and {}",
              start.device_.to_string(), device_.to_string());
  if (handle_) return cuda_backend::event_elapsed_ms(start.handle_, handle_);
  return std::chrono::duration<float, std::milli>(cpu_time_ - start.cpu_time_).count();
}

}  // namespace ember
