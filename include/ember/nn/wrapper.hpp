// Wrapper: a module around one inner module (Residual, Checkpoint). The inner module's
// parameters are the wrapper's, under the wrapper's own path: wrapping adds no name, so
// "3.0.weight" stays "3.0.weight" and state dicts load either way. Train/eval mode, the
// grad-ready callback and drop_saved pass through.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ember/nn/module.hpp"

namespace ember::nn {

class Wrapper : public Module {
 public:
  // `inner` must not be registered elsewhere (a module appears once in a model).
  Wrapper(std::shared_ptr<Module> inner, const char* kind);
  ~Wrapper() override;
  Wrapper(const Wrapper&) = delete;
  Wrapper& operator=(const Wrapper&) = delete;

  std::vector<Parameter*> parameters() override { return inner_->parameters(); }
  void set_path(std::string path) override;
  void drop_saved() override { inner_->drop_saved(); }
  bool has_saved() const override { return inner_->has_saved(); }
  void set_grad_ready_callback(GradReadyCallback callback) override;
  void train(bool on = true) override;
  void for_each_module(const std::function<void(Module&)>& f) override {
    f(*this);
    inner_->for_each_module(f);
  }
  const GradReadyCallback& grad_ready_callback() const override {
    return inner_->grad_ready_callback();
  }

  Module& inner() { return *inner_; }

 protected:
  std::shared_ptr<Module> inner_;
};

}  // namespace ember::nn
