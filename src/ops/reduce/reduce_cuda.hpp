// Internal: the CUDA implementations behind ops::sum, ops::column_sums and ops::max, and the
// small helpers that the softmax + cross-entropy host code shares with them. Arguments arrive
// validated by the dispatching functions in src/ops/reduce/reduce.cpp.
#pragma once

#include <cuda_runtime.h>

#include "ops/common/element_type.hpp"
#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"
#include "ops/reduce/reduce_launchers.hpp"

namespace ember::ops::cuda {

void sum(Stream& stream, const TensorView& out, const TensorView& x, bool accumulate);
void column_sums(Stream& stream, const TensorView& out, const TensorView& x, bool accumulate);
void max(Stream& stream, const TensorView& out, const TensorView& x);  // x is not empty

// Makes the stream's device current and returns the stream's handle.
cudaStream_t enter(const Stream& stream);

}  // namespace ember::ops::cuda
