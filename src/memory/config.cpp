// EMBER_ALLOC_CONF parsing: "key:value,key:value", every problem a clear Error.
#include "ember/memory/config.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "ember/core/error.hpp"

namespace ember::memory {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

constexpr std::string_view kValidKeys =
    "max_split_size_mb:<MiB, 0 = no limit>, roundup_power2_divisions:<0 or a power of two "
    "1..64>, garbage_collection_threshold:<0 = off, or 0 < t < 1>, "
    "expandable_segments:<true|false>, max_reserved_mb:<MiB, 0 = no limit>, "
    "memory_fraction:<0 = no limit, or 0 < f <= 1>, max_map_mb:<MiB, 0 = no cap>, "
    "growth_granularity_mb:<MiB, 0 = the page size>, peak_guard:<true|false>, "
    "debug_guard:<true|false>, "
    "policy:<ember|pytorch>";

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

[[noreturn]] void bad_value(std::string_view key, std::string_view value, std::string_view want) {
  EMBER_THROW(
      "EMBER_ALLOC_CONF: {} needs {}, found '{}'. Fix the value; the valid keys and values are: {}",
      key, want, value, kValidKeys);
}

bool parse_bool(std::string_view key, std::string_view value) {
  if (value == "true" || value == "True" || value == "1") return true;
  if (value == "false" || value == "False" || value == "0") return false;
  bad_value(key, value, "true or false");
}

uint64_t parse_uint(std::string_view key, std::string_view value, std::string_view want) {
  uint64_t out = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), out);
  if (ec != std::errc() || end != value.data() + value.size() || value.empty())
    bad_value(key, value, want);
  return out;
}

// A whole number of MiB, in bytes; a count whose bytes do not fit in 64 bits is an Error.
uint64_t parse_mib(std::string_view key, std::string_view value, std::string_view want) {
  const uint64_t mib = parse_uint(key, value, want);
  if (mib > std::numeric_limits<uint64_t>::max() / kMiB) {
    EMBER_THROW("EMBER_ALLOC_CONF: {}:{} is more than 2^64 bytes; expected {}", key, value, want);
  }
  return mib * kMiB;
}

double parse_double(std::string_view key, std::string_view value, std::string_view want) {
  const std::string text(value);
  char* end = nullptr;
  const double out = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(out))
    bad_value(key, value, want);
  return out;
}

}  // namespace

AllocatorConfig pytorch_default_policy() {
  AllocatorConfig c;
  c.max_split_size = 0;
  c.roundup_power2_divisions = 0;
  c.garbage_collection_threshold = 0.0;
  c.expandable_segments = false;
  c.peak_guard = false;
  c.min_block_size = 512;
  c.small_size = 1 * kMiB;
  c.small_buffer = 2 * kMiB;
  c.large_buffer = 20 * kMiB;
  c.min_large_alloc = 10 * kMiB;
  c.round_large = 2 * kMiB;
  // With expandable_segments:true, PyTorch maps its large-pool segments in
  // 20 MiB (kLargeBuffer) pieces, one cuMemCreate handle each.
  c.max_map_size = 20 * kMiB;
  c.growth_granularity = 20 * kMiB;
  return c;
}

AllocatorConfig parse_allocator_config(std::string_view text) {
  std::vector<std::pair<std::string_view, std::string_view>> items;
  while (!trim(text).empty()) {
    const size_t comma = text.find(',');
    std::string_view item = trim(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    if (item.empty()) continue;
    const size_t colon = item.find(':');
    EMBER_CHECK(
        colon != std::string_view::npos,
        "EMBER_ALLOC_CONF: expected key:value, found '{}'. The valid keys and values are: {}", item,
        kValidKeys);
    items.emplace_back(trim(item.substr(0, colon)), trim(item.substr(colon + 1)));
  }
  AllocatorConfig c;
  // policy first, so the other keys override it wherever they appear.
  for (auto [key, value] : items) {
    if (key != "policy") continue;
    if (value == "pytorch") {
      c = pytorch_default_policy();
    } else if (value == "ember") {
      c = AllocatorConfig{};
    } else {
      bad_value(key, value, "ember or pytorch");
    }
  }
  for (auto [key, value] : items) {
    if (key == "policy") continue;
    if (key == "max_split_size_mb") {
      c.max_split_size = parse_mib(key, value, "a whole number of MiB (0: no limit)");
    } else if (key == "roundup_power2_divisions") {
      const uint64_t n = parse_uint(key, value, "0 or a power of two from 1 to 64");
      if (n > 64 || (n & (n - 1)) != 0) bad_value(key, value, "0 or a power of two from 1 to 64");
      c.roundup_power2_divisions = static_cast<int>(n);
    } else if (key == "garbage_collection_threshold") {
      const double t = parse_double(key, value, "a number with 0 < t < 1 (0: off)");
      if (!(t >= 0.0 && t < 1.0)) bad_value(key, value, "a number with 0 < t < 1 (0: off)");
      c.garbage_collection_threshold = t;
    } else if (key == "expandable_segments") {
      c.expandable_segments = parse_bool(key, value);
    } else if (key == "peak_guard") {
      c.peak_guard = parse_bool(key, value);
    } else if (key == "debug_guard") {
      c.debug_guard = parse_bool(key, value);
    } else if (key == "max_reserved_mb") {
      c.max_reserved = parse_mib(key, value, "a whole number of MiB (0: no limit)");
    } else if (key == "max_map_mb") {
      c.max_map_size = parse_mib(key, value, "a whole number of MiB (0: no cap)");
    } else if (key == "growth_granularity_mb") {
      c.growth_granularity = parse_mib(key, value, "a whole number of MiB (0: the page size)");
    } else if (key == "memory_fraction") {
      const double f = parse_double(key, value, "a number with 0 < f <= 1 (0: no limit)");
      if (!(f >= 0.0 && f <= 1.0)) bad_value(key, value, "a number with 0 < f <= 1 (0: no limit)");
      c.memory_fraction = f;
    } else {
      EMBER_THROW("EMBER_ALLOC_CONF: unknown key '{}'. The valid keys and values are: {}", key,
                  kValidKeys);
    }
  }
  return c;
}

AllocatorConfig allocator_config_from_env() {
  const char* text = std::getenv("EMBER_ALLOC_CONF");
  return text == nullptr ? AllocatorConfig{} : parse_allocator_config(text);
}

std::string to_string(const AllocatorConfig& c) {
  return fmt::format(
      "max_split_size_mb:{},roundup_power2_divisions:{},garbage_collection_threshold:{},"
      "expandable_segments:{},max_reserved_mb:{},memory_fraction:{},max_map_mb:{},"
      "growth_granularity_mb:{},peak_guard:{},debug_guard:{}",
      c.max_split_size / kMiB, c.roundup_power2_divisions, c.garbage_collection_threshold,
      c.expandable_segments ? "true" : "false", c.max_reserved / kMiB, c.memory_fraction,
      c.max_map_size / kMiB, c.growth_granularity / kMiB, c.peak_guard ? "true" : "false",
      c.debug_guard ? "true" : "false");
}

}  // namespace ember::memory
