// Internal: the CUDA implementations behind ops::softmax_cross_entropy_forward/backward,
// ops::argmax and ops::count_correct. Arguments arrive validated by
// src/ops/softmax_cross_entropy/softmax_cross_entropy.cpp, except the label values, which live on the device: those
// are checked here, before anything is written.
#pragma once

#include <string_view>

#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"

namespace ember::ops::cuda {

void softmax_cross_entropy_forward(Stream& stream, std::string_view op, const TensorView& loss,
                                   const TensorView& probs, const TensorView& logits,
                                   const TensorView& labels);
void softmax_cross_entropy_backward(Stream& stream, std::string_view op, const TensorView& dlogits,
                                    const TensorView& probs, const TensorView& labels, float dloss);
void argmax(Stream& stream, const TensorView& out, const TensorView& x);
void count_correct(Stream& stream, std::string_view op, const TensorView& correct,
                   const TensorView& logits, const TensorView& labels);

}  // namespace ember::ops::cuda
