// make_residual_mlp: a deep pre-norm residual MLP, the model of the checkpointing example and
// benchmark:
//   Linear(inputs, width)
//   -> depth x Residual(LayerNorm -> Linear(width, expansion * width, GELU fused) ->
//                       Linear(expansion * width, width) -> Dropout)
//   -> LayerNorm -> Linear(width, outputs)
// Children of the returned Sequential: "0" the input layer, "1" .. "<depth>" the blocks, then
// "norm" and "head". With `checkpoint`, every block is wrapped in nn::Checkpoint (parameter names
// do not change).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "ember/nn/checkpoint.hpp"
#include "ember/nn/sequential.hpp"

namespace ember::train {

struct ResidualMlpOptions {
  int64_t inputs = 2;
  int64_t width = 256;
  int64_t depth = 4;      // residual blocks
  int64_t expansion = 4;  // hidden width of a block: expansion * width
  int64_t outputs = 10;
  float dropout = 0.0f;     // each block's dropout probability
  bool checkpoint = false;  // wrap every block in nn::Checkpoint, with this policy:
  nn::CheckpointPolicy checkpoint_policy = nn::CheckpointPolicy::full;
  // Layer i is seeded from (seed, i); without a seed each layer takes the next default seed.
  std::optional<uint64_t> seed;
  Device device;
};

// One block: Residual(LayerNorm -> Linear(gelu) -> Linear -> Dropout); seeds from `seed`.
std::shared_ptr<nn::Module> make_residual_block(int64_t width, int64_t expansion, float dropout,
                                                std::optional<uint64_t> seed, Device device);

std::shared_ptr<nn::Sequential> make_residual_mlp(const ResidualMlpOptions& options);

}  // namespace ember::train
