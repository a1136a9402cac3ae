#include <algorithm>

#include "ember/memory/adaptor.hpp"

namespace ember::memory::detail {

void ByteLedger::settle(size_t bytes, bool granted, bool count_failure) noexcept {
  std::lock_guard lock(mutex_);
  in_flight_ -= bytes;
  if (!granted) {
    if (count_failure) ++counters_.failures;
    return;
  }
  ++counters_.grants;
  counters_.total_bytes += bytes;
  counters_.current_bytes += bytes;
  counters_.peak_bytes = std::max(counters_.peak_bytes, counters_.current_bytes);
}

void ByteLedger::give_back(size_t bytes) noexcept {
  std::lock_guard lock(mutex_);
  ++counters_.returns;
  counters_.current_bytes -= std::min(bytes, counters_.current_bytes);
}

ByteCounters ByteLedger::counters() const {
  std::lock_guard lock(mutex_);
  return counters_;
}

size_t ByteLedger::out() const {
  std::lock_guard lock(mutex_);
  return out_locked();
}

void ByteLedger::reset_peak() {
  std::lock_guard lock(mutex_);
  counters_.peak_bytes = counters_.current_bytes;
}

}  // namespace ember::memory::detail
