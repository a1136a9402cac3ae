// make_gpt: GPT-2 as an nn::Sequential over token ids [B, T] -> logits [B, T, vocab]:
//   "embed": TokenPositionEmbedding (parameters "embed.wte", "embed.wpe")
//   "h": layers x transformer block (nn/transformer.hpp), children "0", "1", ...
//   "ln_f": LayerNorm
//   "lm_head": TiedLinear on embed.wte (weights tied: one parameter, two uses)
// The vocabulary is padded as llm.c pads it: the token table has padded_vocab() rows (50257 ->
// 50304), so that the classifier's products have aligned rows; the logits are [B, T,
// padded_vocab()], their columns past `vocab` are -inf (probability 0 under softmax, gradient 0
// through softmax_cross_entropy, never sampled), and the padded rows stay zero.
// GPT-2's initialization (as nanoGPT's): Linear weights and both tables normal(0, 0.02), the
// residual projections (every c_proj) normal(0, 0.02 / sqrt(2 * layers)), biases zero.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "ember/nn/sequential.hpp"

namespace ember::train {

struct GptConfig {
  int64_t vocab = 50257;
  // The token table's rows and the logits' width: vocab rounded up to a multiple of this
  // (1..2^32; 1: no padding).
  int64_t vocab_multiple = 128;
  int64_t context = 1024;  // the longest sequence
  int64_t layers = 12;
  int64_t heads = 12;
  int64_t dim = 768;
  float dropout = 0.0f;
  std::optional<uint64_t> seed;  // without one, the layers take the next default seeds
  Device device;

  // GPT-2 small, "d12": 124 M parameters.
  static GptConfig d12() { return {}; }
  // vocab rounded up to a multiple of vocab_multiple (GPT-2: 50304).
  int64_t padded_vocab() const {
    return vocab_multiple > 0 ? (vocab + vocab_multiple - 1) / vocab_multiple * vocab_multiple
                              : vocab;
  }
  // A model for the CPU on bytes: vocab 256, context 256, 4 layers of 4 heads, 256 wide (3.3 M).
  static GptConfig small_bytes() {
    return {.vocab = 256,
            .vocab_multiple = 128,
            .context = 256,
            .layers = 4,
            .heads = 4,
            .dim = 256,
            .dropout = 0.0f,
            .seed = std::nullopt,
            .device = Device()};
  }
};

// "d12" or "small" (small_bytes), else an Error naming the choices.
GptConfig gpt_config(const std::string& name);

std::shared_ptr<nn::Sequential> make_gpt(const GptConfig& config);

}  // namespace ember::train
