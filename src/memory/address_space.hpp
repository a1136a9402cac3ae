// Private helpers of the memory upstreams: PROT_NONE address-space
// reservations (POSIX mmap) and size checks shared by several upstreams.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ember::memory::detail {

// Reserves `bytes` of address space aligned to `alignment` (a power of two),
// inaccessible and not backed by memory. Returns nullptr when the kernel
// refuses (out of address space).
void* reserve_address_space(size_t bytes, size_t alignment) noexcept;
void release_address_space(void* base, size_t bytes) noexcept;

// The system's page size (4 KiB on x86-64).
size_t system_page_size() noexcept;

constexpr bool is_power_of_two(size_t value) {
  return value != 0 && (value & (value - 1)) == 0;
}
constexpr size_t round_up(size_t value, size_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}
inline bool is_aligned(const void* ptr, size_t alignment) {
  return reinterpret_cast<uintptr_t>(ptr) % alignment == 0;
}

// "2 MiB", "1.5 GiB", "300 bytes": sizes in messages and names.
std::string format_bytes(size_t bytes);

// Writes a message to stderr and aborts: for misuse detected in a noexcept
// function (freeing what was never handed out), where throwing is impossible.
[[noreturn]] void abort_with(const char* what) noexcept;

}  // namespace ember::memory::detail
