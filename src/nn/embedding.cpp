#include "ember/nn/embedding.hpp"

#include "ember/nn/kv_cache.hpp"

#include <cmath>
#include <vector>

#include "ember/nn/seed.hpp"
#include "ember/ops/elementwise.hpp"
#include "ember/ops/embedding.hpp"

namespace ember::nn {

Embedding::Embedding(int64_t vocab, int64_t dim, const EmbeddingOptions& options)
    : vocab_(vocab), dim_(dim) {
  EMBER_CHECK(vocab > 0 && dim > 0, "Embedding: vocab and dim must be positive, not {} and {}",
              vocab, dim);
  EMBER_CHECK(std::isfinite(options.init_std) && options.init_std >= 0.0f,
              "Embedding: init_std must be finite and >= 0, not {}", options.init_std);
  Tensor table = Tensor::empty({vocab, dim}, DType::f32, options.device);
  table.normal_(options.seed ? *options.seed : next_default_seed(), 0.0, options.init_std);
  weight_ = make_parameter("weight", table);
}

std::string Embedding::name() const {
  return fmt::format("Embedding({}, {})", vocab_, dim_);
}

void Embedding::set_path(std::string path) {
  Module::set_path(std::move(path));
  weight_.name = qualified("weight");
}

Tensor Embedding::forward(Context& ctx, const Tensor& ids) {
  EMBER_CHECK(ids.defined() && (ids.dtype() == DType::i32 || ids.dtype() == DType::i64),
              "{}: ids must be i32 or i64, not {}", name(),
              ids.defined() ? ids.view().describe() : std::string("undefined"));
  if (ctx.training) check_nothing_saved("Embedding::forward");
  std::vector<int64_t> dims(ids.shape().dims().begin(), ids.shape().dims().end());
  dims.push_back(dim_);
  EMBER_CHECK(ids.rank() < Shape::kMaxRank, "{}: ids may have rank {} at most, not {}", name(),
              Shape::kMaxRank - 1, ids.view().describe());
  Tensor out = Tensor::empty(Shape(dims), DType::f32, ctx.stream);
  ops::embedding_forward(ctx.stream, out, weight_.value, ids);
  if (ctx.training) ids_ = ids;
  return out;
}

Tensor Embedding::backward(Context& ctx, const Tensor& dy) {
  EMBER_CHECK(ids_.defined(),
              "{}: backward needs the ids saved by forward (forward was not run in training "
              "mode, or they were dropped)",
              name());
  // Written when zero_grad left the gradient pending (rows no id names become zero), else added.
  const bool accumulate = !weight_.grad_zero_pending;
  ops::embedding_backward(ctx.stream, weight_.grad, dy, ids_, accumulate);
  weight_.mark_grad_written();
  grad_ready(weight_);
  drop_saved();
  return Tensor();
}

TokenPositionEmbedding::TokenPositionEmbedding(int64_t vocab, int64_t context, int64_t dim,
                                               const EmbeddingOptions& options)
    : vocab_(vocab), context_(context), dim_(dim) {
  EMBER_CHECK(vocab > 0 && context > 0 && dim > 0,
              "TokenPositionEmbedding: vocab, context and dim must be positive, not {}, {} and {}",
              vocab, context, dim);
  EMBER_CHECK(std::isfinite(options.init_std) && options.init_std >= 0.0f,
              "TokenPositionEmbedding: init_std must be finite and >= 0, not {}", options.init_std);
  const uint64_t seed = options.seed ? *options.seed : next_default_seed();
  Tensor tokens = Tensor::empty({vocab, dim}, DType::f32, options.device);
  tokens.normal_(seed, 0.0, options.init_std);
  Tensor positions = Tensor::empty({context, dim}, DType::f32, options.device);
  positions.normal_(seed ^ 0x9e3779b97f4a7c15ull, 0.0, options.init_std);
  wte_ = make_parameter("wte", tokens);
  wpe_ = make_parameter("wpe", positions);
}

std::string TokenPositionEmbedding::name() const {
  return fmt::format("TokenPositionEmbedding(vocab={}, context={}, dim={})", vocab_, context_,
                     dim_);
}

void TokenPositionEmbedding::set_path(std::string path) {
  Module::set_path(std::move(path));
  wte_.name = qualified("wte");
  wpe_.name = qualified("wpe");
}

const Tensor& TokenPositionEmbedding::positions(Stream& stream, int64_t batch, int64_t seq,
                                                int64_t first) {
  if (!positions_.defined() || positions_.shape() != Shape{batch, seq} ||
      positions_.device() != stream.device() || positions_first_ != first) {
    std::vector<int32_t> t(static_cast<size_t>(batch * seq));
    for (size_t i = 0; i < t.size(); ++i) {
      t[i] = static_cast<int32_t>(first + static_cast<int64_t>(i) % seq);
    }
    positions_ = Tensor::from_vector(t, Shape{batch, seq}, stream);
    positions_first_ = first;
  }
  return positions_;
}

Tensor TokenPositionEmbedding::forward(Context& ctx, const Tensor& ids) {
  EMBER_CHECK(
      ids.defined() && ids.rank() == 2 && (ids.dtype() == DType::i32 || ids.dtype() == DType::i64),
      "{}: ids must be i32 or i64 [batch, seq], not {}", name(),
      ids.defined() ? ids.view().describe() : std::string("undefined"));
  const int64_t b = ids.shape()[0], t = ids.shape()[1];
  // With a key/value cache the new tokens follow the cached positions.
  const int64_t first = ctx.kv_cache != nullptr ? ctx.kv_cache->position() : 0;
  EMBER_CHECK(first + t <= context_, "{}: a sequence of {} tokens is longer than the context of {}",
              name(), first + t, context_);
  if (ctx.training) check_nothing_saved("TokenPositionEmbedding::forward");
  Tensor tokens = Tensor::empty({b, t, dim_}, DType::f32, ctx.stream);
  ops::embedding_forward(ctx.stream, tokens, wte_.value, ids);
  Tensor where = Tensor::empty({b, t, dim_}, DType::f32, ctx.stream);
  ops::embedding_forward(ctx.stream, where, wpe_.value, positions(ctx.stream, b, t, first));
  Tensor out = Tensor::empty({b, t, dim_}, DType::f32, ctx.stream);
  ops::add(ctx.stream, out, tokens, where);
  if (ctx.training) ids_ = ids;
  return out;
}

Tensor TokenPositionEmbedding::backward(Context& ctx, const Tensor& dy) {
  EMBER_CHECK(ids_.defined(),
              "{}: backward needs the ids saved by forward (forward was not run in training "
              "mode, or they were dropped)",
              name());
  const int64_t b = ids_.shape()[0], t = ids_.shape()[1];
  ops::embedding_backward(ctx.stream, wte_.grad, dy, ids_, !wte_.grad_zero_pending);
  ops::embedding_backward(ctx.stream, wpe_.grad, dy, positions(ctx.stream, b, t),
                          !wpe_.grad_zero_pending);
  wte_.mark_grad_written();
  wpe_.mark_grad_written();
  grad_ready(wte_);
  grad_ready(wpe_);
  drop_saved();
  return Tensor();
}

}  // namespace ember::nn
