// ops::map's argument checks and the small non-template helpers of map.hpp.
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <string_view>

#include "ember/core/enum_name.hpp"
#include "ember/ops/check.hpp"
#include "ember/ops/map.hpp"

namespace ember::ops::detail {
namespace {

bool is_map_dtype(DType dtype) {
  return is_floating(dtype) || dtype == DType::u8;
}

void check_map_dtype(std::string_view op, std::string_view role, const TensorView& t) {
  EMBER_CHECK(is_map_dtype(t.dtype), "{}: {} {} must be f32, f16, bf16 or u8", op, role,
              t.describe());
}

const char* kind_name(MapKind kind) {
  static constexpr const char* kNames[] = {"input", "row vector", "column vector", "input"};
  static_assert(std::size(kNames) == static_cast<size_t>(MapKind::scalar) + 1);
  return enum_name(kind, kNames);
}

// An operand's name in messages ("output 1", "row vector 2"), made without allocating: the
// checks run on every map call.
class OperandName {
 public:
  OperandName(std::string_view kind, size_t index) {
    const size_t n = std::min(kind.size(), sizeof(text_) - 22);
    std::memcpy(text_, kind.data(), n);
    text_[n] = ' ';
    const char* end = std::to_chars(text_ + n + 1, text_ + sizeof(text_), index).ptr;
    view = std::string_view(text_, static_cast<size_t>(end - text_));
  }
  OperandName(const OperandName&) = delete;
  OperandName& operator=(const OperandName&) = delete;

  std::string_view view;

 private:
  char text_[40];
};

size_t load_bytes(DType dtype) {  // the kernels' chunk load granularity
  return dtype == DType::u8 ? 8 : 16;
}

bool aligned(const TensorView& t) {
  return reinterpret_cast<std::uintptr_t>(t.data) % load_bytes(t.dtype) == 0;
}

}  // namespace

int64_t check_map(std::string_view op, const Stream& stream, const Shape& shape,
                  const TensorView* outs, size_t n_outs, const MapInputSpec* ins, size_t n_ins) {
  const int64_t cols = shape.rank() >= 1 ? shape[-1] : 1;
  int64_t rows = 1;
  for (int d = 0; d + 1 < shape.rank(); ++d) rows *= shape[d];
  for (size_t o = 0; o < n_outs; ++o) {
    const TensorView& out = outs[o];
    mark_written(out);
    const OperandName name("output", o);
    check_devices(op, stream, {{name.view, out}});
    check_map_dtype(op, "output", out);
    EMBER_CHECK(out.shape == shape, "{}: outputs differ in shape: {} vs {}", op, out.describe(),
                outs[0].describe());
    for (size_t p = 0; p < o; ++p) {
      check_disjoint(op, {name.view, out}, {OperandName("output", p).view, outs[p]});
    }
  }
  for (size_t i = 0; i < n_ins; ++i) {
    const MapInputSpec& in = ins[i];
    if (in.kind == MapKind::scalar) continue;
    const TensorView& t = *in.view;
    const OperandName name(kind_name(in.kind), i);
    check_devices(op, stream, {{name.view, t}});
    check_map_dtype(op, kind_name(in.kind), t);
    switch (in.kind) {
      case MapKind::tensor:
        EMBER_CHECK(t.shape == shape, "{}: input {} does not have the shape {}", op, t.describe(),
                    shape.to_string());
        break;
      case MapKind::row:
        EMBER_CHECK(t.rank() == 1 && shape.rank() >= 1 && t.shape[0] == cols,
                    "{}: row vector {} must be [{}], the last dimension of {} (use ops::col for "
                    "one value per row)",
                    op, t.describe(), cols, shape.to_string());
        break;
      default:
        EMBER_CHECK(t.rank() == 1 && shape.rank() >= 1 && t.shape[0] == rows,
                    "{}: column vector {} must be [{}], one value per row of {}", op, t.describe(),
                    rows, shape.to_string());
    }
    for (size_t o = 0; o < n_outs; ++o) {
      check_overlap(op, {OperandName("output", o).view, outs[o]}, {name.view, t});
    }
  }
  return cols;
}

bool map_vector_ok(const TensorView* outs, size_t n_outs, const MapInputSpec* ins, size_t n_ins,
                   int64_t cols) {
  for (size_t o = 0; o < n_outs; ++o) {
    if (!aligned(outs[o])) return false;
  }
  for (size_t i = 0; i < n_ins; ++i) {
    const MapInputSpec& in = ins[i];
    if (in.kind == MapKind::row || in.kind == MapKind::col) {
      if (cols % 8 != 0) return false;  // a chunk of 8 must stay within one row
    }
    if ((in.kind == MapKind::tensor || in.kind == MapKind::row) && !aligned(*in.view)) {
      return false;
    }
  }
  return true;
}

const Shape& map_reduce_shape(std::string_view op, const MapInputSpec* ins, size_t n_ins) {
  for (size_t i = 0; i < n_ins; ++i) {
    if (ins[i].kind == MapKind::tensor) return ins[i].view->shape;
  }
  EMBER_THROW(
      "{}: needs at least one tensor input (not only ops::row, ops::col or numbers) "
      "to give the shape to reduce over",
      op);
}

void check_map_reduce_out(std::string_view op, const Stream& stream, const TensorView& out) {
  mark_written(out);
  check_devices(op, stream, {{"out", out}});
  check_floating(op, "out", out);
  EMBER_CHECK(out.numel() == 1, "{}: out must be one element, not {}", op, out.describe());
}

void map_store_scalar(const TensorView& out, float value) {
  convert_host(out.data, out.dtype, &value, DType::f32, 1);
}

void map_needs_kernel_compiler(std::string_view op) {
  EMBER_THROW(
      "{}: a CUDA stream needs the kernel instantiated in the calling translation unit: "
      "call it from a .cu file compiled by nvcc (or run on a CPU stream)",
      op);
}

}  // namespace ember::ops::detail
