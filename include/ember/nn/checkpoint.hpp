// Activation checkpointing: trade compute for memory.
//
// Checkpoint(module): a training forward runs the module without saving anything and keeps only
// its input; backward runs the module's forward again (saving, with the same Context::step, so
// dropout draws the same masks), then its backward. Gradients are bitwise those of training
// without checkpointing, and the grad-ready callbacks fire once per parameter, in the module's
// own backward order. Parameter names do not change (nn::Wrapper).
//
// checkpoint_sequential(sequential, segments): PyTorch's: the Sequential's children cut into
// `segments` consecutive runs of about equal length, every run but the last checkpointed (the
// last one's forward saves as usual: its backward comes first).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ember/nn/sequential.hpp"
#include "ember/nn/wrapper.hpp"

namespace ember::nn {

// full: keep only the input, recompute everything. selective (after Korthikanti et al. 2022):
// the forward saves as usual, then hands over the inputs that cheap work can remake (a
// LayerNorm's or an activation's output, a fused activation's output from its saved matmul
// pre-activation); backward remakes each just before it is needed. Matmul outputs stay, no
// matmul is recomputed. Within the Sequentials inside the module; exact (bitwise gradients) on
// the CPU and the emulator.
enum class CheckpointPolicy { full, selective };

class Checkpoint final : public Wrapper {
 public:
  explicit Checkpoint(std::shared_ptr<Module> inner,
                      CheckpointPolicy policy = CheckpointPolicy::full)
      : Wrapper(std::move(inner), "Checkpoint"), policy_(policy) {}
  CheckpointPolicy policy() const { return policy_; }

  Tensor forward(Context& ctx, const Tensor& x) override;
  Tensor backward(Context& ctx, const Tensor& dy) override;
  std::string name() const override {
    return std::string(policy_ == CheckpointPolicy::full ? "Checkpoint("
                                                         : "Checkpoint(selective, ") +
           inner_->name() + ")";
  }
  bool has_saved() const override { return input_.defined() || inner_->has_saved(); }
  void drop_saved() override {
    input_ = Tensor();
    inner_->drop_saved();
  }

 private:
  CheckpointPolicy policy_;
  Tensor input_;
  uint64_t step_ = 0;
};

class CheckpointSequential final : public Wrapper {
 public:
  CheckpointSequential(std::shared_ptr<Sequential> sequential, int64_t segments);

  Tensor forward(Context& ctx, const Tensor& x) override;
  Tensor backward(Context& ctx, const Tensor& dy) override;
  std::string name() const override;
  bool has_saved() const override;
  void drop_saved() override;

  // [begin, end) child indices of each segment.
  const std::vector<std::pair<size_t, size_t>>& segments() const { return segments_; }

 private:
  Sequential& seq() { return static_cast<Sequential&>(*inner_); }
  std::vector<std::pair<size_t, size_t>> segments_;
  std::vector<Tensor> inputs_;  // each checkpointed segment's input
  uint64_t step_ = 0;
};

std::shared_ptr<CheckpointSequential> checkpoint_sequential(std::shared_ptr<Sequential> sequential,
                                                            int64_t segments);

}  // namespace ember::nn
