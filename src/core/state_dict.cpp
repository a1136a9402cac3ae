#include "ember/core/state_dict.hpp"

#include <fmt/format.h>

namespace ember {

void StateDict::insert(std::string key, Tensor value) {
  EMBER_CHECK(value.defined(), "StateDict::insert: the tensor of '{}' is undefined", key);
  EMBER_CHECK(!index_.contains(key), "StateDict::insert: the key '{}' is already present", key);
  index_.emplace(key, entries_.size());
  entries_.emplace_back(std::move(key), std::move(value));
}

const Tensor* StateDict::find(std::string_view key) const {
  const auto it = index_.find(std::string(key));
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

const Tensor& StateDict::at(std::string_view key) const {
  const Tensor* t = find(key);
  EMBER_CHECK(t != nullptr, "StateDict: no entry '{}' (it has {} entries)", key, entries_.size());
  return *t;
}

std::string StateDictMismatch::describe() const {
  std::string text;
  auto list = [&](const char* what, const std::vector<std::string>& keys) {
    if (keys.empty()) return;
    if (!text.empty()) text += "; ";
    text += fmt::format("{} ({}): {}", what, keys.size(), fmt::join(keys, ", "));
  };
  list("missing", missing);
  list("unexpected", unexpected);
  list("mismatched", mismatched);
  return text;
}

namespace {
std::string shape_and_dtype(const Tensor& t) {
  return fmt::format("{} {}", t.shape().to_string(), dtype_name(t.dtype()));
}
}  // namespace

StateDictMismatch compare_state_dicts(const StateDict& expected, const StateDict& given) {
  StateDictMismatch m;
  for (const auto& [key, want] : expected) {
    const Tensor* got = given.find(key);
    if (got == nullptr) {
      m.missing.push_back(key);
    } else if (got->shape() != want.shape() || got->dtype() != want.dtype()) {
      m.mismatched.push_back(fmt::format("{} (expected {}, got {})", key, shape_and_dtype(want),
                                         shape_and_dtype(*got)));
    }
  }
  for (const auto& [key, tensor] : given) {
    if (!expected.contains(key)) m.unexpected.push_back(key);
  }
  return m;
}

void load_state_into(const StateDict& expected, const StateDict& given, std::string_view who) {
  const StateDictMismatch m = compare_state_dicts(expected, given);
  EMBER_CHECK(m.empty(), "{}: the state dict does not match: {}", who, m.describe());
  for (const auto& [key, target] : expected) {
    Tensor destination = target;  // shares storage: writes the live tensor
    destination.copy_(given.at(key));
  }
}

}  // namespace ember
