#include "ember/nn/module.hpp"

#include <fmt/format.h>

namespace ember::nn {

std::vector<std::pair<std::string, Parameter*>> Module::named_parameters() {
  std::vector<std::pair<std::string, Parameter*>> named;
  for (Parameter* p : parameters()) named.emplace_back(p->name, p);
  return named;
}

StateDict Module::state_dict() {
  StateDict state;
  for (auto& [name, p] : named_parameters()) state.insert(name, p->value);
  return state;
}

void Module::load_state_dict(const StateDict& state) {
  load_state_into(state_dict(), state, fmt::format("{}.load_state_dict", name()));
}

void Module::check_nothing_saved(const char* what) const {
  EMBER_CHECK(!has_saved(),
              "{}{}{}: forward ran again in training mode before backward used what the last "
              "forward saved (forward twice, or one module used twice in a graph). Run "
              "backward first, forward with Context::training = false for inference, call "
              "drop_saved() to discard, or use a separate module for each use",
              what, path_.empty() ? "" : " at ", path_);
}

}  // namespace ember::nn
