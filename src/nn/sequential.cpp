#include "ember/nn/sequential.hpp"

#include <optional>

#include "ember/core/profile.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "ember/core/denormals.hpp"

namespace ember::nn {

Sequential::~Sequential() {
  for (auto& m : modules_) {
    if (m->parent() != this) continue;
    m->set_parent(nullptr);
    m->set_path("");
    if (callback_) m->set_grad_ready_callback(nullptr);  // it may capture what dies with us
  }
}

Sequential& Sequential::add(std::shared_ptr<Module> module) {
  return add(fmt::format("{}", modules_.size()), std::move(module));
}

Sequential& Sequential::add(std::string name, std::shared_ptr<Module> module) {
  EMBER_CHECK(module != nullptr, "Sequential::add('{}'): the module is null", name);
  EMBER_CHECK(!name.empty() && name.find('.') == std::string::npos,
              "Sequential::add('{}'): a child's name must be non-empty and contain no '.'", name);
  EMBER_CHECK(std::find(names_.begin(), names_.end(), name) == names_.end(),
              "Sequential::add('{}'): this Sequential already has a child named '{}'", name, name);
  EMBER_CHECK(module->parent() == nullptr,
              "Sequential::add('{}'): {} is already registered (as '{}'); a module appears once "
              "in a model: its saved activations and gradients belong to one use. Build "
              "another module for a second use",
              name, module->name(), module->path());
  for (const Module* m = this; m != nullptr; m = m->parent()) {
    EMBER_CHECK(m != module.get(), "Sequential::add('{}'): the module contains this Sequential",
                name);
  }
  if (callback_) module->set_grad_ready_callback(callback_);
  module->train(is_training());
  module->set_parent(this);
  module->set_path(qualified(name));
  modules_.push_back(std::move(module));
  names_.push_back(std::move(name));
  return *this;
}

void Sequential::set_path(std::string path) {
  Module::set_path(std::move(path));
  for (size_t i = 0; i < modules_.size(); ++i) modules_[i]->set_path(qualified(names_[i]));
}

void Sequential::wrap_child(
    size_t i, const std::function<std::shared_ptr<Module>(std::shared_ptr<Module>)>& wrap) {
  EMBER_CHECK(i < modules_.size(), "Sequential::wrap_child({}): only {} children", i,
              modules_.size());
  EMBER_CHECK(!modules_[i]->has_saved(),
              "Sequential::wrap_child({}): the child holds saved activations; run backward or "
              "drop_saved() first",
              i);
  std::shared_ptr<Module> old = modules_[i];
  old->set_parent(nullptr);
  old->set_path("");
  std::shared_ptr<Module> wrapped;
  try {
    wrapped = wrap(old);
    EMBER_CHECK(wrapped != nullptr, "Sequential::wrap_child({}): the wrapper is null", i);
    EMBER_CHECK(wrapped->parent() == nullptr && wrapped.get() != this,
                "Sequential::wrap_child({}): the wrapper {} is already registered (as '{}'); a "
                "module appears once in a model",
                i, wrapped->name(), wrapped->path());
    for (size_t j = 0; j < modules_.size(); ++j) {
      EMBER_CHECK(j == i || modules_[j] != wrapped,
                  "Sequential::wrap_child({}): the wrapper is child {} already", i, j);
    }
  } catch (...) {
    old->set_parent(this);
    old->set_path(qualified(names_[i]));
    throw;
  }
  if (callback_) wrapped->set_grad_ready_callback(callback_);
  wrapped->train(is_training());
  wrapped->set_parent(this);
  wrapped->set_path(qualified(names_[i]));
  modules_[i] = std::move(wrapped);
}

Module& Sequential::child(const std::string& name) {
  const auto it = std::find(names_.begin(), names_.end(), name);
  EMBER_CHECK(it != names_.end(), "Sequential::child('{}'): no such child (children: {})", name,
              fmt::join(names_, ", "));
  return *modules_[static_cast<size_t>(it - names_.begin())];
}

namespace {
// "<path> (<name>) <what>", the census's key for a child's output or input gradient.
std::string census_label(const Module& m, const char* what) {
  return fmt::format("{} ({}) {}", m.path().empty() ? "-" : m.path(), m.name(), what);
}
}  // namespace

Tensor Sequential::forward(Context& ctx, const Tensor& x) {
  Tensor h = x;
  size_t done = 0;
  try {
    const bool census = subnormal_census();
    for (; done < modules_.size(); ++done) {
      std::optional<profile::Range> range;  // a trace's module range, when one records
      if (profile::active() != nullptr) range.emplace(names_[done] + " forward", "module");
      h = modules_[done]->forward(ctx, h);
      if (census) detail::census_add(census_label(*modules_[done], "output"), h);
    }
  } catch (...) {
    // What this call saved goes: a corrected retry is not "forward twice".
    if (ctx.training) {
      for (size_t i = 0; i < done; ++i) modules_[i]->drop_saved();
    }
    throw;
  }
  return h;
}

Tensor Sequential::backward(Context& ctx, const Tensor& dy) {
  Tensor g = dy;
  for (size_t i = modules_.size(); i-- > 0;) {
    if (i < released_.size() && released_[i]) {
      released_[i] = false;
      modules_[i]->restore_input(modules_[i - 1]->recompute_output(ctx));
    }
    {
      std::optional<profile::Range> range;
      if (profile::active() != nullptr) range.emplace(names_[i] + " backward", "module");
      g = modules_[i]->backward(ctx, g);
    }
    if (g.defined() && subnormal_census()) {
      detail::census_add(census_label(*modules_[i], "input gradient"), g);
    }
  }
  released_.clear();
  return g;
}

int64_t Sequential::release_recomputable_inputs() {
  // Releases already made (by a selective Checkpoint nested inside another) stay recorded.
  if (released_.size() != modules_.size()) released_.assign(modules_.size(), false);
  int64_t bytes = 0;
  for (size_t i = 1; i < modules_.size(); ++i) {
    if (released_[i]) continue;
    if (!modules_[i]->releases_input() || !modules_[i - 1]->recomputes_output()) continue;
    bytes += static_cast<int64_t>(modules_[i]->release_input().nbytes());
    released_[i] = true;
  }
  return bytes;
}

std::vector<Parameter*> Sequential::parameters() {
  std::vector<Parameter*> all;
  for (auto& m : modules_) {
    for (Parameter* p : m->parameters()) all.push_back(p);
  }
  return all;
}

void Sequential::drop_saved() {
  for (auto& m : modules_) m->drop_saved();
  released_.clear();
}

bool Sequential::has_saved() const {
  for (const auto& m : modules_) {
    if (m->has_saved()) return true;
  }
  return false;
}

std::string Sequential::name() const {
  std::string text = "Sequential(";
  for (size_t i = 0; i < modules_.size(); ++i) {
    text += (i ? ", " : "") + modules_[i]->name();
  }
  return text + ")";
}

void Sequential::for_each_module(const std::function<void(Module&)>& f) {
  f(*this);
  for (auto& m : modules_) m->for_each_module(f);
}

void Sequential::train(bool on) {
  Module::train(on);
  for (auto& m : modules_) m->train(on);
}

void Sequential::set_grad_ready_callback(GradReadyCallback callback) {
  callback_ = std::move(callback);
  for (auto& m : modules_) m->set_grad_ready_callback(callback_);
}

}  // namespace ember::nn
