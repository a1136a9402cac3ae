#include "ember/core/tensor.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <vector>

#include "cuda_backend.hpp"
#include "ember/core/philox.hpp"

namespace ember {

void encode_scalar(double value, DType dtype, void* out);  // convert.cpp
double decode_scalar(const void* in, DType dtype);         // convert.cpp

TensorView TensorView::slice(int64_t begin, int64_t end) const {
  EMBER_CHECK(rank() >= 1, "slice: {} has no first dimension", describe());
  EMBER_CHECK(0 <= begin && begin <= end && end <= shape[0],
              "slice: rows [{}, {}) are out of range for {}", begin, end, describe());
  TensorView v = *this;
  v.shape = shape.with_dim0(end - begin);
  v.data =
      static_cast<char*>(data) + static_cast<size_t>(begin * shape.row_numel()) * dtype_size(dtype);
  return v;
}

TensorView TensorView::reshape(const Shape& new_shape) const {
  EMBER_CHECK(new_shape.numel() == numel(), "reshape: {} cannot become {} ({} vs {} elements)",
              describe(), new_shape.to_string(), numel(), new_shape.numel());
  TensorView v = *this;
  v.shape = new_shape;
  return v;
}

std::string TensorView::describe() const {
  return fmt::format("{}{} on {}", dtype_name(dtype), shape.to_string(), device.to_string());
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes,
                const Stream& stream) {
  if (bytes == 0 || dst == src) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memmove(dst, src, bytes);
    return;
  }
  if (dst_device.is_cpu()) stream.refuse_capture("a copy to the host (item, to_vector, to)");
  if (src_device.is_cpu()) stream.refuse_capture("a copy from host memory (to, copy_)");
  EMBER_CHECK(stream.device() == dst_device || stream.device() == src_device,
              "copy_bytes: a copy from {} to {} cannot run on a stream of {}",
              src_device.to_string(), dst_device.to_string(), stream.device().to_string());
  cuda_backend::memcpy_async(dst, dst_device.is_cuda(), src, src_device.is_cuda(), bytes,
                             stream.native());
}

// The storage of a Tensor: memory from its device's allocator, for work on `stream`.
namespace {
// Versions are unique across storages, so that a version names one state of one storage.
uint64_t next_version() {
  static std::atomic<uint64_t> counter{1};
  return counter.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

void mark_written(const TensorView& view) {
  if (view.version != nullptr) view.version->store(next_version(), std::memory_order_relaxed);
}

struct Tensor::Storage {
  void* data = nullptr;
  size_t bytes = 0;
  std::shared_ptr<Allocator> allocator;
  Stream stream;
  // Streams recorded with record_stream: kept alive until the allocator has recorded its
  // events on them in deallocate (a destroyed stream cannot be recorded on).
  std::vector<Stream> users;
  std::atomic<uint64_t> version;

  Storage(std::shared_ptr<Allocator> a, size_t n, Stream s)
      : bytes(n), allocator(std::move(a)), stream(std::move(s)), version(next_version()) {
    data = allocator->allocate(bytes, stream.id());
  }
  ~Storage() { allocator->deallocate(data, bytes, stream.id()); }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
};

namespace {
size_t checked_bytes(const Shape& shape, DType dtype) {
  const auto n = static_cast<uint64_t>(shape.numel());
  const uint64_t elem = dtype_size(dtype);
  EMBER_CHECK(n <= SIZE_MAX / elem, "Tensor::empty: {} elements of {} do not fit in memory",
              shape.numel(), dtype_name(dtype));
  return static_cast<size_t>(n * elem);
}
}  // namespace

Tensor Tensor::empty(const Shape& shape, DType dtype, const Stream& stream) {
  std::shared_ptr<Allocator> allocator = allocator_for(stream.device());  // checks availability
  Tensor t;
  t.storage_ = std::make_shared<Storage>(std::move(allocator), checked_bytes(shape, dtype), stream);
  t.view_ = TensorView{t.storage_->data, dtype, shape, stream.device(), &t.storage_->version};
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, const Stream& stream) {
  return full(shape, 0.0, dtype, stream);
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, const Stream& stream) {
  Tensor t = empty(shape, dtype, stream);
  t.fill_(value);
  return t;
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  if (device.is_cuda()) require_available(device);
  return empty(shape, dtype, current_stream(device));
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  return full(shape, 0.0, dtype, device);
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(value);
  return t;
}

uint64_t Tensor::version() const {
  EMBER_CHECK(defined(), "Tensor::version: the tensor is undefined");
  return storage_->version.load(std::memory_order_relaxed);
}

const Stream& Tensor::stream() const {
  EMBER_CHECK(defined(), "Tensor::stream: the tensor is undefined");
  return storage_->stream;
}

void Tensor::record_stream(const Stream& stream) const {
  EMBER_CHECK(defined(), "Tensor::record_stream: the tensor is undefined");
  EMBER_CHECK(stream.device() == device(),
              "Tensor::record_stream: {} cannot be used by a stream of {}", view_.describe(),
              stream.device().to_string());
  if (stream == storage_->stream) return;
  storage_->allocator->record_stream(storage_->data, stream.id());
  auto& users = storage_->users;
  if (std::find(users.begin(), users.end(), stream) == users.end()) users.push_back(stream);
}

Tensor Tensor::slice(int64_t begin, int64_t end) const {
  Tensor t = *this;
  t.view_ = view_.slice(begin, end);
  return t;
}

Tensor Tensor::reshape(const Shape& shape) const {
  Tensor t = *this;
  t.view_ = view_.reshape(shape);
  return t;
}

Tensor Tensor::to(Device device) const {
  EMBER_CHECK(defined(), "Tensor::to: the tensor is undefined");
  if (device == this->device()) return *this;
  return to(current_stream(device));
}

Tensor Tensor::to(const Stream& stream) const {
  EMBER_CHECK(defined(), "Tensor::to: the tensor is undefined");
  if (stream.device() == device()) return *this;
  Tensor t = empty(shape(), dtype(), stream);
  t.copy_(*this);
  return t;
}

Tensor Tensor::to(DType dtype) const {
  EMBER_CHECK(defined(), "Tensor::to: the tensor is undefined");
  if (dtype == this->dtype()) return *this;
  const Tensor host = to(Device::cpu());
  Tensor converted = empty(shape(), dtype, Device::cpu());
  convert_host(converted.data(), dtype, host.data(), host.dtype(), numel());
  return converted.to(stream());
}

Tensor Tensor::clone() const {
  EMBER_CHECK(defined(), "Tensor::clone: the tensor is undefined");
  Tensor t = empty(shape(), dtype(), stream());
  t.copy_(*this);
  return t;
}

Tensor& Tensor::fill_(double value) {
  EMBER_CHECK(defined(), "Tensor::fill_: the tensor is undefined");
  alignas(8) unsigned char pattern[8];
  encode_scalar(value, dtype(), pattern);
  mark_written(view_);
  const size_t elem = dtype_size(dtype());
  if (device().is_cuda()) {
    cuda_backend::fill(data(), pattern, elem, numel(), device().index(), stream().native());
    return *this;
  }
  char* out = static_cast<char*>(data());
  const int64_t n = numel();
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) std::memcpy(out + static_cast<size_t>(i) * elem, pattern, elem);
  return *this;
}

namespace {
void check_copy(const TensorView& dst, const TensorView& source) {
  EMBER_CHECK(source.data != nullptr || source.numel() == 0,
              "Tensor::copy_: the source {} has no data", source.describe());
  EMBER_CHECK(source.dtype == dst.dtype && source.numel() == dst.numel(),
              "Tensor::copy_: cannot copy {} into {} (dtype and element count must match; "
              "use to(dtype) to convert)",
              source.describe(), dst.describe());
}
}  // namespace

Tensor& Tensor::copy_(const Tensor& source) {
  EMBER_CHECK(defined(), "Tensor::copy_: the destination is undefined");
  EMBER_CHECK(source.defined(), "Tensor::copy_: the source is undefined");
  check_copy(view_, source.view());
  mark_written(view_);
  if (source.device().is_cuda() && device().is_cpu()) {
    // To the host: on the source's stream, then wait for it.
    copy_bytes(data(), device(), source.data(), source.device(), nbytes(), source.stream());
    source.stream().synchronize();
    return *this;
  }
  if (source.device().is_cuda() && device().is_cuda()) {
    // The copy runs on this tensor's stream: after the source's pending work there.
    const Stream& s = stream();
    if (!(source.stream() == s)) {
      if (source.device() == device()) {
        s.wait(source.stream());
        source.record_stream(s);
      } else {
        source.stream().synchronize();  // another device: its stream cannot be waited for here
      }
    }
  }
  copy_bytes(data(), device(), source.data(), source.device(), nbytes(), stream());
  if (source.device().is_cuda() && source.device() != device()) {
    stream().synchronize();  // the source's memory may be reused on its own device's stream
  }
  return *this;
}

Tensor& Tensor::copy_(const TensorView& source) {
  EMBER_CHECK(defined(), "Tensor::copy_: the destination is undefined");
  check_copy(view_, source);
  mark_written(view_);
  if (source.device.is_cuda() && device().is_cpu()) {
    const Stream s = current_stream(source.device);
    copy_bytes(data(), device(), source.data, source.device, nbytes(), s);
    s.synchronize();
    return *this;
  }
  copy_bytes(data(), device(), source.data, source.device, nbytes(), stream());
  return *this;
}

namespace {
// Writes f(i) (a double) into every element i, on the host, then moves it to the device.
template <class F>
void generate(Tensor& t, const char* what, F f) {
  EMBER_CHECK(is_floating(t.dtype()), "Tensor::{}: needs a floating dtype, not {}", what,
              dtype_name(t.dtype()));
  Tensor host = Tensor::empty(t.shape(), DType::f32);
  float* out = host.data<float>();
  const int64_t n = t.numel();
#pragma omp parallel for schedule(static) if (n > 16384)
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(f(static_cast<uint64_t>(i)));
  t.copy_(host.to(t.dtype()));
}
}  // namespace

Tensor& Tensor::uniform_(uint64_t seed, double low, double high) {
  EMBER_CHECK(low <= high, "Tensor::uniform_: low {} is above high {}", low, high);
  generate(*this, "uniform_", [=](uint64_t i) {
    const uint32_t bits = philox4x32(seed, i).v[0];
    return low + (high - low) * (static_cast<double>(bits) / 4294967296.0);
  });
  return *this;
}

Tensor& Tensor::normal_(uint64_t seed, double mean, double stddev) {
  EMBER_CHECK(stddev >= 0, "Tensor::normal_: stddev {} is negative", stddev);
  generate(*this, "normal_", [=](uint64_t i) {
    const Philox4x32 r = philox4x32(seed, i);
    const double u1 = (static_cast<double>(r.v[0]) + 1.0) / 4294967296.0;  // (0, 1]
    const double u2 = static_cast<double>(r.v[1]) / 4294967296.0;
    const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
    return mean + stddev * z;
  });
  return *this;
}

double Tensor::item() const {
  EMBER_CHECK(defined(), "Tensor::item: the tensor is undefined");
  EMBER_CHECK(numel() == 1, "Tensor::item: {} does not have exactly one element", view_.describe());
  alignas(8) unsigned char bytes[8];
  copy_bytes(bytes, Device::cpu(), data(), device(), dtype_size(dtype()), stream());
  stream().synchronize();
  return decode_scalar(bytes, dtype());
}

}  // namespace ember
