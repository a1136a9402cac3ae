#include "ember/core/shape.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ember/core/error.hpp"

namespace ember {

Shape::Shape(std::initializer_list<int64_t> dims)
    : Shape(std::span<const int64_t>(dims.begin(), dims.size())) {}

Shape::Shape(std::span<const int64_t> dims) {
  EMBER_CHECK(dims.size() <= kMaxRank, "Shape: rank {} exceeds the maximum of {}", dims.size(),
              kMaxRank);
  int64_t product = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    EMBER_CHECK(dims[i] >= 0, "Shape: dimension {} is negative ({})", i, dims[i]);
    if (dims[i] != 0 && product != 0) {
      EMBER_CHECK(!__builtin_mul_overflow(product, dims[i], &product),
                  "Shape: the element count of these dimensions overflows 64 bits");
    } else {
      product = 0;
    }
    dims_[i] = dims[i];
  }
  rank_ = static_cast<int>(dims.size());
}

int64_t Shape::operator[](int axis) const {
  const int resolved = axis < 0 ? axis + rank_ : axis;
  EMBER_CHECK(resolved >= 0 && resolved < rank_, "Shape {}: axis {} is out of range", to_string(),
              axis);
  return dims_[static_cast<size_t>(resolved)];
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[static_cast<size_t>(i)];
  return n;
}

int64_t Shape::row_numel() const {
  int64_t n = 1;
  for (int i = 1; i < rank_; ++i) n *= dims_[static_cast<size_t>(i)];
  return n;
}

Shape Shape::with_dim0(int64_t n) const {
  EMBER_CHECK(rank_ >= 1, "Shape: a scalar has no first dimension");
  Shape s = *this;
  EMBER_CHECK(n >= 0, "Shape: dimension 0 is negative ({})", n);
  s.dims_[0] = n;
  return s;
}

std::string Shape::to_string() const {
  return fmt::format("[{}]", fmt::join(dims(), ", "));
}

bool operator==(const Shape& a, const Shape& b) {
  if (a.rank_ != b.rank_) return false;
  for (int i = 0; i < a.rank_; ++i) {
    if (a.dims_[static_cast<size_t>(i)] != b.dims_[static_cast<size_t>(i)]) return false;
  }
  return true;
}

}  // namespace ember
