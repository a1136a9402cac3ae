// Status check for NCCL calls. Include only where NCCL is available.
#pragma once

#include <nccl.h>

#include "ember/core/error.hpp"

#define EMBER_NCCL_CHECK(expr)                                                              \
  do {                                                                                      \
    const ncclResult_t ember_status_ = (expr);                                              \
    if (ember_status_ != ncclSuccess) [[unlikely]]                                          \
      EMBER_THROW("NCCL call '{}' failed: {} (code {})", #expr,                             \
                  ncclGetErrorString(ember_status_), static_cast<int>(ember_status_));      \
  } while (0)
