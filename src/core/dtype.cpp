#include "ember/core/dtype.hpp"

#include "ember/core/error.hpp"

namespace ember {

DType parse_dtype(std::string_view name) {
  for (DType d : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8}) {
    if (name == dtype_name(d)) return d;
  }
  EMBER_THROW("unknown dtype '{}': expected one of f32, f16, bf16, i32, i64, u8", name);
}

}  // namespace ember
