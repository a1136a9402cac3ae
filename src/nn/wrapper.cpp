#include "ember/nn/wrapper.hpp"

namespace ember::nn {

Wrapper::Wrapper(std::shared_ptr<Module> inner, const char* kind) : inner_(std::move(inner)) {
  EMBER_CHECK(inner_ != nullptr, "{}: the inner module is null", kind);
  EMBER_CHECK(inner_->parent() == nullptr,
              "{}: {} is already registered (as '{}'); a module appears once in a model", kind,
              inner_->name(), inner_->path());
  inner_->set_parent(this);
  inner_->set_path(path());
  Module::train(inner_->is_training());
}

Wrapper::~Wrapper() {
  if (inner_->parent() == this) {
    inner_->set_parent(nullptr);
    inner_->set_path("");
    inner_->set_grad_ready_callback(nullptr);
  }
}

void Wrapper::set_path(std::string path) {
  Module::set_path(path);
  inner_->set_path(std::move(path));
}

void Wrapper::set_grad_ready_callback(GradReadyCallback callback) {
  inner_->set_grad_ready_callback(std::move(callback));
}

void Wrapper::train(bool on) {
  Module::train(on);
  inner_->train(on);
}

}  // namespace ember::nn
