// A check shared by the virtual upstreams' tests (host, simulated, emulated CUDA).
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>

namespace ember::testing {

// unmap is noexcept: a range that is not all mapped pages of one reservation aborts, however it
// is wrong (its end wrapping past the top of the address space, or running from one reservation
// into the next, adjacent or not), and changes no counter before that. The three virtual
// upstreams share these checks (detail::Reservations).
template <class Upstream>
inline void expect_unmap_misuse_aborts(Upstream& vm) {
  const size_t page = vm.page_size();
  void* lo = vm.reserve(4 * page);
  void* hi = vm.reserve(4 * page);
  ASSERT_TRUE(vm.map(lo, 4 * page));
  ASSERT_TRUE(vm.map(hi, 4 * page));
  const auto before = vm.counters();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // The end wraps: SIZE_MAX - page + 1 bytes from a page-aligned address.
  EXPECT_DEATH(vm.unmap(lo, SIZE_MAX - page + 1), "covers pages that are not mapped");
  // The last page of one reservation and the first of the other: both mapped, but two ranges.
  EXPECT_DEATH(vm.unmap(static_cast<unsigned char*>(lo) + 3 * page, 2 * page),
               "covers pages that are not mapped");
  EXPECT_DEATH(vm.unmap(static_cast<unsigned char*>(hi) + 3 * page, 2 * page),
               "covers pages that are not mapped");
  vm.unmap(lo, 0);  // nothing: not counted
  const auto after = vm.counters();
  EXPECT_EQ(after.unmap_calls, before.unmap_calls);
  EXPECT_EQ(after.mapped_bytes, 8 * page);
  vm.unmap(lo, 4 * page);
  EXPECT_EQ(vm.counters().mapped_bytes, 4 * page);
  vm.release(lo, 4 * page);
  vm.release(hi, 4 * page);
  EXPECT_EQ(vm.counters().mapped_bytes, 0u);
}

}  // namespace ember::testing
