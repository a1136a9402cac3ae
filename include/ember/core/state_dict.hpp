// StateDict: named tensors in insertion order, what a module or optimizer saves and loads
// (Module::state_dict, Optimizer::state_dict). Its tensors are the live ones, not copies:
// copy them (clone, to(Device::cpu())) to keep a snapshot while training goes on.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ember/core/tensor.hpp"

namespace ember {

class StateDict {
 public:
  using Entry = std::pair<std::string, Tensor>;

  // Appends an entry; a key given twice or an undefined tensor is an Error.
  void insert(std::string key, Tensor value);
  bool contains(std::string_view key) const { return find(key) != nullptr; }
  const Tensor* find(std::string_view key) const;  // nullptr when absent
  const Tensor& at(std::string_view key) const;    // an Error naming the key when absent
  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  const std::vector<Entry>& entries() const { return entries_; }
  auto begin() const { return entries_.begin(); }
  auto end() const { return entries_.end(); }

 private:
  std::vector<Entry> entries_;
  std::unordered_map<std::string, size_t> index_;
};

// How a state dict's entries match what a module or optimizer expects; describe() names
// every missing, unexpected and mismatched entry (shape and dtype).
struct StateDictMismatch {
  std::vector<std::string> missing, unexpected, mismatched;
  bool empty() const { return missing.empty() && unexpected.empty() && mismatched.empty(); }
  std::string describe() const;
};

// Compares `given` with `expected` (the owner's own state dict): every expected key must be
// present with the same shape and dtype, and no other key.
StateDictMismatch compare_state_dicts(const StateDict& expected, const StateDict& given);

// Checks `given` against `expected` and copies each of its tensors into the expected one
// (any devices; same shape and dtype). Nothing is written when anything mismatches: the
// Error, prefixed with `who`, lists every problem.
void load_state_into(const StateDict& expected, const StateDict& given, std::string_view who);

}  // namespace ember
