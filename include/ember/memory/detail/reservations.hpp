// The address ranges a virtual upstream has reserved, and the argument checks its calls share,
// written once: detail::VirtualUpstreamBase keeps one (with detail::PhysicalPages for what is
// mapped in them); the caller holds its own lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string_view>

namespace ember::memory::detail {

class Reservations {
 public:
  using Map = std::map<uintptr_t, size_t>;  // base -> bytes

  explicit Reservations(size_t page_size) : page_(page_size) {}

  // Throws ember::Error unless `bytes` is a positive multiple of the page size. `who` is the
  // upstream's name, which starts the message.
  void check_reserve(std::string_view who, size_t bytes) const;
  void add(uintptr_t base, size_t bytes);
  // Whether [start, start + bytes) is page-aligned, not empty and inside one reservation.
  bool contains(uintptr_t start, size_t bytes) const;
  // Throws ember::Error unless contains(address, bytes), saying which way the arguments of
  // `op` (a call taking an address range, "map") are wrong.
  void check_range(std::string_view who, std::string_view op, const void* address,
                   size_t bytes) const;
  void check_map(std::string_view who, const void* address, size_t bytes) const {
    check_range(who, "map", address, bytes);
  }
  // Removes the reservation (base, bytes); aborts with a message when it is not one (released
  // twice, or never reserved here): release is noexcept.
  void remove(std::string_view who, const void* base, size_t bytes) noexcept;

  const Map& ranges() const { return ranges_; }
  size_t reserved_bytes() const { return reserved_bytes_; }
  size_t page_size() const { return page_; }

 private:
  size_t page_;
  Map ranges_;
  size_t reserved_bytes_ = 0;
};

}  // namespace ember::memory::detail
