// Sequential: modules applied in order; backward runs them in reverse.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ember/nn/module.hpp"

namespace ember::nn {

class Sequential final : public Module {
 public:
  Sequential() = default;
  // Children that outlive this Sequential become roots again (no parent, names without its
  // path): they can be registered elsewhere.
  ~Sequential() override;
  Sequential(const Sequential&) = delete;
  Sequential& operator=(const Sequential&) = delete;

  // Appends a module under `name` (its parameters become "<name>.weight", nested Sequentials
  // "<name>.<child>.weight"); returns *this for chaining. The name must be non-empty, free of
  // '.', and unique here; a module can be added once, to one container.
  Sequential& add(std::string name, std::shared_ptr<Module> module);
  // Appends under its index as name ("0", "1", ...).
  Sequential& add(std::shared_ptr<Module> module);
  template <class M, class... Args>
  Sequential& emplace(Args&&... args) {
    return add(std::make_shared<M>(std::forward<Args>(args)...));
  }

  Tensor forward(Context& ctx, const Tensor& x) override;
  Tensor backward(Context& ctx, const Tensor& dy) override;
  // Parameters of every child, in order, named "<child name>.<name>" (e.g. "0.weight").
  std::vector<Parameter*> parameters() override;
  void set_path(std::string path) override;
  void drop_saved() override;
  bool has_saved() const override;
  std::string name() const override;
  void set_grad_ready_callback(GradReadyCallback callback) override;
  void train(bool on = true) override;
  void for_each_module(const std::function<void(Module&)>& f) override;
  const GradReadyCallback& grad_ready_callback() const override { return callback_; }

  size_t size() const { return modules_.size(); }
  // Selective checkpointing: after a training forward, each child whose saved input its
  // predecessor can recompute hands it over; backward recomputes it just before that child's
  // backward. Returns the bytes released.
  int64_t release_recomputable_inputs();
  // Replaces child i by wrap(child) (e.g. a Checkpoint around it), under the same name and path.
  void wrap_child(size_t i,
                  const std::function<std::shared_ptr<Module>(std::shared_ptr<Module>)>& wrap);
  Module& operator[](size_t i) { return *modules_.at(i); }
  Module& child(const std::string& name);  // an Error naming the children when absent
  const std::vector<std::string>& child_names() const { return names_; }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
  std::vector<std::string> names_;
  std::vector<bool> released_;  // child i's input was handed over (release_recomputable_inputs)
  GradReadyCallback callback_;
};

}  // namespace ember::nn
