#include "ember/train/generate.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>

#include "ember/core/error.hpp"
#include "ember/nn/embedding.hpp"
#include "ember/nn/kv_cache.hpp"

namespace ember::train {
namespace {

// A token from the last position's logits: the likeliest at temperature 0, else drawn from the
// softmax at `temperature` among the top_k likeliest.
int32_t pick(const Tensor& logits, const GenerateOptions& o, std::mt19937_64& rng) {
  const Tensor host = logits.to(DType::f32).to(Device::cpu());
  const int64_t vocab = host.shape()[2], t = host.shape()[1];
  const float* last = host.data<float>() + (t - 1) * vocab;
  std::vector<std::pair<float, int32_t>> ranked;
  ranked.reserve(static_cast<size_t>(vocab));
  for (int64_t v = 0; v < vocab; ++v) {
    EMBER_CHECK(!std::isnan(last[v]),
                "generate: the model's logit of token {} is nan: nothing to sample from", v);
    ranked.emplace_back(last[v], static_cast<int32_t>(v));
  }
  const int64_t k = o.temperature == 0 ? 1 : (o.top_k == 0 ? vocab : std::min(o.top_k, vocab));
  // Ties go to the lower id, so that the pick does not depend on the sort.
  std::partial_sort(ranked.begin(), ranked.begin() + k, ranked.end(),
                    [](const auto& a, const auto& b) {
                      return a.first > b.first || (a.first == b.first && a.second < b.second);
                    });
  EMBER_CHECK(std::isfinite(ranked[0].first),
              "generate: the model's logits are not finite ({}): nothing to sample from",
              ranked[0].first);
  if (k == 1) return ranked[0].second;
  std::vector<double> weights(static_cast<size_t>(k));
  for (int64_t j = 0; j < k; ++j) {
    weights[j] = std::exp((static_cast<double>(ranked[j].first) - ranked[0].first) / o.temperature);
  }
  std::discrete_distribution<int64_t> draw(weights.begin(), weights.end());
  return ranked[static_cast<size_t>(draw(rng))].second;
}

Tensor ids_of(const std::vector<int32_t>& tokens, size_t begin, Stream& stream) {
  const std::vector<int32_t> window(tokens.begin() + static_cast<std::ptrdiff_t>(begin),
                                    tokens.end());
  return Tensor::from_vector(window, Shape{1, static_cast<int64_t>(window.size())}).to(stream);
}

// The positions the model can number: the smallest context of its TokenPositionEmbeddings, or 0
// when it has none (a model of the user's own: then options.context is taken as given).
int64_t model_context(nn::Module& model) {
  int64_t context = 0;
  model.for_each_module([&](nn::Module& m) {
    if (auto* e = dynamic_cast<nn::TokenPositionEmbedding*>(&m)) {
      context = context == 0 ? e->context() : std::min(context, e->context());
    }
  });
  return context;
}

}  // namespace

std::vector<int32_t> generate(nn::Module& model, std::vector<int32_t> tokens,
                              const GenerateOptions& o, Stream& stream) {
  EMBER_CHECK(!tokens.empty(), "generate: the prompt is empty: give at least one token");
  EMBER_CHECK(o.context >= 0, "generate: options.context must be >= 0, not {}", o.context);
  EMBER_CHECK(o.max_new_tokens >= 0, "generate: max_new_tokens must be >= 0, not {}",
              o.max_new_tokens);
  EMBER_CHECK(std::isfinite(o.temperature) && o.temperature >= 0,
              "generate: the temperature must be finite and >= 0, not {}", o.temperature);
  EMBER_CHECK(o.top_k >= 0, "generate: top_k must be >= 0, not {}", o.top_k);
  // Checked before the first token: a window beyond what the model can number would otherwise
  // fail once the sequence reaches the model's context, taking the tokens sampled so far with it.
  const int64_t limit = model_context(model);
  EMBER_CHECK(o.context != 0 || limit != 0,
              "generate: options.context is 0 (the model's context), but the model has no "
              "TokenPositionEmbedding to read it from: give the positions it sees at most");
  EMBER_CHECK(limit == 0 || o.context <= limit,
              "generate: options.context {} is beyond the model's context of {} positions (its "
              "position table's rows): give at most {}, or 0 for the model's",
              o.context, limit, limit);
  const int64_t context = o.context == 0 ? limit : o.context;
  const bool was_training = model.is_training();
  model.eval();
  std::mt19937_64 rng(o.seed);
  nn::KvCache cache(context);
  nn::Context ctx{stream, /*training=*/false, o.precision};
  if (o.kv_cache) ctx.kv_cache = &cache;
  try {
    for (int64_t i = 0; i < o.max_new_tokens; ++i) {
      Tensor logits;
      if (!o.kv_cache) {
        const size_t n = std::min(tokens.size(), static_cast<size_t>(context));
        logits = model.forward(ctx, ids_of(tokens, tokens.size() - n, stream));
      } else {
        if (cache.position() == context) cache.clear();  // full: slide (below)
        if (cache.position() == 0) {
          // A new prompt: the newest tokens, at most context (at most half after a slide, so that
          // the next half of the window decodes one position at a time).
          const auto keep =
              static_cast<size_t>(i == 0 ? context : std::max<int64_t>(1, context / 2));
          const size_t n = std::min(tokens.size(), keep);
          logits = model.forward(ctx, ids_of(tokens, tokens.size() - n, stream));
          cache.advance(static_cast<int64_t>(n));
        } else {
          logits = model.forward(ctx, ids_of(tokens, tokens.size() - 1, stream));
          cache.advance(1);
        }
      }
      tokens.push_back(pick(logits, o, rng));
    }
  } catch (...) {
    model.train(was_training);
    throw;
  }
  model.train(was_training);
  return tokens;
}

}  // namespace ember::train
