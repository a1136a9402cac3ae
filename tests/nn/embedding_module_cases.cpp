// nn::Embedding on every device: the lookup, gradients written after zero_grad and added by a
// second backward (micro-batches), its parameter's name, the f32 output under autocast, and
// its errors.
#include <gtest/gtest.h>

#include <vector>

#include "ember/nn/embedding.hpp"
#include "ember/nn/sequential.hpp"
#include "ember/train/adamw.hpp"
#include "ops/device_cases.hpp"
#include "ops/ops_test_support.hpp"
#include "test_support.hpp"

namespace {

using ember::DType;
using ember::Shape;
using ember::Tensor;
using ember::testing::expect_error;
using ember::testing::values;
namespace nn = ember::nn;

class EmbeddingModule : public ember::testing::OnDevice {};

TEST_P(EmbeddingModule, LooksUpAndAccumulatesGradients) {
  ember::Stream s = stream();
  nn::Context ctx{s, /*training=*/true, nn::Precision::bf16};
  nn::Embedding embedding(7, 5, {.seed = 3, .device = device()});
  EXPECT_EQ(embedding.name(), "Embedding(7, 5)");
  const std::vector<float> table = values(embedding.weight().value);
  // normal(0, 0.02): small, not all equal.
  for (float v : table) EXPECT_LT(std::abs(v), 0.2f);
  EXPECT_NE(table[0], table[1]);

  const Tensor ids = on(Tensor::from_vector(std::vector<int32_t>{6, 0, 6, 2}, Shape{2, 2}));
  const Tensor out = embedding.forward(ctx, ids);
  EXPECT_EQ(out.dtype(), DType::f32);  // f32 under autocast
  EXPECT_EQ(out.shape(), (Shape{2, 2, 5}));
  const std::vector<float> got = values(out);
  const int64_t rows[] = {6, 0, 6, 2};
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 5; ++c) EXPECT_EQ(got[r * 5 + c], table[rows[r] * 5 + c]);
  }

  ember::train::AdamW optimizer(embedding.parameters());
  optimizer.zero_grad();  // the first backward writes
  const Tensor dy = ember::testing::random_tensor({2, 2, 5}, 9, DType::bf16, device());
  EXPECT_FALSE(embedding.backward(ctx, dy).defined());
  const std::vector<float> d = values(dy);
  std::vector<float> want(35, 0.0f);
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 5; ++c) want[rows[r] * 5 + c] += d[r * 5 + c];
  }
  EXPECT_EQ(values(embedding.weight().grad), want);
  // A second micro-batch adds.
  embedding.forward(ctx, ids);
  embedding.backward(ctx, dy);
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 5; ++c) want[rows[r] * 5 + c] += d[r * 5 + c];
  }
  EXPECT_EQ(values(embedding.weight().grad), want);
}

TEST_P(EmbeddingModule, NamesAndErrors) {
  ember::Stream s = stream();
  nn::Context ctx{s, /*training=*/true};
  nn::Sequential model;
  model.add(std::make_unique<nn::Embedding>(4, 3, nn::EmbeddingOptions{.device = device()}));
  EXPECT_EQ(model.parameters()[0]->name, "0.weight");
  nn::Embedding embedding(4, 3, {.device = device()});
  expect_error([&] { embedding.forward(ctx, on(Tensor::zeros({2}))); },
               {"Embedding(4, 3)", "ids must be i32 or i64", "f32[2]"});
  expect_error(
      [&] {
        embedding.forward(ctx, on(Tensor::from_vector(std::vector<int32_t>{1, 4}, Shape{2})));
        s.synchronize();
      },
      {"ops::embedding_forward", "id 4 in row 1 is out of range [0, 4)"});
  embedding.drop_saved();
  expect_error(
      [&] {
        embedding.backward(ctx, on(Tensor::zeros({2, 3})));
      },
      {"Embedding(4, 3)", "backward needs the ids saved by forward"});
  expect_error([&] { nn::Embedding(0, 3); }, "vocab and dim must be positive");
}

// A table padded past the vocabulary (GPT-2's 50257 in 50304 rows): the padding starts at zero,
// the vocabulary's rows are drawn as an unpadded table's, an id in the padding is an Error, and
// a gradient written after zero_grad zeroes the padding's rows.
TEST_P(EmbeddingModule, APaddedTable) {
  ember::Stream s = stream();
  nn::Context ctx{s, /*training=*/true};
  nn::Embedding plain(5, 3, {.seed = 4, .device = device()});
  nn::Embedding padded(5, 3, {.seed = 4, .device = device(), .table_rows = 8});
  EXPECT_EQ(padded.name(), "Embedding(5, 3, table_rows=8)");
  EXPECT_EQ(padded.weight().value.shape(), (Shape{8, 3}));
  std::vector<float> want = values(plain.weight().value);
  want.resize(8 * 3, 0.0f);
  EXPECT_EQ(values(padded.weight().value), want);

  expect_error(
      [&] {
        padded.forward(ctx, on(Tensor::from_vector(std::vector<int32_t>{1, 7}, Shape{2})));
        s.synchronize();
      },
      {"ops::embedding_forward", "id 7 in row 1 is out of range [0, 5)"});
  padded.drop_saved();
  padded.weight().grad.fill_(3.0);
  ember::train::AdamW optimizer(padded.parameters());
  optimizer.zero_grad();
  const Tensor ids = on(Tensor::from_vector(std::vector<int32_t>{4, 0}, Shape{2}));
  padded.forward(ctx, ids);
  padded.backward(ctx, on(Tensor::full({2, 3}, 1.0)));
  std::vector<float> grad(8 * 3, 0.0f);
  for (int c = 0; c < 3; ++c) grad[4 * 3 + c] = grad[c] = 1.0f;
  EXPECT_EQ(values(padded.weight().grad), grad);
  expect_error([&] { nn::Embedding(5, 3, {.table_rows = 4}); },
               "Embedding: table_rows (4) must be 0 or at least the vocab (5)");
}

INSTANTIATE_EMBER_DEVICES(EmbeddingModule);

}  // namespace
