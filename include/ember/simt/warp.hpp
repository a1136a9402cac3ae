// Warps: the rendezvous primitive `warp_exchange` and the CUDA shuffles and
// votes built on it. A collective completes when every lane named in its mask
// has arrived with that same mask. Lanes that pass different masks wait in
// different collectives, so disjoint groups of lanes (two half-warps, say) can
// use collectives concurrently, as with independent thread scheduling; two
// pending collectives that each wait for lanes waiting in the other are a
// mismatch, and a lane that never comes is a deadlock: both are reported as an
// ember::Error instead of hanging.
#pragma once

#include <array>
#include <cstring>
#include <type_traits>

#include "ember/simt/context.hpp"

namespace ember::simt {

namespace detail {
// Copies the values of the lanes named in `mask` (in[lane] points to each) into
// the std::array<T, 32> at `out`; the other lanes get T{}.
using WarpCopyFn = void (*)(const void* const* in, void* out, unsigned mask);

template <class T>
void warp_copy(const void* const* in, void* out, unsigned mask) {
  auto& result = *static_cast<std::array<T, 32>*>(out);
  for (unsigned lane = 0; lane < 32; ++lane)
    result[lane] = (mask >> lane) & 1u ? *static_cast<const T*>(in[lane]) : T{};
}

// Blocks the calling lane until the collective completes (or throws).
void warp_rendezvous(const void* in, void* out, unsigned mask, const char* what, WarpCopyFn copy);
}  // namespace detail

// Every lane named in `mask` (which must include the caller's lane) calls this
// with its value and the same mask; each returns all 32 lanes' values (lanes not in the mask:
// value-initialized T). A lane named in the mask that exits or blocks elsewhere
// makes it throw an ember::Error naming kernel, block, warp, lanes.
template <class T>
std::array<T, 32> warp_exchange(const T& value, unsigned mask,
                                const char* what = "warp collective") {
  static_assert(std::is_copy_constructible_v<T> && std::is_default_constructible_v<T>);
  std::array<T, 32> out{};
  detail::warp_rendezvous(&value, &out, mask, what, &detail::warp_copy<T>);
  return out;
}

// threadIdx linear % 32
unsigned lane_id();

// The lanes of the caller's warp that exist and have not exited (__activemask).
unsigned active_mask();

}  // namespace ember::simt

// ---- CUDA warp intrinsics ---------------------------------------------------
// width: shuffles act inside groups of `width` lanes (a power of two <= 32).

template <class T>
inline T __shfl_sync(unsigned mask, T var, int src_lane, int width = 32) {
  const auto all = ember::simt::warp_exchange(var, mask, "__shfl_sync");
  const unsigned lane = ember::simt::lane_id();
  const unsigned base = lane & ~static_cast<unsigned>(width - 1);
  return all[base + (static_cast<unsigned>(src_lane) & static_cast<unsigned>(width - 1))];
}

template <class T>
inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32) {
  const auto all = ember::simt::warp_exchange(var, mask, "__shfl_up_sync");
  const unsigned lane = ember::simt::lane_id();
  const unsigned in_group = lane & static_cast<unsigned>(width - 1);
  return in_group >= delta ? all[lane - delta] : var;
}

template <class T>
inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32) {
  const auto all = ember::simt::warp_exchange(var, mask, "__shfl_down_sync");
  const unsigned lane = ember::simt::lane_id();
  const unsigned in_group = lane & static_cast<unsigned>(width - 1);
  return in_group + delta < static_cast<unsigned>(width) ? all[lane + delta] : var;
}

template <class T>
inline T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32) {
  const auto all = ember::simt::warp_exchange(var, mask, "__shfl_xor_sync");
  const unsigned lane = ember::simt::lane_id();
  const unsigned src = lane ^ static_cast<unsigned>(lane_mask);
  // CUDA: a source outside the caller's group of `width` lanes returns the caller's value.
  const unsigned group = ~static_cast<unsigned>(width - 1);
  return (src & group) == (lane & group) ? all[src] : var;
}

inline unsigned __ballot_sync(unsigned mask, int predicate) {
  const auto all = ember::simt::warp_exchange(predicate != 0, mask, "__ballot_sync");
  unsigned bits = 0;
  for (unsigned lane = 0; lane < 32; ++lane) bits |= all[lane] ? 1u << lane : 0u;
  return bits & mask;
}

inline int __any_sync(unsigned mask, int predicate) {
  const auto all = ember::simt::warp_exchange(predicate != 0, mask, "__any_sync");
  for (unsigned lane = 0; lane < 32; ++lane)
    if (((mask >> lane) & 1u) && all[lane]) return 1;
  return 0;
}

inline int __all_sync(unsigned mask, int predicate) {
  const auto all = ember::simt::warp_exchange(predicate != 0, mask, "__all_sync");
  for (unsigned lane = 0; lane < 32; ++lane)
    if (((mask >> lane) & 1u) && !all[lane]) return 0;
  return 1;
}

inline unsigned __activemask() {
  return ember::simt::active_mask();
}

inline void __syncwarp(unsigned mask = 0xffffffffu) {
  (void)ember::simt::warp_exchange(static_cast<unsigned char>(0), mask, "__syncwarp");
}
