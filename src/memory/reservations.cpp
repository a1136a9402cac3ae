#include "ember/memory/detail/reservations.hpp"

#include <fmt/format.h>

#include <iterator>

#include "address_space.hpp"
#include "ember/core/error.hpp"

namespace ember::memory::detail {

void Reservations::check_reserve(std::string_view who, size_t bytes) const {
  EMBER_CHECK(bytes > 0 && bytes % page_ == 0,
              "{}: reserve needs a positive multiple of the page size ({}), got {} bytes; round "
              "the size up to page_size()",
              who, format_bytes(page_), bytes);
}

void Reservations::add(uintptr_t base, size_t bytes) {
  ranges_.emplace(base, bytes);
  reserved_bytes_ += bytes;
}

void Reservations::check_map(std::string_view who, const void* address, size_t bytes) const {
  const auto start = reinterpret_cast<uintptr_t>(address);
  EMBER_CHECK(start % page_ == 0 && bytes > 0 && bytes % page_ == 0,
              "{}: map needs a page-aligned address and a positive multiple of the page size "
              "({}), got address {} and {} bytes",
              who, format_bytes(page_), address, bytes);
  const auto above = ranges_.upper_bound(start);
  const bool inside = above != ranges_.begin() && [&] {
    const auto& [base, size] = *std::prev(above);
    return start - base <= size && bytes <= size - (start - base);
  }();
  EMBER_CHECK(inside, "{}: map({}, {} bytes) is not inside a reservation; reserve the range first",
              who, address, bytes);
}

void Reservations::remove(std::string_view who, const void* base, size_t bytes) noexcept {
  const auto it = ranges_.find(reinterpret_cast<uintptr_t>(base));
  if (it == ranges_.end() || it->second != bytes) {
    abort_with(fmt::format("{}: release({}, {} bytes) is not a live reservation of that size "
                           "(released twice, or never reserved here)",
                           who, base, bytes)
                   .c_str());
  }
  reserved_bytes_ -= bytes;
  ranges_.erase(it);
}

}  // namespace ember::memory::detail
