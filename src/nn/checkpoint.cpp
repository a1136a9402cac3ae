#include "ember/nn/checkpoint.hpp"

#include <fmt/format.h>

namespace ember::nn {

Tensor Checkpoint::forward(Context& ctx, const Tensor& x) {
  if (!ctx.training) return inner_->forward(ctx, x);
  check_nothing_saved("Checkpoint::forward");
  if (policy_ == CheckpointPolicy::selective) {
    Tensor y = inner_->forward(ctx, x);
    inner_->for_each_module([](Module& m) {
      if (auto* s = dynamic_cast<Sequential*>(&m)) s->release_recomputable_inputs();
    });
    return y;
  }
  Context quiet = ctx;
  quiet.training = false;  // the module saves nothing: backward runs it again
  Tensor y = inner_->forward(quiet, x);
  input_ = x;
  step_ = ctx.step;
  return y;
}

Tensor Checkpoint::backward(Context& ctx, const Tensor& dy) {
  if (policy_ == CheckpointPolicy::selective) return inner_->backward(ctx, dy);
  check_saved(input_.defined(), "input", "the saved input was dropped");
  Context rerun = ctx;
  rerun.training = true;
  rerun.step = step_;  // the same micro-batch: the same dropout masks
  const Tensor x = input_;
  input_ = Tensor();
  try {
    inner_->forward(rerun, x);
  } catch (...) {
    inner_->drop_saved();
    throw;
  }
  return inner_->backward(rerun, dy);
}

CheckpointSequential::CheckpointSequential(std::shared_ptr<Sequential> sequential, int64_t segments)
    : Wrapper(std::move(sequential), "checkpoint_sequential") {
  const auto n = static_cast<int64_t>(seq().size());
  EMBER_CHECK(segments >= 1 && segments <= std::max<int64_t>(n, 1),
              "checkpoint_sequential: segments must be in [1, {}] (the Sequential's {} children), "
              "not {}",
              std::max<int64_t>(n, 1), n, segments);
  // As PyTorch: segments of n / segments children, the last one taking the rest.
  const int64_t size = n / segments;
  for (int64_t s = 0; s < segments; ++s) {
    const int64_t begin = s * size, end = s == segments - 1 ? n : begin + size;
    segments_.emplace_back(static_cast<size_t>(begin), static_cast<size_t>(end));
  }
}

std::string CheckpointSequential::name() const {
  return fmt::format("CheckpointSequential({} segments, {})", segments_.size(), inner_->name());
}

bool CheckpointSequential::has_saved() const {
  return !inputs_.empty() || inner_->has_saved();
}

void CheckpointSequential::drop_saved() {
  inputs_.clear();
  inner_->drop_saved();
}

Tensor CheckpointSequential::forward(Context& ctx, const Tensor& x) {
  const size_t planned = segments_.empty() ? 0 : segments_.back().second;
  EMBER_CHECK(seq().size() == planned,
              "{}: the Sequential has {} children, but its segments were cut for {}; call "
              "checkpoint_sequential again after changing it",
              name(), seq().size(), planned);
  if (!ctx.training) return inner_->forward(ctx, x);
  check_nothing_saved("checkpoint_sequential forward");
  Context quiet = ctx;
  quiet.training = false;
  Tensor h = x;
  try {
    for (size_t s = 0; s < segments_.size(); ++s) {
      const bool last = s + 1 == segments_.size();
      if (!last) inputs_.push_back(h);
      for (size_t i = segments_[s].first; i < segments_[s].second; ++i) {
        h = seq()[i].forward(last ? ctx : quiet, h);
      }
    }
  } catch (...) {
    drop_saved();
    throw;
  }
  step_ = ctx.step;
  return h;
}

Tensor CheckpointSequential::backward(Context& ctx, const Tensor& dy) {
  EMBER_CHECK(inputs_.size() + 1 == segments_.size(),
              "{}: backward without a training forward (or its saved inputs were dropped)", name());
  Context rerun = ctx;
  rerun.training = true;
  rerun.step = step_;
  Tensor g = dy;
  for (size_t s = segments_.size(); s-- > 0;) {
    const auto [begin, end] = segments_[s];
    if (s + 1 < segments_.size()) {  // checkpointed: run its forward again, saving
      Tensor h = inputs_[s];
      inputs_.pop_back();
      for (size_t i = begin; i < end; ++i) h = seq()[i].forward(rerun, h);
    }
    for (size_t i = end; i-- > begin;) g = seq()[i].backward(rerun, g);
  }
  return g;
}

std::shared_ptr<CheckpointSequential> checkpoint_sequential(std::shared_ptr<Sequential> sequential,
                                                            int64_t segments) {
  return std::make_shared<CheckpointSequential>(std::move(sequential), segments);
}

}  // namespace ember::nn
