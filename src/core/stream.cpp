#include "ember/core/stream.hpp"

#include <utility>

#include "cuda_backend.hpp"
#include "ember/core/error.hpp"

namespace ember {

Stream::Stream(Device device) : device_(device) {
  if (device.is_cuda()) {
    require_available(device);
    handle_ = cuda_backend::stream_create(device.index());
  }
}

Stream::~Stream() {
  if (handle_) cuda_backend::stream_destroy(handle_);
}

Stream::Stream(Stream&& other) noexcept
    : device_(other.device_), handle_(std::exchange(other.handle_, nullptr)) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (handle_) cuda_backend::stream_destroy(handle_);
    device_ = other.device_;
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

void Stream::synchronize() const {
  if (handle_) cuda_backend::stream_synchronize(handle_);
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
    cuda_backend::event_record(handle_, stream.native());
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
