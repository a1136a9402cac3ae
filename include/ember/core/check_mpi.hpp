// Status check for MPI calls. Include only where MPI is available.
#pragma once

#include <mpi.h>

#include <string>

#include "ember/core/error.hpp"

namespace ember::detail {
inline std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "unknown MPI error";
  return std::string(text, static_cast<size_t>(length));
}
}  // namespace ember::detail

#define EMBER_MPI_CHECK(expr)                                                                   \
  do {                                                                                          \
    const int ember_status_ = (expr);                                                           \
    if (ember_status_ != MPI_SUCCESS) [[unlikely]]                                              \
      EMBER_THROW("MPI call '{}' failed: {} (code {})", #expr,                                  \
                  ::ember::detail::mpi_error_string(ember_status_), ember_status_);             \
  } while (0)
