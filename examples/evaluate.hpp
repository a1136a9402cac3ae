// Evaluation shared by the examples.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "ember/ember.hpp"

namespace example {

// Fraction of `data` that the model classifies correctly, in batches.
inline double accuracy(ember::nn::Module& model, const ember::data::Dataset& data,
                       ember::Stream& stream, int64_t batch, ember::nn::Precision precision) {
  using namespace ember;
  nn::Context ctx{stream, /*training=*/false, precision};
  const int64_t n = data.size();
  const int64_t features = data.inputs.shape()[1];
  int64_t correct = 0;
  Tensor hits = Tensor::empty({1}, DType::i64, stream);
  for (int64_t begin = 0; begin < n; begin += batch) {
    const int64_t end = std::min(n, begin + batch);
    Tensor x = data.inputs.slice(begin, end).to(stream);
    Tensor y = data.labels.slice(begin, end).to(stream);
    Tensor logits = model.forward(ctx, x.reshape({end - begin, features}));
    ops::count_correct(stream, hits, logits, y);
    correct += static_cast<int64_t>(hits.item());
  }
  return n == 0 ? 0.0 : static_cast<double>(correct) / static_cast<double>(n);
}

// An Error when the loss of `step` is not finite.
inline void check_loss(double loss, int64_t step) {
  EMBER_CHECK(std::isfinite(loss), "the loss is {} at step {}: training diverged", loss, step);
}

}  // namespace example
