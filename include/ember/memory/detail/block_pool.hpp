// Free blocks of one pool (small or large), ordered by (stream, size, address)
// so that the best fit on a stream is one lower_bound away.
#pragma once

#include <cstdint>
#include <iterator>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

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
  // Insert and erase recycle the set's nodes (extract / insert(node)), so that a
  // cached malloc+free pair, which splits and re-coalesces a block, allocates no
  // tree node on the heap.
  void insert(Block* b) {
    if (spare_.empty()) {
      blocks_.insert(b);
      return;
    }
    Node node = std::move(spare_.back());
    spare_.pop_back();
    node.value() = b;
    blocks_.insert(std::move(node));
  }
  void erase(Block* b) {
    Node node = blocks_.extract(b);
    if (!node.empty() && spare_.size() < kMaxSpare) spare_.push_back(std::move(node));
  }
  // Gives pooled `b` a new address and size (same stream): in place when the new
  // key still sorts between b's neighbours, which saves the tree's erase and
  // insert on the cached path; else by re-inserting b's node.
  void rekey(Block* b, uintptr_t address, size_t size) {
    auto it = blocks_.find(b);
    const auto key = std::tie(b->stream, size, address);
    const auto key_of = [](const Block* o) { return std::tie(o->stream, o->size, o->address); };
    const bool after_prev = it == blocks_.begin() || key_of(*std::prev(it)) < key;
    const auto next = std::next(it);
    if (after_prev && (next == blocks_.end() || key < key_of(*next))) {
      b->address = address;
      b->size = size;
      return;
    }
    Node node = blocks_.extract(it);
    b->address = address;
    b->size = size;
    blocks_.insert(std::move(node));
  }
  bool contains(Block* b) const { return blocks_.count(b) != 0; }
  const std::set<Block*, BlockOrder>& blocks() const { return blocks_; }

 private:
  using Set = std::set<Block*, BlockOrder>;
  using Node = Set::node_type;
  static constexpr size_t kMaxSpare = 64;
  Set blocks_;
  std::vector<Node> spare_;  // extracted nodes kept for reuse
};

}  // namespace ember::memory::detail
