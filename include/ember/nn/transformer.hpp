// GPT-2's transformer block, pre-norm:
//   "attn": Residual(LayerNorm "ln_1" -> causal self-attention "attn" (nn/attention.hpp))
//   "mlp":  Residual(LayerNorm "ln_2" -> Linear(dim, expansion * dim, GELU fused) "c_fc" ->
//                    Linear(expansion * dim, dim) "c_proj" -> Dropout "dropout")
// on [B, T, dim] (the residual stream stays f32 under autocast).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "ember/nn/sequential.hpp"

namespace ember::nn {

struct TransformerBlockOptions {
  int64_t dim = 768;
  int64_t heads = 12;
  int64_t expansion = 4;
  float dropout = 0.0f;  // after each sublayer's output projection
  // Layers seeded from (seed, i); without a seed, each takes the next default seed.
  std::optional<uint64_t> seed;
  Device device;
};

std::shared_ptr<Sequential> make_transformer_block(const TransformerBlockOptions& options);

}  // namespace ember::nn
