#include "ember/memory/host_virtual_upstream.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "address_space.hpp"
#include "ember/core/error.hpp"
#include "ember/memory/out_of_memory.hpp"

namespace ember::memory {

using detail::format_bytes;

namespace {

void* protect_none(void* at, size_t bytes) noexcept {
  return ::mmap(at, bytes, PROT_NONE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
                0);
}

}  // namespace

HostVirtualUpstream::HostVirtualUpstream(size_t page_size, size_t capacity)
    // One extent per page: unmapping a page frees it, so nothing is ever retained.
    : VirtualUpstreamBase(page_size, /*merge_runs=*/false), capacity_(capacity) {
  const size_t system_page = detail::system_page_size();
  EMBER_CHECK(detail::is_power_of_two(page_size) && page_size >= system_page,
              "HostVirtualUpstream needs a page size that is a power of two and at least the "
              "system page ({} bytes), got {} bytes; use 2 MiB like CUDA",
              system_page, page_size);
  EMBER_CHECK(capacity % page_size == 0,
              "HostVirtualUpstream needs a capacity that is a multiple of the page size ({}), got "
              "{} bytes; pass 0 for no limit",
              format_bytes(page_size), capacity);
  fd_ = ::memfd_create("ember-host-virtual", MFD_CLOEXEC);
  EMBER_CHECK(fd_ >= 0,
              "HostVirtualUpstream: memfd_create failed: {}; it needs Linux 3.17+ (or use "
              "SimulatedVirtualUpstream, which needs no memory)",
              std::strerror(errno));
}

HostVirtualUpstream::~HostVirtualUpstream() {
  for (const auto& [base, bytes] : reservations_.ranges()) {
    ::munmap(reinterpret_cast<void*>(base), bytes);
  }
  if (fd_ >= 0) ::close(fd_);
}

void* HostVirtualUpstream::reserve_address(size_t bytes) {
  void* base = detail::reserve_address_space(bytes, page_size_);
  if (base == nullptr) {
    throw OutOfMemory(fmt::format("{}: reserving {} of address space failed: {}; reserve less "
                                  "(or raise ulimit -v)",
                                  name(), format_bytes(bytes), std::strerror(errno)),
                      {.requested = bytes});
  }
  return base;
}

void HostVirtualUpstream::release_address(void* base, size_t bytes) noexcept {
  ::munmap(base, bytes);
}

void HostVirtualUpstream::free_extent(Pages::Map::iterator it) noexcept {
  const auto file_page = static_cast<int64_t>(it->second.handle);
  punch(file_page, 1);
  free_file_pages_.insert(file_page);
  pages_.extents().erase(it);
}

bool HostVirtualUpstream::back(uintptr_t start, size_t bytes, const Pages::Plan& /*plan*/) {
  if (capacity_ != 0 && bytes > capacity_ - counters_.mapped_bytes) return false;

  // Freed file pages first (lowest first, so runs stay contiguous), then new ones.
  const size_t count = bytes / page_size_;
  std::vector<int64_t> chosen(count);
  int64_t grow = 0;
  for (int64_t& file_page : chosen) {
    if (!free_file_pages_.empty()) {
      file_page = *free_file_pages_.begin();
      free_file_pages_.erase(free_file_pages_.begin());
    } else {
      file_page = file_pages_ + grow++;
    }
  }
  const auto page_bytes = static_cast<off_t>(page_size_);
  if (grow > 0 && ::ftruncate(fd_, (file_pages_ + grow) * page_bytes) != 0) {
    const int error = errno;
    for (const int64_t file_page : chosen) {
      if (file_page < file_pages_) free_file_pages_.insert(file_page);
    }
    EMBER_CHECK(error == ENOSPC || error == ENOMEM || error == EFBIG,
                "{}: growing the memfd to {} failed: {}", name(),
                format_bytes(static_cast<size_t>(file_pages_ + grow) * page_size_),
                std::strerror(error));
    return false;
  }
  file_pages_ += grow;
  counters_.file_bytes = static_cast<size_t>(file_pages_) * page_size_;

  // Commit and map each run of consecutive file pages with one fallocate and one mmap.
  for (size_t i = 0; i < count;) {
    size_t n = 1;
    while (i + n < count && chosen[i + n] == chosen[i] + static_cast<int64_t>(n)) ++n;
    const off_t offset = chosen[i] * page_bytes;
    const auto length = static_cast<off_t>(n * page_size_);
    void* at = reinterpret_cast<void*>(start + i * page_size_);
    int error = 0;
    if (::fallocate(fd_, 0, offset, length) != 0) {
      error = errno;
    } else if (::mmap(at, static_cast<size_t>(length), PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_FIXED, fd_, offset) == MAP_FAILED) {
      error = errno;
      protect_none(at, static_cast<size_t>(length));  // a failed MAP_FIXED may leave a hole
    }
    if (error != 0) {
      // Undo: the runs mapped so far, then the pages not mapped.
      if (i > 0) unmap_pages(start, i * page_size_);
      for (size_t j = i; j < count; ++j) {
        punch(chosen[j], 1);
        free_file_pages_.insert(chosen[j]);
      }
      EMBER_CHECK(error == ENOSPC || error == ENOMEM,
                  "{}: mapping {} at {} failed: {}; see the kernel's limits (vm.max_map_count, "
                  "ulimit -v)",
                  name(), format_bytes(n * page_size_), at, std::strerror(error));
      return false;
    }
    for (size_t k = 0; k < n; ++k)
      pages_.add(start + (i + k) * page_size_, page_size_, static_cast<uint64_t>(chosen[i + k]));
    i += n;
  }
  return true;
}

void HostVirtualUpstream::unmap_pages(uintptr_t start, size_t bytes) noexcept {
  void* at = reinterpret_cast<void*>(start);
  if (protect_none(at, bytes) == MAP_FAILED) {
    detail::abort_with(fmt::format("{}: mapping PROT_NONE back over {} bytes at {} failed: {}",
                                   name(), bytes, at, std::strerror(errno))
                           .c_str());
  }
  std::vector<int64_t> freed;  // in address order
  freed.reserve(bytes / page_size_);
  pages_.unmap(start, bytes, [&](Pages::Map::iterator it) {
    freed.push_back(static_cast<int64_t>(it->second.handle));
    pages_.extents().erase(it);
  });
  // One punch per run of consecutive file pages.
  for (size_t i = 0; i < freed.size();) {
    size_t n = 1;
    while (i + n < freed.size() && freed[i + n] == freed[i] + static_cast<int64_t>(n)) ++n;
    punch(freed[i], n);
    i += n;
  }
  free_file_pages_.insert(freed.begin(), freed.end());
}

void HostVirtualUpstream::punch(int64_t file_page, size_t count) noexcept {
  // Frees the pages' memory; the file keeps its size, so the offsets stay valid.
  const auto page_bytes = static_cast<off_t>(page_size_);
  ::fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, file_page * page_bytes,
              static_cast<off_t>(count) * page_bytes);
}

MemoryInfo HostVirtualUpstream::info() const {
  std::lock_guard lock(mutex_);
  if (capacity_ == 0) return {};
  return {capacity_, capacity_ - counters_.mapped_bytes};
}

std::string HostVirtualUpstream::name() const {
  return fmt::format("host-virtual({} pages, {})", format_bytes(page_size_),
                     capacity_ == 0 ? std::string("no limit") : format_bytes(capacity_));
}

HostVirtualUpstream::Counters HostVirtualUpstream::counters() const {
  std::lock_guard lock(mutex_);
  return counters_;
}

size_t HostVirtualUpstream::backing_bytes() const {
  struct stat status {};
  if (::fstat(fd_, &status) != 0) return 0;
  return static_cast<size_t>(status.st_blocks) * 512;
}

}  // namespace ember::memory
