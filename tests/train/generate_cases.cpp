// train::generate and nn::KvCache on every test device: decoding with the cache gives the logits
// of a full forward (within rounding) at every position, so greedy generation gives the same
// tokens with and without it; sampling follows its seed; the window slides past the context;
// bad options and a cache in a training forward are Errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "ember/nn/embedding.hpp"
#include "ember/nn/kv_cache.hpp"
#include "ember/nn/sequential.hpp"
#include "ember/train/generate.hpp"
#include "ember/train/gpt.hpp"
#include "ops/device_cases.hpp"
#include "test_support.hpp"

namespace ember::testing {
namespace {

class GenerateTest : public OnDevice {
 protected:
  std::shared_ptr<nn::Sequential> model() {
    return train::make_gpt({.vocab = 50,
                            .context = 24,
                            .layers = 2,
                            .heads = 2,
                            .dim = 32,
                            .seed = 7,
                            .device = device()});
  }
};

TEST_P(GenerateTest, CachedDecodingGivesTheLogitsOfAFullForward) {
  auto gpt = model();
  Stream s = stream();
  const std::vector<int32_t> tokens = {3, 14, 15, 9, 26, 5, 35, 8, 9, 7, 9, 3, 2, 38, 4, 6};
  nn::KvCache cache(24);
  nn::Context cached{s, /*training=*/false};
  cached.kv_cache = &cache;
  nn::Context full{s, /*training=*/false};
  // A prompt of 5 positions, then one position at a time.
  auto ids = [&](size_t begin, size_t end) {
    const std::vector<int32_t> w(tokens.begin() + begin, tokens.begin() + end);
    return Tensor::from_vector(w, Shape{1, static_cast<int64_t>(w.size())}).to(s);
  };
  Tensor step = gpt->forward(cached, ids(0, 5));
  cache.advance(5);
  for (size_t t = 5; t <= tokens.size(); ++t) {
    const Tensor all = gpt->forward(full, ids(0, t)).to(Device::cpu());
    const std::vector<float> want = all.to_vector<float>();
    const std::vector<float> got = step.to(Device::cpu()).to_vector<float>();
    // The vocabulary of 50 in rows of 128 (padded): the padding's logits are -inf in both.
    const size_t vocab = 50, width = 128, rows = got.size() / width;
    for (size_t r = 0; r < rows; ++r) {  // the rows this call decoded: the last `rows` positions
      for (size_t v = 0; v < width; ++v) {
        const float w = want[(t - rows + r) * width + v];
        if (v >= vocab) {
          ASSERT_EQ(w, -std::numeric_limits<float>::infinity());
          ASSERT_EQ(got[r * width + v], w);
          continue;
        }
        ASSERT_NEAR(got[r * width + v], w, 1e-5 * (1 + std::abs(w)))
            << "position " << t - rows + r << " token " << v;
      }
    }
    if (t == tokens.size()) break;
    step = gpt->forward(cached, ids(t, t + 1));
    cache.advance(1);
  }
}

TEST_P(GenerateTest, GreedyTokensAreTheSameWithAndWithoutTheCache) {
  auto gpt = model();
  Stream s = stream();
  const std::vector<int32_t> prompt = {1, 2, 3};
  train::GenerateOptions o{.max_new_tokens = 15, .context = 24, .temperature = 0.0f};
  const std::vector<int32_t> cached = train::generate(*gpt, prompt, o, s);
  o.kv_cache = false;
  const std::vector<int32_t> rerun = train::generate(*gpt, prompt, o, s);
  ASSERT_EQ(cached.size(), 18u);
  EXPECT_EQ(std::vector<int32_t>(cached.begin(), cached.begin() + 3), prompt);
  EXPECT_EQ(cached, rerun);
  EXPECT_TRUE(gpt->is_training());  // the mode is restored
}

TEST_P(GenerateTest, SamplingFollowsItsSeedAndTheWindowSlides) {
  auto gpt = model();
  Stream s = stream();
  train::GenerateOptions o{
      .max_new_tokens = 60, .context = 24, .temperature = 1.5f, .top_k = 10, .seed = 3};
  const std::vector<int32_t> a = train::generate(*gpt, {5}, o, s);
  const std::vector<int32_t> b = train::generate(*gpt, {5}, o, s);
  EXPECT_EQ(a, b);  // 61 tokens: past the context of 24, twice over
  ASSERT_EQ(a.size(), 61u);
  train::GenerateOptions models = o;
  models.context = 0;  // the model's: 24
  EXPECT_EQ(train::generate(*gpt, {5}, models, s), a);
  for (int32_t t : a) EXPECT_TRUE(t >= 0 && t < 50) << t;
  o.seed = 4;
  EXPECT_NE(train::generate(*gpt, {5}, o, s), a);
  // Among all 128 columns at a high temperature, nearly uniform over the vocabulary: the
  // padding's -inf columns are never drawn.
  train::GenerateOptions all = o;
  all.top_k = 0;
  all.temperature = 100.0f;
  for (int32_t t : train::generate(*gpt, {5}, all, s)) EXPECT_TRUE(t >= 0 && t < 50) << t;
  // A prompt longer than the context: its newest tokens are the window.
  std::vector<int32_t> long_prompt(30);
  for (size_t i = 0; i < long_prompt.size(); ++i) long_prompt[i] = static_cast<int32_t>(i % 50);
  o.temperature = 0.0f;
  const std::vector<int32_t> cached = train::generate(*gpt, long_prompt, o, s);
  EXPECT_EQ(cached.size(), 90u);
}

TEST_P(GenerateTest, BadOptionsAndACacheInTrainingAreErrors) {
  auto gpt = model();
  Stream s = stream();
  expect_error([&] { (void)train::generate(*gpt, {}, {.context = 24}, s); },
               "generate: the prompt is empty");
  expect_error([&] { (void)train::generate(*gpt, {1}, {.context = -1}, s); },
               "generate: options.context must be >= 0, not -1");
  expect_error([&] { (void)train::generate(*gpt, {1}, {.context = 24, .temperature = -1.0f}, s); },
               "the temperature must be finite and >= 0, not -1");
  expect_error([&] { (void)train::generate(*gpt, {1}, {.context = 24, .top_k = -2}, s); },
               "top_k must be >= 0, not -2");
  // The model's context bounds the window: refused before the first token, with or without the
  // cache (before, the model refused position 25, after 24 tokens, and they were lost).
  for (const bool cached : {true, false}) {
    expect_error(
        [&] {
          (void)train::generate(*gpt, {1},
                                {.max_new_tokens = 40, .context = 30, .kv_cache = cached}, s);
        },
        "generate: options.context 30 is beyond the model's context of 24 positions (its "
        "position table's rows): give at most 24, or 0 for the model's");
  }
  // Context 0 means the model's; a model without a position table has none to give.
  nn::Sequential plain;
  plain.add(std::make_shared<nn::Embedding>(50, 8, nn::EmbeddingOptions{.device = device()}));
  expect_error([&] { (void)train::generate(plain, {1}, {}, s); },
               "generate: options.context is 0 (the model's context), but the model has no "
               "TokenPositionEmbedding to read it from");
  EXPECT_TRUE(gpt->is_training());  // restored after the Error too
  nn::KvCache cache(24);
  nn::Context training{s, /*training=*/true};
  training.kv_cache = &cache;
  const Tensor ids = Tensor::from_vector(std::vector<int32_t>{1, 2}, Shape{1, 2}).to(s);
  expect_error([&] { (void)gpt->forward(training, ids); }, "a key/value cache is for inference");
  gpt->drop_saved();
  expect_error([] { nn::KvCache bad(0); }, "KvCache: the capacity must be at least 1 position");
  // A nan logit anywhere: nothing to sample from.
  {
    auto broken = model();
    for (auto& [name, p] : broken->named_parameters()) {
      if (name == "ln_f.bias") p->value.copy_(on(Tensor::full({32}, std::nan(""))));
    }
    expect_error([&] { (void)train::generate(*broken, {1}, {.context = 24, .top_k = 5}, s); },
                 "generate: the model's logit of token 0 is nan");
    EXPECT_TRUE(broken->is_training());  // restored after an Error while sampling
  }
  // A cache used wrongly: a forward without advance(), an advance() without a forward, a cache
  // another model filled. Each is an Error, not attention over stale or uninitialized rows.
  nn::KvCache used(24);
  nn::Context decode{s, /*training=*/false};
  decode.kv_cache = &used;
  (void)gpt->forward(decode, ids);
  expect_error([&] { (void)gpt->forward(decode, ids); },
               "a layer holds 2 cached positions but the cache is at position 0: advance() once "
               "after each forward");
  used.advance(5);
  expect_error([&] { (void)gpt->forward(decode, ids); },
               "a layer holds 2 cached positions but the cache is at position 5");
  used.clear();
  (void)gpt->forward(decode, ids);
  used.advance(2);
  auto other = model();
  expect_error([&] { (void)other->forward(decode, ids); },
               "a layer holds 0 cached positions but the cache is at position 2");
  expect_error([&] { cache.advance(25); },
               "KvCache::advance(25): 0 positions cached, the capacity is 24");
}

INSTANTIATE_EMBER_DEVICES(GenerateTest);

}  // namespace
}  // namespace ember::testing
