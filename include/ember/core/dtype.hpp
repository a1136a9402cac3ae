// Element types of tensors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "ember/core/half.hpp"

namespace ember {

enum class DType : uint8_t { f32, f16, bf16, i32, i64, u8 };

constexpr size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::u8: return 1;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
  }
  return "?";
}

constexpr bool is_floating(DType dtype) {
  return dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16;
}

// Parses "f32", "f16", "bf16", "i32", "i64" or "u8"; throws ember::Error otherwise.
DType parse_dtype(std::string_view name);

// The DType of a C++ element type: dtype_of<float> == DType::f32.
template <class T>
struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::f32; };
template <> struct DTypeOf<half> { static constexpr DType value = DType::f16; };
template <> struct DTypeOf<bfloat16> { static constexpr DType value = DType::bf16; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::i32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::i64; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::u8; };
template <class T>
inline constexpr DType dtype_of = DTypeOf<T>::value;

// Calls f(T{}) with T the C++ type of `dtype`.
template <class F>
decltype(auto) visit_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: return f(float{});
    case DType::f16: return f(half{});
    case DType::bf16: return f(bfloat16{});
    case DType::i32: return f(int32_t{});
    case DType::i64: return f(int64_t{});
    case DType::u8: return f(uint8_t{});
  }
  return f(float{});
}

}  // namespace ember
