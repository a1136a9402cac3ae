#include "address_space.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>

namespace ember::memory::detail {

void* reserve_address_space(size_t bytes, size_t alignment) noexcept {
  if (bytes == 0 || !is_power_of_two(alignment)) return nullptr;
  const size_t page = system_page_size();
  if (alignment < page) alignment = page;
  bytes = round_up(bytes, page);
  // Over-reserve by the alignment, then give back the unaligned head and the tail.
  const size_t span = bytes + alignment - page;
  if (span < bytes) return nullptr;  // overflow
  void* raw = ::mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = round_up(start, alignment);
  if (aligned > start) ::munmap(raw, aligned - start);
  const uintptr_t end = start + span;
  if (end > aligned + bytes)
    ::munmap(reinterpret_cast<void*>(aligned + bytes), end - aligned - bytes);
  return reinterpret_cast<void*>(aligned);
}

void release_address_space(void* base, size_t bytes) noexcept {
  if (base != nullptr && bytes != 0) ::munmap(base, round_up(bytes, system_page_size()));
}

size_t system_page_size() noexcept {
  static const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

std::string format_bytes(size_t bytes, ByteStyle style) {
  constexpr size_t kib = size_t{1} << 10, mib = size_t{1} << 20, gib = size_t{1} << 30;
  const bool fixed = style == ByteStyle::fixed;
  const auto in = [&](size_t unit, const char* name) {
    return !fixed && bytes % unit == 0 ? fmt::format("{} {}", bytes / unit, name)
                                       : fmt::format("{:.2f} {}", double(bytes) / unit, name);
  };
  if (bytes >= gib) return in(gib, "GiB");
  if (bytes >= mib) return in(mib, "MiB");
  if (bytes >= kib && (fixed || bytes % kib == 0)) return in(kib, "KiB");
  return fmt::format("{} bytes", bytes);
}

void abort_with(const char* what) noexcept {
  std::fprintf(stderr, "ember::memory: %s\n", what);
  std::abort();
}

}  // namespace ember::memory::detail
