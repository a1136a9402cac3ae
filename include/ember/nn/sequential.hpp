// Sequential: modules applied in order; backward runs them in reverse.
#pragma once

#include <memory>
#include <vector>

#include "ember/nn/module.hpp"

namespace ember::nn {

class Sequential final : public Module {
 public:
  Sequential() = default;

  // Appends a module; returns *this for chaining.
  Sequential& add(std::shared_ptr<Module> module);
  template <class M, class... Args>
  Sequential& emplace(Args&&... args) {
    return add(std::make_shared<M>(std::forward<Args>(args)...));
  }

  Tensor forward(Context& ctx, const Tensor& x) override;
  Tensor backward(Context& ctx, const Tensor& dy) override;
  // Parameters of every child, named "<index>.<name>" (e.g. "0.weight").
  std::vector<Parameter*> parameters() override;
  void drop_saved() override;
  bool has_saved() const override;
  std::string name() const override;
  void set_grad_ready_callback(GradReadyCallback callback) override;

  size_t size() const { return modules_.size(); }
  Module& operator[](size_t i) { return *modules_.at(i); }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
  GradReadyCallback callback_;
};

}  // namespace ember::nn
