// Host virtual memory that behaves like CUDA's: reserve an inaccessible address
// range, then map physical pages into it and unmap them again, so expandable
// segments can be exercised (and tested) on the CPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

#include "ember/memory/detail/virtual_upstream_base.hpp"

namespace ember::memory {

// reserve: mmap(PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE).
// map: takes pages of a memfd (reusing freed file pages first, else growing
// the file), commits them with fallocate (so running out of memory is a false
// from map, not a SIGBUS later) and mmaps them MAP_SHARED | MAP_FIXED over the
// reservation; the pages read as zeros. unmap: maps PROT_NONE anonymous memory
// back over the range and punches the file pages out (fallocate
// PUNCH_HOLE), which really returns the memory. map returns false past
// `capacity` mapped bytes (0: no limit) or when the kernel is out of memory;
// reserve, release, map and unmap check their arguments as
// detail::VirtualUpstreamBase says. Thread-safe. Linux only (memfd_create).
//
// Physical memory here is page-granular: unmapping any page frees it (the
// kernel drops punched-out file pages), unlike a GPU, where a map call is one
// allocation freed only whole (CudaVirtualUpstream; SimulatedVirtualUpstream
// models both, PhysicalGranularity).
class HostVirtualUpstream final : public detail::VirtualUpstreamBase {
 public:
  struct Counters : detail::VirtualCounters {
    size_t file_bytes = 0;  // the memfd's size: pages ever used at once, mapped or free
  };

  explicit HostVirtualUpstream(size_t page_size = size_t{2} << 20, size_t capacity = 0);
  ~HostVirtualUpstream() override;

  Device device() const override { return Device::cpu(); }
  // total: the capacity (0 without one); free: capacity - mapped bytes.
  MemoryInfo info() const override;
  std::string name() const override;

  size_t capacity() const { return capacity_; }
  Counters counters() const;
  // Memory the kernel holds for the memfd now (its allocated blocks): mapped
  // pages only, since unmapped ones are punched out.
  size_t backing_bytes() const;

 private:
  // Each mapped page is an extent of its own whose handle is its page in the memfd: unmapping a
  // page frees it.
  detail::VirtualCounters& base_counters() override { return counters_; }
  void* reserve_address(size_t bytes) override;
  void release_address(void* base, size_t bytes) noexcept override;  // munmap
  bool back(uintptr_t start, size_t bytes, const Pages::Plan& plan) override;
  void free_extent(Pages::Map::iterator it) noexcept override;
  // Maps PROT_NONE back over [start, start + bytes) (all mapped), punches their file pages out
  // (one punch per run) and frees them.
  void unmap_pages(uintptr_t start, size_t bytes) noexcept override;
  void punch(int64_t file_page, size_t count) noexcept;

  const size_t capacity_;
  int fd_ = -1;
  std::set<int64_t> free_file_pages_;  // below file_pages_, punched out
  int64_t file_pages_ = 0;             // the memfd's size in pages
  Counters counters_;
};

}  // namespace ember::memory
