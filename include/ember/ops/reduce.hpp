// Reductions. Results are the same at every thread count: work is split into
// fixed chunks whose partial results combine in a fixed order. Sums accumulate
// in double and round once to f32. Outputs are one f32 element of any rank
// ([], [1], ...) where "one element" is said.
#pragma once

#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"

namespace ember::ops {

struct ReduceOptions {
  bool accumulate = false;  // out += result instead of out = result
};

// out (one f32 element) = sum of all elements of x (f32, f16 or bf16); 0 for an empty x
// (with accumulate, out is then left as it was).
void sum(Stream& stream, const TensorView& out, const TensorView& x, const ReduceOptions& = {});
// out[j] = sum over rows i of x[i, j]; x is [M, N] (or [M, ...], flattened), out is [N] f32
// (or x's shape without its first dimension). With accumulate this is the bias-gradient update.
void column_sums(Stream& stream, const TensorView& out, const TensorView& x,
                 const ReduceOptions& = {});
// out (one f32 element) = the largest element of x (nan if any element is nan). Throws for
// an empty x, which has no largest element.
void max(Stream& stream, const TensorView& out, const TensorView& x);

}  // namespace ember::ops
