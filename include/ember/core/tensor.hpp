// TensorView (non-owning) and Tensor (owning): contiguous row-major arrays
// with a dtype, a shape and a device.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ember/core/allocator.hpp"
#include "ember/core/device.hpp"
#include "ember/core/dtype.hpp"
#include "ember/core/error.hpp"
#include "ember/core/shape.hpp"

namespace ember {

// A non-owning view of contiguous memory. Ops take views, so memory the user
// owns works as well as a Tensor's.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::f32;
  Shape shape;
  Device device;

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
  int64_t numel() const { return view_.numel(); }
  size_t nbytes() const { return view_.nbytes(); }
  int rank() const { return view_.rank(); }
  void* data() const { return view_.data; }
  template <class T>
  T* data() const {
    return view_.as<T>();
  }

  const TensorView& view() const { return view_; }
  operator const TensorView&() const { return view_; }

  Tensor slice(int64_t begin, int64_t end) const;  // shares storage
  Tensor reshape(const Shape& shape) const;        // shares storage

  Tensor to(Device device) const;  // a copy on `device` (or *this when already there)
  Tensor to(DType dtype) const;    // a converted copy (or *this when already that dtype)
  Tensor clone() const;

  Tensor& fill_(double value);              // converts value to the dtype
  Tensor& copy_(const TensorView& source);  // same dtype and element count; any devices

  // Seeded, counter-based initialization: element i depends only on (seed, i).
  // uniform_ draws from [low, high); rounding to the dtype can give high itself.
  Tensor& uniform_(uint64_t seed, double low, double high);
  Tensor& normal_(uint64_t seed, double mean, double stddev);

  // Copies to the host and returns the elements; T must match the dtype.
  template <class T>
  std::vector<T> to_vector() const;
  double item() const;  // the value of a one-element tensor, as double

 private:
  std::shared_ptr<void> storage_;
  TensorView view_;
};

// Copies bytes between any two devices (host <-> host, host <-> cuda, cuda <-> cuda).
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);

// Converts n elements between dtypes on the host (float types round to nearest even).
void convert_host(void* dst, DType dst_dtype, const void* src, DType src_dtype, int64_t n);

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape, Device device) {
  EMBER_CHECK(static_cast<int64_t>(values.size()) == shape.numel(),
              "Tensor::from_vector: {} values do not fill shape {} ({} elements)", values.size(),
              shape.to_string(), shape.numel());
  Tensor t = empty(shape, dtype_of<T>, device);
  copy_bytes(t.data(), device, values.data(), Device::cpu(), t.nbytes());
  return t;
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  EMBER_CHECK(defined(), "Tensor::to_vector: the tensor is undefined");
  EMBER_CHECK(dtype_of<T> == dtype(), "Tensor::to_vector: tensor holds {}, not {}",
              dtype_name(dtype()), dtype_name(dtype_of<T>));
  std::vector<T> out(static_cast<size_t>(numel()));
  copy_bytes(out.data(), Device::cpu(), data(), device(), nbytes());
  return out;
}

}  // namespace ember
