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

bool Reservations::contains(uintptr_t start, size_t bytes) const {
  if (start % page_ != 0 || bytes == 0 || bytes % page_ != 0) return false;
  const auto above = ranges_.upper_bound(start);
  if (above == ranges_.begin()) return false;
  const auto& [base, size] = *std::prev(above);
  return start - base <= size && bytes <= size - (start - base);  // no overflow past its end
}

void Reservations::check_range(std::string_view who, std::string_view op, const void* address,
                               size_t bytes) const {
  const auto start = reinterpret_cast<uintptr_t>(address);
  EMBER_CHECK(start % page_ == 0 && bytes > 0 && bytes % page_ == 0,
              "{}: {} needs a page-aligned address and a positive multiple of the page size "
              "({}), got address {} and {} bytes",
              who, op, format_bytes(page_), address, bytes);
  EMBER_CHECK(contains(start, bytes),
              "{}: {}({}, {} bytes) is not inside a reservation; reserve the range first", who, op,
              address, bytes);
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
