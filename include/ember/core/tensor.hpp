// TensorView (non-owning) and Tensor (owning): contiguous row-major arrays
// with a dtype, a shape and a device.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ember/core/allocator.hpp"
#include "ember/core/device.hpp"
#include "ember/core/dtype.hpp"
#include "ember/core/error.hpp"
#include "ember/core/shape.hpp"
#include "ember/core/stream.hpp"

namespace ember {

// A non-owning view of contiguous memory. Ops take views, so memory the user
// owns works as well as a Tensor's.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::f32;
  Shape shape;
  Device device;
  // The write version of the Tensor storage this view is of (null for memory the user owns):
  // see mark_written.
  std::atomic<uint64_t>* version = nullptr;

  int64_t numel() const { return shape.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  int rank() const { return shape.rank(); }

  // Typed pointer; throws when T does not match the dtype.
  template <class T>
  T* as() const {
    EMBER_CHECK(dtype_of<T> == dtype, "tensor holds {} elements, not {}", dtype_name(dtype),
                dtype_name(dtype_of<T>));
    return static_cast<T*>(data);
  }

  TensorView slice(int64_t begin, int64_t end) const;  // rows [begin, end) of the first dim
  TensorView reshape(const Shape& shape) const;        // same number of elements
  std::string describe() const;                        // "f32[2, 3] on cpu"
};

class Tensor {
 public:
  Tensor() = default;  // undefined: holds nothing

  // Creation on a stream: the storage is allocated for work on `stream` (on its
  // device), and the fill or copy that initializes it is queued there.
  static Tensor empty(const Shape& shape, DType dtype, const Stream& stream);
  static Tensor zeros(const Shape& shape, DType dtype, const Stream& stream);
  static Tensor full(const Shape& shape, double value, DType dtype, const Stream& stream);
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape, const Stream& stream);
  // The same on `device`'s current stream (current_stream(device)).
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = {});
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = {});
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32,
                     Device device = {});
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape, Device device = {});

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return view_.dtype; }
  const Shape& shape() const { return view_.shape; }
  Device device() const { return view_.device; }
  int64_t numel() const { return defined() ? view_.numel() : 0; }  // undefined: 0
  size_t nbytes() const { return defined() ? view_.nbytes() : 0; }
  int rank() const { return view_.rank(); }
  void* data() const { return view_.data; }
  template <class T>
  T* data() const {
    return view_.as<T>();
  }

  const TensorView& view() const { return view_; }
  operator const TensorView&() const { return view_; }

  // The stream the storage was allocated on: copies, fills and host reads run there.
  const Stream& stream() const;
  // The storage is also used by work queued on `stream`: when the last handle
  // goes, its memory is reused only after that work too has finished.
  void record_stream(const Stream& stream) const;

  Tensor slice(int64_t begin, int64_t end) const;  // shares storage
  Tensor reshape(const Shape& shape) const;        // shares storage

  // A copy on `device` (or *this when already there), allocated on the device's
  // current stream. From a device to the host it waits for this tensor's stream.
  Tensor to(Device device) const;
  // A copy allocated and written on `stream` (or *this when already on its device).
  Tensor to(const Stream& stream) const;
  Tensor to(DType dtype) const;  // a converted copy on the same stream (or *this)
  Tensor clone() const;          // on the same stream

  // Both queue their work on this tensor's stream and do not wait.
  Tensor& fill_(double value);  // converts value to the dtype
  // Same dtype and element count; any devices. A source Tensor on another
  // stream is waited for (on the device) and recorded. A TensorView carries no
  // stream: its memory is the caller's to order; a device view copied to the
  // host is read on its device's current stream.
  Tensor& copy_(const Tensor& source);
  Tensor& copy_(const TensorView& source);

  // Seeded, counter-based initialization: element i depends only on (seed, i).
  // uniform_ draws from [low, high); rounding to the dtype can give high itself.
  Tensor& uniform_(uint64_t seed, double low, double high);
  Tensor& normal_(uint64_t seed, double mean, double stddev);

  // The storage's write version: a number no other storage has had, replaced by a new one
  // whenever ember queues a write to the storage (mark_written). Equal versions mean equal
  // contents; Parameter::compute_copy relies on it.
  uint64_t version() const;

  // Copies to the host, waiting for this tensor's stream only.
  template <class T>
  std::vector<T> to_vector() const;
  double item() const;  // the value of a one-element tensor, as double

 private:
  struct Storage;
  std::shared_ptr<Storage> storage_;
  TensorView view_;
};

// Records that `view`'s memory is written: its Tensor storage (if any) gets a new version. Every
// ember op calls it for its outputs when it queues them, as do Tensor's own writers and the
// optimizers; code that writes a tensor's memory by its raw pointer calls it too.
void mark_written(const TensorView& view);

// Queues a copy of `bytes` between any two devices on `stream` (host <-> host
// runs at once). The caller orders it with other streams and, to read a host
// destination, synchronizes `stream`.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes,
                const Stream& stream);

// Converts n elements between dtypes on the host (float types round to nearest even).
void convert_host(void* dst, DType dst_dtype, const void* src, DType src_dtype, int64_t n);

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape, const Stream& stream) {
  EMBER_CHECK(static_cast<int64_t>(values.size()) == shape.numel(),
              "Tensor::from_vector: {} values do not fill shape {} ({} elements)", values.size(),
              shape.to_string(), shape.numel());
  Tensor t = empty(shape, dtype_of<T>, stream);
  // Pageable host memory: the runtime has taken its copy when the call returns.
  copy_bytes(t.data(), t.device(), values.data(), Device::cpu(), t.nbytes(), stream);
  return t;
}

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape, Device device) {
  return from_vector(values, shape, current_stream(device));
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  EMBER_CHECK(defined(), "Tensor::to_vector: the tensor is undefined");
  EMBER_CHECK(dtype_of<T> == dtype(), "Tensor::to_vector: tensor holds {}, not {}",
              dtype_name(dtype()), dtype_name(dtype_of<T>));
  std::vector<T> out(static_cast<size_t>(numel()));
  copy_bytes(out.data(), Device::cpu(), data(), device(), nbytes(), stream());
  stream().synchronize();
  return out;
}

}  // namespace ember
