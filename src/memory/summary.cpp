// CachingAllocator::memory_summary: the stats as a readable table.
#include <fmt/format.h>

#include "caching_allocator_impl.hpp"

namespace ember::memory {

std::string CachingAllocator::memory_summary() const {
  std::lock_guard lock(impl_->mutex);
  const AllocatorStats& s = impl_->stats;
  auto mib = [](int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); };
  std::string out;
  out += "|=====================================================|\n";
  out += "|           ember CachingAllocator summary            |\n";
  out += "|-----------------------------------------------------|\n";
  out += fmt::format("| {:<20} | {:>12} | {:>13} |\n", "Metric (MiB)", "Current", "Peak");
  out += "|-----------------------------------------------------|\n";
  const std::pair<const char*, const Stat*> rows[] = {{"Allocated", &s.allocated},
                                                      {"Reserved", &s.reserved},
                                                      {"Active", &s.active},
                                                      {"Requested", &s.requested},
                                                      {"Inactive split", &s.inactive_split}};
  for (const auto& [name, stat] : rows)
    out += fmt::format("| {:<20} | {:>12.2f} | {:>13.2f} |\n", name, mib(stat->current),
                       mib(stat->peak));
  out += "|-----------------------------------------------------|\n";
  out += fmt::format("| {:<20} | {:>28} |\n", "Count", "");
  const std::pair<const char*, int64_t> counts[] = {{"Allocations", s.allocations},
                                                    {"Frees", s.frees},
                                                    {"Segment allocs", s.segment_allocs},
                                                    {"Segment frees", s.segment_frees},
                                                    {"Page maps", s.page_maps},
                                                    {"Page unmaps", s.page_unmaps},
                                                    {"Retries", s.retries},
                                                    {"OOMs", s.ooms}};
  for (const auto& [name, n] : counts) out += fmt::format("| {:<20} | {:>28} |\n", name, n);
  out += "|-----------------------------------------------------|\n";
  out += fmt::format("| Largest free block: {:>22.2f} MiB |\n",
                     mib(static_cast<int64_t>(impl_->largest_free())));
  out += fmt::format("| Segments: {:>32} {:>5} |\n", impl_->segments.size(),
                     impl_->expandable ? "(exp)" : "");
  out += "|=====================================================|\n";
  out += fmt::format("config: {}\n", to_string(impl_->config));
  return out;
}

}  // namespace ember::memory
