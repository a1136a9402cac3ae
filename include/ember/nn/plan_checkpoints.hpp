// plan_checkpoints: which children of a Sequential to checkpoint so that a training step's peak
// allocation fits a memory budget, with the least recompute.
//
// It measures the model once, on a sample batch, with the allocator's statistics
// (memory::stats): what each child's training forward keeps, its output, the step's transient
// memory in forward and backward, and each child's forward time. Checkpointing child i keeps only
// its input (the previous child's output), and its backward first runs its forward again. The
// predicted peak of a plan is base (what was allocated before: parameters, gradients, optimizer
// state, the batch) plus the larger of
//   forward: what all children keep under the plan + the forward's transient memory;
//   backward: the largest, over children i (visited last to first, the later ones having freed
//     theirs), of what the children before i keep + all that i keeps (recomputed, if
//     checkpointed) + the backward's transient memory.
// Children are chosen greedily by memory saved per second of recompute until the prediction
// fits.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ember/nn/sequential.hpp"

namespace ember::nn {

struct CheckpointPlan {
  std::vector<size_t> checkpointed;     // children to wrap in Checkpoint, in order
  std::vector<int64_t> kept_bytes;      // per child: what its training forward keeps
  std::vector<int64_t> output_bytes;    // per child: its output
  std::vector<double> forward_seconds;  // per child
  int64_t base_bytes = 0;
  int64_t forward_transient_bytes = 0;
  int64_t backward_transient_bytes = 0;
  int64_t budget_bytes = 0;
  int64_t predicted_peak_bytes = 0;
  int64_t unplanned_peak_bytes = 0;  // predicted without checkpointing (as measured)
  int64_t least_peak_bytes = 0;      // predicted with every child checkpointed
  double predicted_recompute = 0;    // recomputed forward time / one forward's time
  std::string describe() const;      // a few lines: blocks, predicted peak, recompute
};

// Measures `model` (children on one device, training mode) with one forward and backward of
// `sample_batch` (the output gradient all ones), on context.stream, and plans for
// `budget_bytes`. The measurement leaves no trace: gradients are restored bitwise, dropout
// layers keep their step history, and grad-ready callbacks (set on `model`) do not fire. A budget
// below the least any plan can reach is an Error naming that least peak.
CheckpointPlan plan_checkpoints(Sequential& model, const Tensor& sample_batch, int64_t budget_bytes,
                                const Context& context);

// Wraps the planned children in nn::Checkpoint (names unchanged).
void apply_checkpoint_plan(Sequential& model, const CheckpointPlan& plan);

}  // namespace ember::nn
