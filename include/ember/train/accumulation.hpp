// Gradient accumulation: one optimizer step from K micro-batches, for batches that do not fit.
//
//   train::Accumulation accumulation(K);
//   optimizer.zero_grad();
//   accumulation.run(ctx, [&](const train::MicroBatch& mb) {
//     Tensor loss = criterion.forward(ctx, model->forward(ctx, x[mb.index]), y[mb.index]);
//     model->backward(ctx, criterion.backward(ctx, mb.dloss));  // adds into the gradients
//   }, scaler.scale());                                        // AMP; omit without it
//   scaler.step(stream, optimizer);  // unscales once, right before the step (or optimizer.step)
//
// Each micro-batch's loss gradient is 1/K (times the loss scale under AMP), made once on the
// device, so the summed gradients are those of the mean loss over all K x B samples. ctx.step
// advances by one per micro-batch (dropout draws a new mask for each). MicroBatch::last tells
// data parallelism which backward communicates: the others skip it (no_sync).
#pragma once

#include <cstdint>
#include <utility>

#include "ember/core/error.hpp"
#include "ember/core/tensor.hpp"
#include "ember/nn/module.hpp"

namespace ember::train {

struct MicroBatch {
  int64_t index;  // 0 .. K-1
  bool last;      // the step's last micro-batch: the one whose gradients are final
  Tensor dloss;   // the upstream gradient of this micro-batch's loss: scale / K
};

class Accumulation {
 public:
  explicit Accumulation(int64_t micro_batches);
  int64_t micro_batches() const { return k_; }

  // Calls micro_batch(MicroBatch) K times, advancing ctx.step after each. `scale` (one f32
  // element on ctx's device, e.g. amp::GradScaler::scale()) multiplies dloss; absent: 1.
  template <class F>
  void run(nn::Context& ctx, F&& micro_batch, const Tensor& scale = Tensor()) const {
    const Tensor dloss = loss_gradient(ctx.stream, scale);
    for (int64_t i = 0; i < k_; ++i) {
      micro_batch(MicroBatch{i, i + 1 == k_, dloss});
      ++ctx.step;
    }
  }

  // scale / K (or 1 / K), one f32 element on the stream's device, computed there.
  Tensor loss_gradient(Stream& stream, const Tensor& scale = Tensor()) const;

 private:
  int64_t k_;
};

}  // namespace ember::train
