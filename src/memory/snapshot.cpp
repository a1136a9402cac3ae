// CachingAllocator::snapshot: segments and their blocks as JSON.
#include <fmt/format.h>

#include "caching_allocator_impl.hpp"

namespace ember::memory {

namespace {
const char* state_name(detail::BlockState s) {
  switch (s) {
    case detail::BlockState::allocated:
      return "allocated";
    case detail::BlockState::inactive:
      return "inactive";
    case detail::BlockState::unmapped:
      return "unmapped";
    case detail::BlockState::free:
      break;
  }
  return "free";
}
}  // namespace

std::string CachingAllocator::snapshot() const {
  std::lock_guard lock(impl_->mutex);
  std::string out = "{\"segments\":[";
  bool first_segment = true;
  for (const auto& [base, seg] : impl_->segments) {
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

}  // namespace ember::memory
