#include "ember/train/gpt.hpp"

#include <cmath>
#include <limits>

#include "ember/nn/embedding.hpp"
#include "ember/nn/layer_norm.hpp"
#include "ember/nn/seed.hpp"
#include "ember/nn/tied_linear.hpp"
#include "ember/nn/transformer.hpp"

namespace ember::train {

GptConfig gpt_config(const std::string& name) {
  if (name == "d12") return GptConfig::d12();
  if (name == "small") return GptConfig::small_bytes();
  EMBER_THROW("gpt_config: unknown model '{}' (choose d12 or small)", name);
}

std::shared_ptr<nn::Sequential> make_gpt(const GptConfig& c) {
  EMBER_CHECK(c.vocab > 0 && c.context > 0 && c.layers > 0,
              "make_gpt: vocab, context and layers must be positive, not {}, {} and {}", c.vocab,
              c.context, c.layers);
  EMBER_CHECK(c.vocab_multiple > 0 && c.vocab_multiple <= (int64_t{1} << 32),
              "make_gpt: vocab_multiple must be in 1..2^32 (1: no padding), not {}",
              c.vocab_multiple);
  EMBER_CHECK(c.vocab <= std::numeric_limits<int32_t>::max(),
              "make_gpt: a vocab of {} is beyond int32 token ids (at most {})", c.vocab,
              std::numeric_limits<int32_t>::max());
  EMBER_CHECK(c.dim > 0, "make_gpt: the width must be positive, not {}", c.dim);
  EMBER_CHECK(c.heads > 0 && c.dim % c.heads == 0,
              "make_gpt: heads ({}) must divide the width ({})", c.heads, c.dim);
  EMBER_CHECK(c.dim / c.heads <= 256, "make_gpt: a head of {} is wider than 256", c.dim / c.heads);
  EMBER_CHECK(std::isfinite(c.dropout) && c.dropout >= 0.0f && c.dropout < 1.0f,
              "make_gpt: dropout must be in [0, 1), not {}", c.dropout);
  const uint64_t seed = c.seed ? *c.seed : nn::next_default_seed();
  auto embed = std::make_shared<nn::TokenPositionEmbedding>(
      c.vocab, c.context, c.dim,
      nn::EmbeddingOptions{.seed = seed, .device = c.device, .table_rows = c.padded_vocab()});
  auto layers = std::make_shared<nn::Sequential>();
  for (int64_t i = 0; i < c.layers; ++i) {
    layers->add(nn::make_transformer_block({.dim = c.dim,
                                            .heads = c.heads,
                                            .dropout = c.dropout,
                                            .seed = seed + 1 + static_cast<uint64_t>(i),
                                            .device = c.device}));
  }
  auto model = std::make_shared<nn::Sequential>();
  model->add("embed", embed);
  model->add("h", layers);
  // ln_f feeds the tied head only (compute_dtype_output: see make_transformer_block).
  model->add("ln_f",
             std::make_shared<nn::LayerNorm>(
                 c.dim, nn::LayerNormOptions{.device = c.device, .compute_dtype_output = true}));
  model->add("lm_head", std::make_shared<nn::TiedLinear>(embed, embed->token_table(), c.vocab));
  // GPT-2's initialization of the blocks' linear layers.
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(c.layers));
  uint64_t stream = 0;
  for (auto& [name, p] : layers->named_parameters()) {
    if (name.ends_with(".bias") && p->value.rank() == 1 && name.find("ln_") == std::string::npos) {
      p->value.fill_(0.0);
    } else if (name.ends_with(".weight") && p->value.rank() == 2) {
      const bool residual = name.find("c_proj") != std::string::npos;
      p->value.normal_(seed * 7919u + ++stream, 0.0, residual ? residual_std : 0.02);
    }
  }
  return model;
}

}  // namespace ember::train
