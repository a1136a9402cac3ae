#include "ember/nn/module.hpp"

#include <fmt/format.h>

#include "ember/core/error.hpp"

namespace ember::nn {

void Context::publish_step() {
  EMBER_CHECK(step_counter.defined(), "Context::publish_step: step_counter is undefined");
  EMBER_CHECK(!step_counter.stream().capturing(),
              "Context::publish_step: inside a capture the graph would keep step {} for every "
              "replay; publish before each run of the captured step",
              step);
  EMBER_CHECK(!step_counter_base || step > *step_counter_base,
              "Context::publish_step: step {} is not after the last step published ({}); set "
              "Context::step after each run of a captured step (a replay does not advance it), "
              "or replays repeat the same dropout masks",
              step, step_counter_base.value_or(0));
  EMBER_CHECK(step < (uint64_t{1} << 53), "Context::publish_step: step {} is 2^53 or more", step);
  step_counter.fill_(static_cast<double>(step));
  step_counter_base = step;
}

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
  // The class name only: name() describes every child, thousands of characters for a GPT, which
  // would bury the problem.
  const std::string full = name();
  load_state_into(state_dict(), state,
                  fmt::format("{}.load_state_dict{}", full.substr(0, full.find('(')),
                              path_.empty() ? "" : " at " + path_));
}

void Module::check_nothing_saved(const char* what) const {
  EMBER_CHECK(!has_saved(),
              "{}{}{}: forward ran again in training mode before backward used what the last "
              "forward saved (forward twice, or one module used twice in a graph). Run "
              "backward first, forward with Context::training = false for inference, call "
              "drop_saved() to discard, or use a separate module for each use",
              what, path_.empty() ? "" : " at ", path_);
}

void Module::check_saved(bool saved, const char* what, const char* gone) const {
  EMBER_CHECK(saved,
              "{}: backward needs the {} saved by forward (forward was not run in training mode, "
              "or {})",
              name(), what, gone);
}

}  // namespace ember::nn
