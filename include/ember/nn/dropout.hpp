// Dropout: in train mode, zeroes each element with probability p and scales the rest by
// 1 / (1 - p); in eval mode (Module::eval) the identity. The mask comes from Philox4x32-10
// keyed by (seed, Context::step, element) (ops::dropout_forward): the layer's seed tells layers
// apart, the step tells micro-batches apart, and a re-run forward of the same micro-batch
// (activation checkpointing) draws the same mask, on the CPU and on CUDA alike. Steps must
// increase: a training forward at a step not after the last one whose backward ran is an Error.
#pragma once

#include <cstdint>
#include <optional>

#include "ember/nn/module.hpp"

namespace ember::nn {

struct DropoutOptions {
  float p = 0.1f;  // in [0, 1]
  // Without one, the next default seed (nn/seed.hpp), so that layers differ.
  std::optional<uint64_t> seed;
};

class Dropout final : public Module {
 public:
  explicit Dropout(const DropoutOptions& options = {});

  Tensor forward(Context& ctx, const Tensor& x) override;
  Tensor backward(Context& ctx, const Tensor& dy) override;
  void drop_saved() override {
    mask_ = Tensor();
    identity_saved_ = false;
  }
  bool has_saved() const override { return mask_.defined() || identity_saved_; }
  std::string name() const override;

  float p() const { return p_; }
  uint64_t seed() const { return seed_; }
  // The last step whose backward ran: training forwards must come at later steps. Saved and
  // restored by code that runs a measuring step (nn::plan_checkpoints).
  std::optional<uint64_t> finished_step() const { return finished_step_; }
  void set_finished_step(std::optional<uint64_t> step) { finished_step_ = step; }

 private:
  float p_;
  uint64_t seed_;
  Tensor mask_;  // u8, saved by a dropping forward
  DType input_dtype_ = DType::f32;
  bool identity_saved_ = false;  // a training forward that dropped nothing (eval mode, p = 0)
  // The step whose backward ran last: a forward for it again means the step was not advanced.
  std::optional<uint64_t> finished_step_;
  uint64_t saved_step_ = 0;
};

}  // namespace ember::nn
