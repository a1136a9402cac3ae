// generate: sampling from a GPT (make_gpt, a trained or a loaded model) with temperature and
// top-k, with a key/value cache (nn::KvCache) so that each new token costs one position.
//
//   auto tokens = train::generate(*model, prompt, {.max_new_tokens = 200, .context = 1024,
//                                                  .temperature = 0.8f, .top_k = 40}, stream);
#pragma once

#include <cstdint>
#include <vector>

#include "ember/nn/module.hpp"

namespace ember::train {

struct GenerateOptions {
  int64_t max_new_tokens = 100;
  // The positions the model sees at most (its context, or the length it was trained on). Past
  // it, the window slides: with the cache, the newest context / 2 tokens are fed again as a new
  // prompt; without it, the newest `context` tokens are rerun for every token. 0: the model's
  // context (its TokenPositionEmbedding's); more than the model's is an Error.
  int64_t context = 0;
  float temperature = 1.0f;  // the logits' divisor; 0: greedy (the likeliest token)
  int64_t top_k = 0;         // sample among the k likeliest (0: all)
  uint64_t seed = 0;         // the sampler's (std::mt19937_64): the same tokens for a seed
  bool kv_cache = true;      // false: rerun the window for each token (the reference)
  nn::Precision precision = nn::Precision::f32;
};

// The prompt (token ids, at least one) followed by max_new_tokens sampled ones. The model runs
// in inference mode on `stream` (its train/eval mode is restored after); it must map ids [1, T]
// to logits [1, T, vocab]. Bad options (a context beyond the model's, or 0 for a model without a
// TokenPositionEmbedding; a negative temperature or top_k; an empty prompt) are Errors, before
// any token is sampled.
std::vector<int32_t> generate(nn::Module& model, std::vector<int32_t> prompt,
                              const GenerateOptions& options, Stream& stream);

}  // namespace ember::train
