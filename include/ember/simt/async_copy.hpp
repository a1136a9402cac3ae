// The per-thread cp.async pipeline of the SIMT emulator: the copies one emulated CUDA thread
// has issued and not yet completed, grouped as cp.async.commit_group groups them.
// Kept apart from intrinsics_emulation.hpp (and free of warp/context includes) so that the
// emulator's per-thread context can hold one by value.
#pragma once

#include <cstddef>
#include <cstring>
#include <deque>
#include <utility>
#include <vector>

namespace ember::simt {

struct AsyncCopy {
  void* dst;
  const void* src;
  unsigned bytes;       // cp-size: 4, 8 or 16
  unsigned src_bytes;   // bytes read from src; the rest of dst is zero-filled
  bool landed = false;  // already performed (cp.async landing at issue): the wait only retires it
};

class AsyncCopyPipeline {
 public:
  void issue(const AsyncCopy& copy) { open_.push_back(copy); }

  void commit() {
    committed_.push_back(std::move(open_));
    open_.clear();
  }

  void wait_group(unsigned pending_allowed) {
    while (committed_.size() > pending_allowed) {
      for (const AsyncCopy& copy : committed_.front()) {
        if (!copy.landed) perform(copy);
      }
      committed_.pop_front();
    }
  }

  void wait_all() {
    commit();
    wait_group(0);
  }

  // Copies issued but not yet completed (open group included); for tests and diagnostics.
  size_t pending_copies() const {
    size_t n = open_.size();
    for (const auto& group : committed_) n += group.size();
    return n;
  }
  size_t committed_groups() const { return committed_.size(); }

  // Forgets everything queued: the emulated thread exited (its copies would land in shared
  // memory that no longer belongs to it) or a new block starts.
  void reset() {
    open_.clear();
    committed_.clear();
  }

  static void perform(const AsyncCopy& copy) {
    unsigned char staged[16];  // read everything first: src and dst may overlap
    std::memcpy(staged, copy.src, copy.src_bytes);
    std::memset(staged + copy.src_bytes, 0, copy.bytes - copy.src_bytes);
    std::memcpy(copy.dst, staged, copy.bytes);
  }

 private:
  std::vector<AsyncCopy> open_;
  std::deque<std::vector<AsyncCopy>> committed_;
};

}  // namespace ember::simt
