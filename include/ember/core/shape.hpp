// Shape: the extents of a contiguous row-major tensor, up to kMaxRank dimensions.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

namespace ember {

class Shape {
 public:
  static constexpr int kMaxRank = 6;

  Shape() = default;  // rank 0: a scalar with one element
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(std::span<const int64_t> dims);

  int rank() const { return rank_; }
  int64_t operator[](int axis) const;  // negative axes count from the end
  int64_t numel() const;
  std::span<const int64_t> dims() const { return {dims_.data(), static_cast<size_t>(rank_)}; }

  // Product of all dimensions after the first: the length of one row.
  int64_t row_numel() const;

  Shape with_dim0(int64_t n) const;  // the same shape with a new first dimension
  std::string to_string() const;     // "[2, 3]"

  friend bool operator==(const Shape& a, const Shape& b);

 private:
  std::array<int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

}  // namespace ember
