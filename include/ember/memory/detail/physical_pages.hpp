// The page bookkeeping of the virtual upstreams, written once: the physical allocations behind
// mapped pages (extents of whole pages, each created by one map call and freed whole), which of
// their pages the caller has mapped, and the plan of a map call (pages still backed, and runs of
// pages that need new memory). Each virtual upstream keeps one (detail::VirtualUpstreamBase);
// the caller holds its own lock.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

namespace ember::memory::detail {

class PhysicalPages {
 public:
  struct Extent {
    uint64_t handle = 0;  // the upstream's: a CUDA allocation handle, a memfd page; none simulated
    size_t bytes = 0;
    std::vector<bool> mapped;  // per page, as the caller sees it
    size_t mapped_pages = 0;
  };
  using Map = std::map<uintptr_t, Extent>;

  explicit PhysicalPages(size_t page_size) : page_(page_size) {}

  // The extent holding the page at `address`, or end().
  Map::iterator at(uintptr_t address) {
    auto it = extents_.upper_bound(address);
    if (it == extents_.begin()) return extents_.end();
    --it;
    return address < it->first + it->second.bytes ? it : extents_.end();
  }
  Map::const_iterator at(uintptr_t address) const {
    return const_cast<PhysicalPages*>(this)->at(address);
  }
  bool backed(uintptr_t page) const { return at(page) != extents_.end(); }
  bool is_mapped(uintptr_t page) const {
    const auto it = at(page);
    return it != extents_.end() && it->second.mapped[(page - it->first) / page_];
  }

  // A map of [start, start + bytes): pages still backed by an extent (to map again), and runs of
  // unbacked pages (contiguous pages merged into one run when `merge`, else one page each).
  // Returns the first page that is already mapped in `*already_mapped` (0: none), and then
  // nothing else.
  struct Plan {
    std::vector<uintptr_t> retained;
    std::vector<std::pair<uintptr_t, size_t>> runs;
    size_t unbacked = 0;  // bytes
    uintptr_t already_mapped = 0;
  };
  Plan plan(uintptr_t start, size_t bytes, bool merge) const {
    Plan p;
    for (uintptr_t page = start; page < start + bytes; page += page_) {
      const auto it = at(page);
      if (it != extents_.end()) {
        if (it->second.mapped[(page - it->first) / page_]) {
          p.already_mapped = page;
          return p;
        }
        p.retained.push_back(page);
        continue;
      }
      p.unbacked += page_;
      if (merge && !p.runs.empty() && p.runs.back().first + p.runs.back().second == page) {
        p.runs.back().second += page_;
      } else {
        p.runs.emplace_back(page, page_);
      }
    }
    return p;
  }

  // A new extent of `bytes` at `start`, every page mapped.
  void add(uintptr_t start, size_t bytes, uint64_t handle = 0) {
    const size_t pages = bytes / page_;
    extents_.emplace(start, Extent{handle, bytes, std::vector<bool>(pages, true), pages});
  }
  // Marks retained pages (still backed) mapped again.
  void retake(const std::vector<uintptr_t>& pages) {
    for (const uintptr_t page : pages) {
      auto it = at(page);
      it->second.mapped[(page - it->first) / page_] = true;
      ++it->second.mapped_pages;
    }
  }
  // Whether [start, start + bytes) is page-aligned and every page of it mapped.
  bool all_mapped(uintptr_t start, size_t bytes) const {
    if (start % page_ != 0 || bytes % page_ != 0 || bytes > UINTPTR_MAX - start) return false;
    for (uintptr_t page = start; page < start + bytes; page += page_) {
      if (!is_mapped(page)) return false;
    }
    return true;
  }
  // Unmaps [start, start + bytes) (all mapped: check all_mapped first); an extent whose last page
  // goes is handed to free_extent(iterator), which must erase it.
  template <class Free>
  void unmap(uintptr_t start, size_t bytes, Free&& free_extent) {
    for (uintptr_t page = start; page < start + bytes;) {
      const auto it = at(page);
      Extent& e = it->second;
      const uintptr_t end = std::min(start + bytes, it->first + e.bytes);
      e.mapped_pages -= (end - page) / page_;
      for (; page < end; page += page_) e.mapped[(page - it->first) / page_] = false;
      if (e.mapped_pages == 0) free_extent(it);  // its last page: the memory goes back
    }
  }
  // Hands every extent starting in [start, start + bytes) to free_extent (a released
  // reservation; extents never straddle reservations).
  template <class Free>
  void drop(uintptr_t start, size_t bytes, Free&& free_extent) {
    for (auto it = extents_.lower_bound(start);
         it != extents_.end() && it->first < start + bytes;) {
      const auto next = std::next(it);
      free_extent(it);
      it = next;
    }
  }

  Map& extents() { return extents_; }
  const Map& extents() const { return extents_; }
  size_t page_size() const { return page_; }

 private:
  size_t page_;
  Map extents_;
};

}  // namespace ember::memory::detail
