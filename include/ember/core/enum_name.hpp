// enum_name: an enumerator's name from a table of names, for the `*_name` functions of enums.
//
//   const char* reduce_op_name(ReduceOp op) {
//     static constexpr const char* kNames[] = {"sum", "avg", "max"};
//     static_assert(std::size(kNames) == static_cast<size_t>(ReduceOp::max) + 1);
//     return enum_name(op, kNames);
//   }
#pragma once

#include <cstddef>
#include <type_traits>

namespace ember {

// The name of an enumerator whose values run 0, 1, ... in declaration order, from a table in
// that order; "?" for a value outside it.
template <class Enum, std::size_t N>
constexpr const char* enum_name(Enum value, const char* const (&names)[N]) {
  static_assert(std::is_enum_v<Enum>);
  const auto index = static_cast<std::size_t>(value);
  return index < N ? names[index] : "?";
}

}  // namespace ember
