// One optimizer step as a multi-tensor operation, the same on the CPU (src/train/apply_rule.hpp)
// and in one CUDA launch (ember/kernels/multi_tensor.cuh): a rule (update_rules.hpp) plus what the
// step reads besides the tensors.
//
// Operands per tensor: param, grad, then the rule's kState state slots. Every block (and the
// CPU, once) calls begin(): it reads AMP's found-inf flag and the step counters, derives the
// per-step scalars, and the first block publishes the advanced counters. A step whose
// found-inf flag is set changes nothing and does not advance the counters.
//
// The counters are double-buffered, so that one launch can read the old ones in every block
// while its first block writes the new ones: the k-th step call reads slot k % 2 and writes
// slot (k + 1) % 2.
#pragma once

#include "ember/core/macros.hpp"
#include "ember/train/update_rules.hpp"

namespace ember::train {

struct StepInputs {
  const float* found_inf = nullptr;  // nonzero: skip this step (null: never)
  const float* inv_scale = nullptr;  // gradients are multiplied by it (null: by 1)
  const rules::StepCounters* counters_in = nullptr;
  rules::StepCounters* counters_out = nullptr;
  const float* lr = nullptr;  // the learning rate in memory (Optimizer::keep_lr_on_device)
};

template <class Rule>
struct StepOp {
  static constexpr int kDepth = 2 + Rule::kState;
  Rule rule;
  StepInputs in;

  struct Block {
    typename Rule::Scalars scalars;
    rules::StepCounters next;
    float inv_scale;
    bool skip;
  };

  EMBER_HOST_DEVICE Block begin() const {
    Block b;
    b.skip = in.found_inf != nullptr && *in.found_inf != 0.0f;
    b.next = b.skip ? *in.counters_in : rule.advance(*in.counters_in);
    if (in.lr != nullptr) {
      Rule r = rule;
      r.lr = *in.lr;
      b.scalars = r.scalars(b.next);
    } else {
      b.scalars = rule.scalars(b.next);
    }
    b.inv_scale = in.inv_scale != nullptr ? *in.inv_scale : 1.0f;
    return b;
  }
  EMBER_HOST_DEVICE void publish(const Block& b) const { *in.counters_out = b.next; }
  EMBER_HOST_DEVICE void operator()(const Block& b, float (&x)[kDepth]) const {
    const float g = in.inv_scale != nullptr ? rules::mul(x[1], b.inv_scale) : x[1];
    rule.update(b.scalars, g, x);
  }
};

}  // namespace ember::train
