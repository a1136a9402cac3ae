// Private helpers of the memory upstreams: PROT_NONE address-space
// reservations (POSIX mmap) and size checks shared by several upstreams.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "ember/memory/detail/rounding.hpp"  // round_up

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
inline bool is_aligned(const void* ptr, size_t alignment) {
  return reinterpret_cast<uintptr_t>(ptr) % alignment == 0;
}

// "2 MiB", "1.5 GiB", "300 bytes": sizes in messages and names.
// "2 MiB" when exact, else two decimals ("2.50 MiB"); ByteStyle::fixed always gives two
// decimals ("2.00 MiB"), as the allocator's messages and tables do.
enum class ByteStyle { exact, fixed };
std::string format_bytes(size_t bytes, ByteStyle style = ByteStyle::exact);

// Writes a message to stderr and aborts: for misuse detected in a noexcept
// function (freeing what was never handed out), where throwing is impossible.
[[noreturn]] void abort_with(const char* what) noexcept;

}  // namespace ember::memory::detail
