// train::make_gpt: the layout and names (GPT-2's, under "embed", "h", "ln_f", "lm_head"), the
// tied table listed once, the parameter count of d12, the shapes, the initialization, and the
// configuration errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "ember/nn/checkpoint.hpp"
#include "ember/nn/embedding.hpp"
#include "ember/nn/loss.hpp"
#include "ember/nn/tied_linear.hpp"
#include "ember/train/adamw.hpp"
#include "ember/train/gpt.hpp"
#include "test_support.hpp"

namespace {

using ember::DType;
using ember::Shape;
using ember::Tensor;
using ember::testing::expect_error;
namespace nn = ember::nn;
namespace train = ember::train;

int64_t count(nn::Module& model) {
  int64_t n = 0;
  for (nn::Parameter* p : model.parameters()) n += p->value.numel();
  return n;
}

TEST(Gpt, NamesShapesAndTiedWeights) {
  auto model = train::make_gpt({.vocab = 11,
                                .vocab_multiple = 8,
                                .context = 8,
                                .layers = 2,
                                .heads = 2,
                                .dim = 8,
                                .seed = 1});
  std::vector<std::string> names;
  for (auto& [name, p] : model->named_parameters()) names.push_back(name);
  const std::vector<std::string> first = {"embed.wte",
                                          "embed.wpe",
                                          "h.0.attn.ln_1.weight",
                                          "h.0.attn.ln_1.bias",
                                          "h.0.attn.attn.c_attn.weight",
                                          "h.0.attn.attn.c_attn.bias"};
  ASSERT_GE(names.size(), first.size());
  EXPECT_EQ(std::vector<std::string>(names.begin(), names.begin() + 6), first);
  EXPECT_EQ(names.back(), "ln_f.bias");  // the head adds no parameter: it uses embed.wte
  auto& head = dynamic_cast<nn::TiedLinear&>(model->child("lm_head"));
  EXPECT_EQ(&head.weight(), model->parameters()[0]);

  ember::Stream stream;
  nn::Context ctx{stream, /*training=*/false};
  const Tensor ids = Tensor::from_vector(std::vector<int32_t>{1, 2, 3, 4, 5, 6}, Shape{2, 3});
  const Tensor logits = model->forward(ctx, ids);
  // The vocabulary of 11 padded to 16: the table's padding rows are zero and their logits -inf.
  EXPECT_EQ(logits.shape(), (Shape{2, 3, 16}));
  EXPECT_EQ(logits.dtype(), DType::f32);
  const std::vector<float> values = logits.to_vector<float>();
  for (size_t i = 0; i < values.size(); ++i) {
    if (i % 16 < 11) {
      EXPECT_TRUE(std::isfinite(values[i])) << i;
    } else {
      EXPECT_EQ(values[i], -std::numeric_limits<float>::infinity()) << i;
    }
  }
  const Tensor table = model->state_dict().at("embed.wte");
  EXPECT_EQ(table.shape(), (Shape{16, 8}));
  EXPECT_EQ(table.slice(11, 16).to_vector<float>(), std::vector<float>(5 * 8, 0.0f));
}

TEST(Gpt, D12HasGpt2sParameterCount) {
  // 124,439,808 with the tied head counted once (GPT-2 small); the table's padding to 50304 rows
  // adds 47 x 768 (llm.c's count).
  train::GptConfig config = train::GptConfig::d12();
  EXPECT_EQ(config.padded_vocab(), 50304);
  EXPECT_EQ(count(*train::make_gpt(config)), 124439808 + 47 * 768);
  config.vocab_multiple = 1;
  EXPECT_EQ(count(*train::make_gpt(config)), 124439808);
}

TEST(Gpt, InitializationFollowsGpt2) {
  auto model =
      train::make_gpt({.vocab = 64, .context = 16, .layers = 4, .heads = 2, .dim = 64, .seed = 3});
  for (auto& [name, p] : model->named_parameters()) {
    std::vector<float> v = p->value.to_vector<float>();
    if (name == "embed.wte") {  // 64 rows of vocabulary, 64 of padding (zero)
      ASSERT_EQ(v.size(), 128u * 64u);
      EXPECT_EQ(std::vector<float>(v.begin() + 64 * 64, v.end()),
                std::vector<float>(64 * 64, 0.0f));
      v.resize(64 * 64);
    }
    double sum = 0, squares = 0;
    for (float x : v) {
      sum += x;
      squares += double{x} * x;
    }
    const double mean = sum / v.size(), std = std::sqrt(squares / v.size() - mean * mean);
    if (name.find("ln_") != std::string::npos) {
      EXPECT_EQ(v.front(), name.ends_with("weight") ? 1.0f : 0.0f) << name;
    } else if (name.ends_with(".bias")) {
      EXPECT_EQ(std, 0.0) << name;
      EXPECT_EQ(mean, 0.0) << name;
    } else {
      const double want = name.find("c_proj") != std::string::npos ? 0.02 / std::sqrt(8.0) : 0.02;
      EXPECT_NEAR(std, want, want * 0.15) << name;
    }
  }
}

TEST(Gpt, BadConfigurationsAndInputs) {
  expect_error(
      [] { train::make_gpt({.vocab = 10, .context = 8, .layers = 1, .heads = 3, .dim = 8}); },
      "heads (3) must divide the width (8)");
  expect_error([] { train::gpt_config("d13"); }, "unknown model 'd13'");
  auto table = std::make_shared<nn::Embedding>(4, 3);
  expect_error([&] { nn::TiedLinear(table, table->weight(), 5); },
               "TiedLinear: classes must be 0 (the owner's vocabulary, else all of the weight's "
               "rows) or 1 to the weight's 4 rows, not 5");
  // The weight must be the owner's: another module's would be freed with that module.
  auto other = std::make_shared<nn::Embedding>(4, 3);
  expect_error([&] { nn::TiedLinear(table, other->weight()); },
               "is not one of its owner's parameters() (Embedding)");
  expect_error(
      [] { train::make_gpt({.vocab = 10, .context = 8, .layers = 1, .heads = 2, .dim = 0}); },
      "make_gpt: the width must be positive, not 0");
  expect_error(
      [] {
        train::make_gpt({.vocab = std::numeric_limits<int64_t>::max(),
                         .context = 8,
                         .layers = 1,
                         .heads = 2,
                         .dim = 8});
      },
      "make_gpt: a vocab of 9223372036854775807 is beyond int32 token ids (at most 2147483647)");
  // classes 0 on a padded table: its vocabulary.
  auto padded = std::make_shared<nn::Embedding>(5, 3, nn::EmbeddingOptions{.table_rows = 8});
  EXPECT_EQ(nn::TiedLinear(padded, padded->weight()).classes(), 5);
  EXPECT_EQ(nn::TiedLinear(padded, padded->weight(), 8).classes(), 8);
  expect_error(
      [] {
        train::make_gpt(
            {.vocab = 10, .vocab_multiple = 0, .context = 8, .layers = 1, .heads = 2, .dim = 8});
      },
      "vocab_multiple must be in 1..2^32 (1: no padding), not 0");
  expect_error(
      [] {
        train::make_gpt({.vocab = 10,
                         .vocab_multiple = std::numeric_limits<int64_t>::max(),
                         .context = 8,
                         .layers = 1,
                         .heads = 2,
                         .dim = 8});
      },
      "vocab_multiple must be in 1..2^32 (1: no padding), not 9223372036854775807");
  auto model = train::make_gpt({.vocab = 10, .context = 4, .layers = 1, .heads = 2, .dim = 8});
  ember::Stream stream;
  nn::Context ctx{stream, /*training=*/false};
  expect_error(
      [&] {
        model->forward(ctx, Tensor::zeros({1, 5}, DType::i32));
      },
      "a sequence of 5 tokens is longer than the context of 4");
  expect_error(
      [&] {
        model->forward(ctx, Tensor::from_vector(std::vector<int32_t>{0, 10}, Shape{1, 2}));
      },
      "id 10 in row 1 is out of range [0, 10)");
  // The head is the first module of the backward: a gradient of the wrong shape is an Error,
  // even with the right number of elements.
  nn::Context training{stream, /*training=*/true};
  model->forward(training, Tensor::zeros({2, 3}, DType::i32));
  expect_error(
      [&] {
        model->backward(training, Tensor::zeros({3, 2, 128}));
      },
      "the output gradient must be [2, 3, 128], not f32[3, 2, 128]");
}

}  // namespace

namespace {

// A tiny GPT's training losses on a fixed batch: `steps` AdamW steps under `precision`, with
// the blocks wrapped in nn::Checkpoint when `checkpoint`; and its gradients after the first step.
struct Trained {
  std::vector<float> losses;
  std::vector<std::vector<float>> first_grads;
  std::vector<float> table;  // embed.wte after the last step
};

// vocab_multiple: the vocabulary of 13 padded to 128 rows by default; fused: the fused classifier.
Trained train_tiny(nn::Precision precision, bool checkpoint, int steps,
                   int64_t vocab_multiple = 128, bool fused = false) {
  const train::GptConfig config = {.vocab = 13,
                                   .vocab_multiple = vocab_multiple,
                                   .context = 16,
                                   .layers = 2,
                                   .heads = 2,
                                   .dim = 16,
                                   .seed = 5};
  const int64_t width = config.padded_vocab();
  auto model = train::make_gpt(config);
  if (checkpoint) {
    auto& blocks = dynamic_cast<nn::Sequential&>(model->child("h"));
    for (size_t i = 0; i < blocks.size(); ++i) {
      blocks.wrap_child(i, [](std::shared_ptr<nn::Module> m) {
        return std::make_shared<nn::Checkpoint>(std::move(m));
      });
    }
  }
  std::vector<int32_t> tokens(4 * 9);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 5 + i / 7) % 13);
  std::vector<int32_t> in, out;
  for (int b = 0; b < 4; ++b) {
    for (int t = 0; t < 8; ++t) {
      in.push_back(tokens[b * 9 + t]);
      out.push_back(tokens[b * 9 + t + 1]);
    }
  }
  const Tensor x = Tensor::from_vector(in, Shape{4, 8}), y = Tensor::from_vector(out, Shape{32});
  ember::Stream stream;
  nn::Context ctx{stream, /*training=*/true, precision};
  ember::train::AdamW optimizer(model->parameters(), {.lr = 3e-3f});
  nn::SoftmaxCrossEntropy criterion({.fused = fused, .classes = 13});
  Trained result;
  for (int step = 0; step < steps; ++step) {
    optimizer.zero_grad();
    const Tensor logits = model->forward(ctx, x);
    const Tensor loss = criterion.forward(ctx, logits.reshape({32, width}), y);
    model->backward(ctx, criterion.backward(ctx).reshape({4, 8, width}));
    if (step == 0) {
      for (nn::Parameter* p : model->parameters()) {
        result.first_grads.push_back(p->grad.to_vector<float>());
      }
    }
    optimizer.step(stream);
    result.losses.push_back(static_cast<float>(loss.item()));
  }
  result.table = model->state_dict().at("embed.wte").to_vector<float>();
  return result;
}

TEST(Gpt, CheckpointedBlocksGiveBitwiseTheSameTraining) {
  for (nn::Precision p : {nn::Precision::f32, nn::Precision::bf16}) {
    const Trained plain = train_tiny(p, false, 5), checkpointed = train_tiny(p, true, 5);
    EXPECT_EQ(plain.first_grads, checkpointed.first_grads);
    EXPECT_EQ(plain.losses, checkpointed.losses);
  }
}

// The padded vocabulary (13 in 128 rows, as GPT-2's 50257 in 50304) trains as the unpadded one:
// the -inf logits take no probability, so the losses, the gradients of the vocabulary's rows and
// the trained rows agree within rounding (products of another width), with the plain and the
// fused classifier, in f32 and bf16; and the padding rows stay zero (gradient 0, no decay of 0).
TEST(Gpt, APaddedVocabularyTrainsAsTheUnpaddedOne) {
  for (nn::Precision p : {nn::Precision::f32, nn::Precision::bf16}) {
    for (bool fused : {false, true}) {
      const Trained padded = train_tiny(p, false, 5, 128, fused);
      const Trained plain = train_tiny(p, false, 5, 1, fused);
      const double tol = p == nn::Precision::f32 ? 1e-5 : 1e-2;
      SCOPED_TRACE(fmt::format("{} fused {}", nn::precision_name(p), fused));
      ASSERT_EQ(padded.losses.size(), plain.losses.size());
      for (size_t i = 0; i < plain.losses.size(); ++i) {
        EXPECT_NEAR(padded.losses[i], plain.losses[i], tol * plain.losses[i]) << "step " << i;
      }
      // The table's gradient: the vocabulary's rows as unpadded, the padding's zero.
      const std::vector<float>& g = padded.first_grads[0];
      ASSERT_EQ(g.size(), 128u * 16u);
      for (size_t i = 0; i < g.size(); ++i) {
        if (i < 13 * 16) {
          EXPECT_NEAR(g[i], plain.first_grads[0][i],
                      tol * (1e-3 + std::abs(plain.first_grads[0][i])))
              << i;
        } else {
          ASSERT_EQ(g[i], 0.0f) << i;
        }
      }
      ASSERT_EQ(padded.table.size(), 128u * 16u);
      EXPECT_EQ(std::vector<float>(padded.table.begin() + 13 * 16, padded.table.end()),
                std::vector<float>(115 * 16, 0.0f));
    }
  }
}

TEST(Gpt, Bf16TrainingFollowsF32) {
  const Trained f32 = train_tiny(nn::Precision::f32, false, 60);
  const Trained bf16 = train_tiny(nn::Precision::bf16, false, 60);
  EXPECT_LT(f32.losses.back(), 0.5f * f32.losses.front());  // it learns the batch
  for (size_t i = 0; i < f32.losses.size(); i += 10) {
    EXPECT_NEAR(bf16.losses[i], f32.losses[i], 0.05 * f32.losses[i] + 0.02) << "step " << i;
  }
}

}  // namespace
