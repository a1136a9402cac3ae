#include "ember/core/denormals.hpp"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "ember/core/error.hpp"
#include "ember/core/half.hpp"
#include "ember/core/tensor.hpp"

namespace ember {
namespace detail {

std::atomic<int> g_flush_denormals{-1};

namespace {
// EMBER_FLUSH_DENORMALS, read when the library loads, so that a valid value applies to the first
// op already (also one on views, before any tensor exists). A bad value leaves the default in
// place and becomes an Error at the first tensor (read_flush_denormals_environment), unless
// set_flush_denormals chose first: an explicit choice wins, as for EMBER_CPU_GEMM.
const char* const g_bad_value = [] {
  const char* v = std::getenv("EMBER_FLUSH_DENORMALS");
  if (v == nullptr || *v == '\0') return static_cast<const char*>(nullptr);
  if (std::strcmp(v, "0") == 0 || std::strcmp(v, "1") == 0) {
    g_flush_denormals.store(v[0] - '0');
    return static_cast<const char*>(nullptr);
  }
  return v;
}();
}  // namespace

void read_flush_denormals_environment() {
  if (g_bad_value == nullptr || g_flush_denormals.load() >= 0) return;
  EMBER_THROW(
      "EMBER_FLUSH_DENORMALS='{}': expected 1 (flush subnormals to zero in the CPU backend, the "
      "default) or 0 (keep them)",
      g_bad_value);
}

}  // namespace detail

void set_flush_denormals(bool flush) {
  detail::g_flush_denormals.store(flush ? 1 : 0);
}

int64_t count_subnormals(const Tensor& t) {
  if (!t.defined() || t.numel() == 0) return 0;
  // Exponent bits all zero, fraction nonzero: per dtype, the exponent mask and the fraction mask.
  uint32_t exponent = 0, fraction = 0;
  size_t width = 0;
  switch (t.dtype()) {
    case DType::f32:
      exponent = 0x7f800000u, fraction = 0x007fffffu, width = 4;
      break;
    case DType::f16:
      exponent = 0x7c00u, fraction = 0x03ffu, width = 2;
      break;
    case DType::bf16:
      exponent = 0x7f80u, fraction = 0x007fu, width = 2;
      break;
    default:
      return 0;
  }
  const Tensor host = t.to(Device::cpu());  // a device tensor: copied after its stream's work
  const auto* bytes = static_cast<const unsigned char*>(host.data());
  const int64_t n = host.numel();
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits = 0;
    std::memcpy(&bits, bytes + i * static_cast<int64_t>(width), width);
    count += (bits & exponent) == 0 && (bits & fraction) != 0 ? 1 : 0;
  }
  return count;
}

namespace {
std::atomic<int> g_census{-1};  // -1: EMBER_COUNT_SUBNORMALS not read yet
std::mutex g_census_mutex;
std::vector<SubnormalCount> g_counts;
}  // namespace

void set_subnormal_census(bool on) {
  g_census.store(on ? 1 : 0);
}

bool subnormal_census() {
  if (g_census.load(std::memory_order_relaxed) < 0) {
    static std::once_flag once;
    std::call_once(once, [] {
      const char* v = std::getenv("EMBER_COUNT_SUBNORMALS");
      const bool set = v != nullptr && *v != '\0';
      EMBER_CHECK(!set || std::strcmp(v, "0") == 0 || std::strcmp(v, "1") == 0,
                  "EMBER_COUNT_SUBNORMALS='{}': expected 1 (count the subnormals in module "
                  "outputs) or 0",
                  v);
      int unread = -1;
      g_census.compare_exchange_strong(unread, set && v[0] == '1' ? 1 : 0);
    });
  }
  return g_census.load() != 0;
}

std::vector<SubnormalCount> take_subnormal_census() {
  const std::lock_guard lock(g_census_mutex);
  std::vector<SubnormalCount> out;
  out.swap(g_counts);
  return out;
}

namespace detail {
void census_add(std::string_view where, const Tensor& t) {
  const int64_t found = count_subnormals(t);
  const std::lock_guard lock(g_census_mutex);
  for (SubnormalCount& c : g_counts) {
    if (c.where == where) {
      c.subnormals += found;
      c.elements += t.numel();
      return;
    }
  }
  g_counts.push_back({std::string(where), found, t.numel()});
}
}  // namespace detail

bool flush_denormals() {
  detail::read_flush_denormals_environment();
  return detail::flush_denormals_now();
}

}  // namespace ember
