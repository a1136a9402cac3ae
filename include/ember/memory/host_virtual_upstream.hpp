// Host virtual memory that behaves like CUDA's: reserve an inaccessible address
// range, then map physical pages into it and unmap them again, so expandable
// segments can be exercised (and tested) on the CPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>

#include "ember/memory/detail/physical_pages.hpp"
#include "ember/memory/detail/reservations.hpp"
#include "ember/memory/upstream.hpp"

namespace ember::memory {

// reserve: mmap(PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE).
// map: takes pages of a memfd (reusing freed file pages first, else growing
// the file), commits them with fallocate (so running out of memory is a false
// from map, not a SIGBUS later) and mmaps them MAP_SHARED | MAP_FIXED over the
// reservation; the pages read as zeros. unmap: maps PROT_NONE anonymous memory
// back over the range and punches the file pages out (fallocate
// PUNCH_HOLE), which really returns the memory. map returns false past
// `capacity` mapped bytes (0: no limit) or when the kernel is out of memory,
// and throws ember::Error for misaligned arguments, a range outside every
// reservation, or pages already mapped. Unmapping pages that are not mapped
// aborts (unmap is noexcept). release unmaps what is still mapped.
// Thread-safe. Linux only (memfd_create).
//
// Physical memory here is page-granular: unmapping any page frees it (the
// kernel drops punched-out file pages), unlike a GPU, where a map call is one
// allocation freed only whole (CudaVirtualUpstream; SimulatedVirtualUpstream
// models both, PhysicalGranularity).
class HostVirtualUpstream final : public VirtualUpstream {
 public:
  struct Counters {
    size_t reserve_calls = 0;
    size_t release_calls = 0;
    size_t map_calls = 0;  // including the refused ones
    size_t unmap_calls = 0;
    size_t failed_maps = 0;  // map calls that returned false
    size_t reserved_bytes = 0;
    size_t mapped_bytes = 0;
    size_t peak_mapped_bytes = 0;
    size_t file_bytes = 0;  // the memfd's size: pages ever used at once, mapped or free
  };

  explicit HostVirtualUpstream(size_t page_size = size_t{2} << 20, size_t capacity = 0);
  ~HostVirtualUpstream() override;
  HostVirtualUpstream(const HostVirtualUpstream&) = delete;
  HostVirtualUpstream& operator=(const HostVirtualUpstream&) = delete;

  size_t page_size() const override { return page_size_; }
  void* reserve(size_t bytes) override;
  void release(void* base, size_t bytes) noexcept override;
  bool map(void* address, size_t bytes) override;
  void unmap(void* address, size_t bytes) noexcept override;
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
  // page frees it (detail/physical_pages.hpp).
  using Pages = detail::PhysicalPages<int64_t>;
  // Maps PROT_NONE back over [start, start + bytes) (all mapped), punches their file pages out
  // and frees them. Locked.
  void unmap_pages(uintptr_t start, size_t bytes) noexcept;
  void punch(int64_t file_page, size_t count) noexcept;

  const size_t page_size_;
  const size_t capacity_;
  int fd_ = -1;
  mutable std::mutex mutex_;
  detail::Reservations reservations_;
  Pages pages_;
  std::set<int64_t> free_file_pages_;  // below file_pages_, punched out
  int64_t file_pages_ = 0;             // the memfd's size in pages
  Counters counters_;
};

}  // namespace ember::memory
