// make_mlp: the multi-layer perceptron of the examples and benchmarks.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "ember/nn/sequential.hpp"

namespace ember::nn {

enum class ActivationKind { relu, gelu };

struct MlpOptions {
  int64_t inputs = 2;
  int64_t hidden = 256;  // width of each hidden layer
  int64_t depth = 4;     // number of hidden layers
  int64_t outputs = 10;
  ActivationKind activation = ActivationKind::relu;
  // Layer i is seeded from (seed, i); without a seed each layer takes the next default seed.
  std::optional<uint64_t> seed;
  Device device;
};

// Linear(inputs, hidden, act), [Linear(hidden, hidden, act)] x (depth - 1), Linear(hidden,
// outputs): each hidden layer's activation fused into its matmul (nn::Linear). depth 0 gives a
// single Linear(inputs, outputs).
std::shared_ptr<Sequential> make_mlp(const MlpOptions& options);

}  // namespace ember::nn
