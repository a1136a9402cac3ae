// Free blocks of one pool (small or large), ordered by (stream, size, address)
// so that the best fit on a stream is one lower_bound away.
#pragma once

#include <set>
#include <tuple>

#include "ember/memory/detail/block.hpp"

namespace ember::memory::detail {

struct BlockOrder {
  bool operator()(const Block* a, const Block* b) const {
    return std::tie(a->stream, a->size, a->address) < std::tie(b->stream, b->size, b->address);
  }
};

class BlockPool {
 public:
  // The smallest free block on `stream` with at least `size` bytes, or null.
  Block* best_fit(StreamId stream, size_t size) const {
    Block key;
    key.stream = stream;
    key.size = size;
    key.address = 0;
    auto it = blocks_.lower_bound(&key);
    if (it == blocks_.end() || (*it)->stream != stream) return nullptr;
    return *it;
  }
  void insert(Block* b) { blocks_.insert(b); }
  void erase(Block* b) { blocks_.erase(b); }
  bool contains(Block* b) const { return blocks_.count(b) != 0; }
  const std::set<Block*, BlockOrder>& blocks() const { return blocks_; }

 private:
  std::set<Block*, BlockOrder> blocks_;
};

}  // namespace ember::memory::detail
