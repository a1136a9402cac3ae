// Launch validation (the errors CUDA gives), kernel names, the device profile
// and the descriptions used in the emulator's messages.
#include <cxxabi.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include "block_state.hpp"
#include "ember/core/error.hpp"
#include "ember/simt/profile.hpp"
#include "ember/simt/shim.hpp"

namespace ember::simt {
namespace {

std::mutex g_profile_mutex;
DeviceProfile g_profile;
std::mutex g_launches_mutex;
std::map<std::string, uint64_t, std::less<>> g_launches;  // by kernel name

// "void ns::k<float>(float*, int)" -> "ns::k<float>"
std::string strip_signature(std::string name) {
  int depth = 0;
  for (size_t i = 0; i < name.size(); ++i) {
    if (name[i] == '<') ++depth;
    if (name[i] == '>') --depth;
    if (name[i] == '(' && depth == 0) {
      name.resize(i);
      break;
    }
  }
  if (name.rfind("void ", 0) == 0) name.erase(0, 5);
  return name;
}

}  // namespace

const DeviceProfile& device_profile() {
  std::lock_guard lock(g_profile_mutex);
  return g_profile;
}

void set_device_profile(const DeviceProfile& profile) {
  std::lock_guard lock(g_profile_mutex);
  g_profile = profile;
}

std::string kernel_name(void (*kernel)()) {
  static std::mutex mutex;
  static std::map<void (*)(), std::string> cache;
  std::lock_guard lock(mutex);
  if (auto it = cache.find(kernel); it != cache.end()) return it->second;
  void* address = nullptr;
  std::memcpy(&address, &kernel, sizeof(address));
  std::string name = fmt::format("kernel at {}", address);
  Dl_info info{};
  if (dladdr(address, &info) != 0 && info.dli_sname != nullptr) {
    int status = 0;
    char* demangled = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
    name = strip_signature(status == 0 && demangled ? demangled : info.dli_sname);
    std::free(demangled);
  }
  return cache[kernel] = name;
}

uint64_t kernel_launches(std::string_view name) {
  std::lock_guard lock(g_launches_mutex);
  uint64_t count = 0;
  for (const auto& [kernel, launches] : g_launches) {
    if (kernel.find(name) != std::string::npos) count += launches;
  }
  return count;
}

void validate_launch(const LaunchConfig& c) {
  {
    std::lock_guard lock(g_launches_mutex);
    auto it = g_launches.find(c.kernel);
    if (it == g_launches.end()) it = g_launches.emplace(c.kernel, 0).first;
    ++it->second;
  }
  const DeviceProfile& p = device_profile();
  const uint64_t threads = uint64_t{c.block.x} * c.block.y * c.block.z;
  EMBER_CHECK(c.grid.x >= 1 && c.grid.y >= 1 && c.grid.z >= 1,
              "invalid configuration argument (cudaErrorInvalidConfiguration): kernel '{}' "
              "launched with an empty grid ({},{},{}); every grid dimension must be at least 1. "
              "Skip the launch when there is no work.",
              c.kernel, c.grid.x, c.grid.y, c.grid.z);
  EMBER_CHECK(c.grid.x <= p.max_grid_x && c.grid.y <= p.max_grid_y && c.grid.z <= p.max_grid_z,
              "invalid configuration argument (cudaErrorInvalidConfiguration): kernel '{}' "
              "launched with grid ({},{},{}); {} allows at most ({},{},{}).",
              c.kernel, c.grid.x, c.grid.y, c.grid.z, p.name, p.max_grid_x, p.max_grid_y,
              p.max_grid_z);
  EMBER_CHECK(threads >= 1 && threads <= p.max_threads_per_block && c.block.x <= p.max_block_x &&
                  c.block.y <= p.max_block_y && c.block.z <= p.max_block_z,
              "invalid configuration argument (cudaErrorInvalidConfiguration): kernel '{}' "
              "launched with block ({},{},{}) = {} threads; {} allows 1 to {} threads per block "
              "with x <= {}, y <= {}, z <= {}. Use fewer threads per block and more blocks.",
              c.kernel, c.block.x, c.block.y, c.block.z, threads, p.name, p.max_threads_per_block,
              p.max_block_x, p.max_block_y, p.max_block_z);
  // The kernel's limit: 48 KiB unless cudaFuncSetAttribute raised it (up to the opt-in maximum).
  const size_t limit = c.address ? max_dynamic_shared(c.address) : p.shared_bytes_per_block;
  EMBER_CHECK(c.shared_bytes <= limit,
              "invalid argument (cudaErrorInvalidValue): kernel '{}' asks for {} bytes of "
              "dynamic shared memory but {} allows it {} bytes per block. Raise the limit with "
              "cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) "
              "(at most {}), ask for less, or split the work over more blocks.",
              c.kernel, c.shared_bytes, p.name, limit, p.shared_bytes_per_block_optin);
}

std::string describe_block(const Block& block) {
  return fmt::format("block ({},{},{})", block.idx.x, block.idx.y, block.idx.z);
}

std::string describe_site(const std::source_location& where) {
  return fmt::format("{}:{}", where.file_name(), where.line());
}

std::string describe_threads(const Block& block, const std::vector<unsigned>& linear) {
  auto one = [&](unsigned i) {
    const uint3 t = block.contexts[i]->thread_idx;
    return fmt::format("({},{},{})", t.x, t.y, t.z);
  };
  std::string text;
  size_t runs = 0;
  for (size_t i = 0; i < linear.size();) {
    size_t j = i;
    while (j + 1 < linear.size() && linear[j + 1] == linear[j] + 1) ++j;
    if (++runs > 6) {
      text += fmt::format(", ... ({} threads in all)", linear.size());
      break;
    }
    if (!text.empty()) text += ", ";
    text += i == j ? one(linear[i]) : one(linear[i]) + ".." + one(linear[j]);
    i = j + 1;
  }
  return text;
}

std::string describe_lanes(unsigned lanes) {
  std::string text;
  for (unsigned l = 0; l < 32;) {
    if (!((lanes >> l) & 1u)) {
      ++l;
      continue;
    }
    unsigned e = l;
    while (e + 1 < 32 && ((lanes >> (e + 1)) & 1u)) ++e;
    if (!text.empty()) text += ",";
    text += l == e ? fmt::format("{}", l) : fmt::format("{}-{}", l, e);
    l = e + 1;
  }
  return text.empty() ? "none" : text;
}

}  // namespace ember::simt
