// A segment (one upstream allocation, or one growable reservation) and the
// blocks that tile it, linked in address order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ember/memory/stream_events.hpp"

namespace ember::memory::detail {

enum class BlockState : uint8_t {
  free,       // in a pool, reusable on its stream
  allocated,  // handed out
  inactive,   // freed, waiting for events on the streams that used it
  unmapped,   // expandable segments: a hole whose pages went back to the upstream
};

struct Segment;

struct Block {
  uintptr_t address = 0;
  size_t size = 0;
  size_t requested = 0;  // while allocated: the bytes asked for
  StreamId stream = 0;
  Segment* segment = nullptr;
  Block* prev = nullptr;  // neighbours in the segment
  Block* next = nullptr;
  BlockState state = BlockState::free;
  bool counted_split = false;                 // counted in inactive_split while pooled
  std::vector<StreamId> stream_uses;          // other streams that use it (record_stream)
  std::vector<StreamEvents::EventId> events;  // while inactive: events still pending
  bool is_split() const { return prev != nullptr || next != nullptr; }
  uintptr_t end() const { return address + size; }
};

struct MappedRange {
  uintptr_t address = 0;
  size_t size = 0;
};

struct Segment {
  uintptr_t base = 0;
  size_t size = 0;         // bytes the blocks tile: the allocation, or the used prefix of the range
  size_t reservation = 0;  // expandable: the reserved range (size <= reservation)
  size_t mapped_bytes = 0;  // expandable: bytes mapped (size minus the unmapped holes)
  StreamId stream = 0;
  bool small = false;
  bool expandable = false;
  uint64_t serial = 0;     // creation order, for garbage collection
  Block* first = nullptr;  // null: nothing mapped
  // Expandable: one entry per map call (one physical allocation upstream), in
  // address order. Only whole entries are ever unmapped.
  std::vector<MappedRange> mapped;
  bool has_holes() const { return expandable && mapped_bytes < size; }
  Block* last() const {
    Block* b = first;
    while (b != nullptr && b->next != nullptr) b = b->next;
    return b;
  }
};

}  // namespace ember::memory::detail
