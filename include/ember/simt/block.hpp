// Block barriers: __syncthreads and its counting/and/or forms. Each call site is
// identified by std::source_location, so that two different barriers are told apart.
#pragma once

#include <source_location>

#include "ember/simt/context.hpp"

namespace ember::simt {
// Waits until every thread of the block reaches the same barrier; returns how
// many threads passed a non-zero predicate.
int block_barrier(int predicate, const char* what, std::source_location where);
}  // namespace ember::simt

inline void __syncthreads(std::source_location where = std::source_location::current()) {
  (void)ember::simt::block_barrier(0, "__syncthreads", where);
}
inline int __syncthreads_count(int predicate,
                               std::source_location where = std::source_location::current()) {
  return ember::simt::block_barrier(predicate, "__syncthreads_count", where);
}
inline int __syncthreads_and(int predicate,
                             std::source_location where = std::source_location::current()) {
  const int passed = ember::simt::block_barrier(predicate, "__syncthreads_and", where);
  const dim3& dim = ember::simt::current_thread().block_dim;
  return passed == static_cast<int>(dim.x * dim.y * dim.z) ? 1 : 0;
}
inline int __syncthreads_or(int predicate,
                            std::source_location where = std::source_location::current()) {
  return ember::simt::block_barrier(predicate, "__syncthreads_or", where) != 0 ? 1 : 0;
}
