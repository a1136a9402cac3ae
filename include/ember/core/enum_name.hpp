// enum_name: an enumerator's name from a table of names, for the `*_name` functions of enums
// (enum_entry: any value from such a table).
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

// The entry for an enumerator whose values run 0, 1, ... in declaration order, from a table in
// that order; `otherwise` for a value outside it.
template <class Enum, class T, std::size_t N>
constexpr T enum_entry(Enum value, const T (&table)[N], T otherwise) {
  static_assert(std::is_enum_v<Enum>);
  const auto index = static_cast<std::size_t>(value);
  return index < N ? table[index] : otherwise;
}

// The name of an enumerator, from a table of names in declaration order; "?" for a value
// outside it.
template <class Enum, std::size_t N>
constexpr const char* enum_name(Enum value, const char* const (&names)[N]) {
  return enum_entry<Enum, const char*>(value, names, "?");
}

}  // namespace ember
