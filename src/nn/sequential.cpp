#include "ember/nn/sequential.hpp"

#include <fmt/format.h>

namespace ember::nn {

Sequential& Sequential::add(std::shared_ptr<Module> module) {
  EMBER_CHECK(module != nullptr, "Sequential::add: the module is null");
  if (callback_) module->set_grad_ready_callback(callback_);
  modules_.push_back(std::move(module));
  return *this;
}

Tensor Sequential::forward(Context& ctx, const Tensor& x) {
  Tensor h = x;
  for (auto& m : modules_) h = m->forward(ctx, h);
  return h;
}

Tensor Sequential::backward(Context& ctx, const Tensor& dy) {
  Tensor g = dy;
  for (auto it = modules_.rbegin(); it != modules_.rend(); ++it) g = (*it)->backward(ctx, g);
  return g;
}

std::vector<Parameter*> Sequential::parameters() {
  std::vector<Parameter*> all;
  for (size_t i = 0; i < modules_.size(); ++i) {
    for (Parameter* p : modules_[i]->parameters()) {
      // Prefix once: a parameter already named "<i>.<name>" by an earlier call keeps its name.
      const std::string prefix = fmt::format("{}.", i);
      if (!p->name.starts_with(prefix)) p->name = prefix + p->name;
      all.push_back(p);
    }
  }
  return all;
}

void Sequential::drop_saved() {
  for (auto& m : modules_) m->drop_saved();
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

void Sequential::set_grad_ready_callback(GradReadyCallback callback) {
  callback_ = std::move(callback);
  for (auto& m : modules_) m->set_grad_ready_callback(callback_);
}

}  // namespace ember::nn
