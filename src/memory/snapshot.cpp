// CachingAllocator::snapshot: segments and their blocks as JSON; the snapshot (and its SVG) on
// an out-of-memory error where EMBER_OOM_SNAPSHOT says.
#include <fmt/format.h>

#include "caching_allocator_impl.hpp"
#include "ember/core/enum_name.hpp"
#include "ember/memory/snapshot_svg.hpp"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace ember::memory {

namespace {
const char* state_name(detail::BlockState s) {
  static constexpr const char* kNames[] = {"free", "allocated", "inactive", "unmapped"};
  static_assert(std::size(kNames) == static_cast<size_t>(detail::BlockState::unmapped) + 1);
  return enum_name(s, kNames);
}
}  // namespace

std::string CachingAllocator::snapshot() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->snapshot_json();
}

std::string CachingAllocator::Impl::snapshot_json() const {
  std::string out = "{\"segments\":[";
  bool first_segment = true;
  for (const auto& [base, seg] : segments) {
    if (!first_segment) out += ',';
    first_segment = false;
    out += fmt::format(
        "{{\"address\":{},\"size\":{},\"stream\":{},\"pool\":\"{}\",\"expandable\":{},"
        "\"blocks\":[",
        seg->base, seg->size, seg->stream, seg->small ? "small" : "large",
        seg->expandable ? "true" : "false");
    for (const detail::Block* b = seg->first; b != nullptr; b = b->next) {
      if (b != seg->first) out += ',';
      out += fmt::format(R"({{"address":{},"size":{},"requested":{},"state":"{}"}})", b->address,
                         b->size, b->requested, state_name(b->state));
    }
    out += "]}";
  }
  out += "]}";
  return out;
}

std::string CachingAllocator::Impl::write_oom_snapshot() const {
  const char* dir = std::getenv("EMBER_OOM_SNAPSHOT");
  if (dir == nullptr || *dir == '\0') return {};
  // At most kMaxSnapshots per process: a search that provokes out-of-memory errors on purpose
  // (a batch-size search, a trace replay) does not fill the directory.
  constexpr int kMaxSnapshots = 16;
  static std::atomic<int> count{0};
  const int n = count++;
  if (n >= kMaxSnapshots) {
    return fmt::format(" (EMBER_OOM_SNAPSHOT: no snapshot: this process wrote its {} already)",
                       kMaxSnapshots);
  }
  const std::string path = (std::filesystem::path(dir) /
                            fmt::format("ember_oom_{}_{}.json", static_cast<long>(::getpid()), n))
                               .string();
  const std::string json = snapshot_json();
  std::ofstream out(path);
  out << json;
  out.close();
  if (!out) {
    return fmt::format(" (EMBER_OOM_SNAPSHOT: could not write {}: {})", path, std::strerror(errno));
  }
  // Its picture next to it (the same name, .svg), as memory_snapshot_svg draws it.
  const std::string svg_path = path.substr(0, path.size() - 5) + ".svg";
  const std::string picture = snapshot_svg(
      json,
      fmt::format("out of memory: process {}, snapshot {}", static_cast<long>(::getpid()), n));
  errno = 0;
  std::ofstream svg(svg_path);
  svg << picture;
  svg.close();
  if (!svg) {
    return fmt::format(
        " The allocator's snapshot at this moment is in {} (its picture: could not "
        "write {}: {}).",
        path, svg_path, std::strerror(errno));
  }
  return fmt::format(" The allocator's snapshot at this moment is in {}, its picture in {}.", path,
                     svg_path);
}

}  // namespace ember::memory
