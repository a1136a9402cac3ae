#include "ember/nn/embedding.hpp"

#include "ember/nn/kv_cache.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "ember/nn/seed.hpp"
#include "ember/ops/elementwise.hpp"
#include "ember/ops/embedding.hpp"
#include "reuse_on_stream.hpp"

namespace ember::nn {
namespace {

// The table's rows: vocab, or options.table_rows when that pads it.
int64_t rows_of(const char* who, int64_t vocab, const EmbeddingOptions& options) {
  EMBER_CHECK(options.table_rows == 0 || options.table_rows >= vocab,
              "{}: table_rows ({}) must be 0 or at least the vocab ({})", who, options.table_rows,
              vocab);
  return std::max(vocab, options.table_rows);
}

// [rows, dim] f32 drawn normal(0, std) (element i from (seed, i), so the first vocab rows do not
// depend on the padding), with the padded rows past vocab zero.
Tensor initial_table(int64_t vocab, int64_t rows, int64_t dim, uint64_t seed, float std,
                     Device device) {
  Tensor table = Tensor::empty({rows, dim}, DType::f32, device);
  table.normal_(seed, 0.0, std);
  if (rows > vocab) table.slice(vocab, rows).fill_(0.0);
  return table;
}

std::string padding_of(int64_t vocab, int64_t rows) {
  return rows > vocab ? fmt::format(", table_rows={}", rows) : std::string();
}

}  // namespace

Embedding::Embedding(int64_t vocab, int64_t dim, const EmbeddingOptions& options)
    : vocab_(vocab), dim_(dim), rows_(rows_of("Embedding", vocab, options)) {
  EMBER_CHECK(vocab > 0 && dim > 0, "Embedding: vocab and dim must be positive, not {} and {}",
              vocab, dim);
  EMBER_CHECK(std::isfinite(options.init_std) && options.init_std >= 0.0f,
              "Embedding: init_std must be finite and >= 0, not {}", options.init_std);
  weight_ =
      make_parameter("weight", initial_table(vocab_, rows_, dim,
                                             options.seed ? *options.seed : next_default_seed(),
                                             options.init_std, options.device));
}

std::string Embedding::name() const {
  return fmt::format("Embedding({}, {}{})", vocab_, dim_, padding_of(vocab_, rows_));
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
  // The first vocab rows: an id of a padded row is an Error too.
  ops::embedding_forward(ctx.stream, out, weight_.value.slice(0, vocab_), ids);
  if (ctx.training) ids_ = ids;
  return out;
}

Tensor Embedding::backward(Context& ctx, const Tensor& dy) {
  check_saved(ids_.defined(), "ids", "they were dropped");
  // Written when zero_grad left the gradient pending (rows no id names become zero), else added.
  const bool accumulate = !weight_.grad_zero_pending;
  ops::embedding_backward(ctx.stream, weight_.grad, dy, ids_, accumulate);
  weight_.mark_grad_written();
  grad_ready(weight_, ctx.stream);
  drop_saved();
  return Tensor();
}

TokenPositionEmbedding::TokenPositionEmbedding(int64_t vocab, int64_t context, int64_t dim,
                                               const EmbeddingOptions& options)
    : vocab_(vocab),
      context_(context),
      dim_(dim),
      rows_(rows_of("TokenPositionEmbedding", vocab, options)) {
  EMBER_CHECK(vocab > 0 && context > 0 && dim > 0,
              "TokenPositionEmbedding: vocab, context and dim must be positive, not {}, {} and {}",
              vocab, context, dim);
  EMBER_CHECK(std::isfinite(options.init_std) && options.init_std >= 0.0f,
              "TokenPositionEmbedding: init_std must be finite and >= 0, not {}", options.init_std);
  const uint64_t seed = options.seed ? *options.seed : next_default_seed();
  Tensor tokens = initial_table(vocab, rows_, dim, seed, options.init_std, options.device);
  Tensor positions = Tensor::empty({context, dim}, DType::f32, options.device);
  positions.normal_(seed ^ 0x9e3779b97f4a7c15ull, 0.0, options.init_std);
  wte_ = make_parameter("wte", tokens);
  wpe_ = make_parameter("wpe", positions);
}

std::string TokenPositionEmbedding::name() const {
  return fmt::format("TokenPositionEmbedding(vocab={}, context={}, dim={}{})", vocab_, context_,
                     dim_, padding_of(vocab_, rows_));
}

void TokenPositionEmbedding::set_path(std::string path) {
  Module::set_path(std::move(path));
  wte_.name = qualified("wte");
  wpe_.name = qualified("wpe");
}

Tensor TokenPositionEmbedding::positions(Stream& stream, int64_t batch, int64_t seq,
                                         int64_t first) {
  for (const Positions& p : positions_) {
    if (p.batch == batch && p.seq == seq && p.first == first && p.device == stream.device()) {
      return detail::reuse_on_stream(p.ids, *p.uploaded, stream);
    }
  }
  std::vector<int32_t> t(static_cast<size_t>(batch * seq));
  for (size_t i = 0; i < t.size(); ++i) {
    t[i] = static_cast<int32_t>(first + static_cast<int64_t>(i) % seq);
  }
  auto uploaded = std::make_shared<Event>(stream.device());
  Tensor ids = Tensor::from_vector(t, Shape{batch, seq}, stream);
  uploaded->record(stream);
  positions_.push_back({batch, seq, first, stream.device(), ids, std::move(uploaded)});
  return ids;
}

Tensor TokenPositionEmbedding::forward(Context& ctx, const Tensor& ids) {
  EMBER_CHECK(
      ids.defined() && ids.rank() == 2 && (ids.dtype() == DType::i32 || ids.dtype() == DType::i64),
      "{}: ids must be i32 or i64 [batch, seq], not {}", name(),
      ids.defined() ? ids.view().describe() : std::string("undefined"));
  const int64_t b = ids.shape()[0], t = ids.shape()[1];
  // With a key/value cache the new tokens follow the cached positions.
  const int64_t first = ctx.kv_cache != nullptr ? ctx.kv_cache->position() : 0;
  EMBER_CHECK(first + t <= context_,
              "{}: a sequence of {} tokens is longer than the context of {}{}", name(), first + t,
              context_,
              first > 0 ? fmt::format(" ({} new after the {} in the key/value cache)", t, first)
                        : std::string());
  if (ctx.training) check_nothing_saved("TokenPositionEmbedding::forward");
  Tensor tokens = Tensor::empty({b, t, dim_}, DType::f32, ctx.stream);
  ops::embedding_forward(ctx.stream, tokens, wte_.value.slice(0, vocab_), ids);
  Tensor where = Tensor::empty({b, t, dim_}, DType::f32, ctx.stream);
  ops::embedding_forward(ctx.stream, where, wpe_.value, positions(ctx.stream, b, t, first));
  Tensor out = Tensor::empty({b, t, dim_}, DType::f32, ctx.stream);
  ops::add(ctx.stream, out, tokens, where);
  if (ctx.training) ids_ = ids;
  return out;
}

Tensor TokenPositionEmbedding::backward(Context& ctx, const Tensor& dy) {
  check_saved(ids_.defined(), "ids", "they were dropped");
  const int64_t b = ids_.shape()[0], t = ids_.shape()[1];
  ops::embedding_backward(ctx.stream, wte_.grad, dy, ids_, !wte_.grad_zero_pending);
  ops::embedding_backward(ctx.stream, wpe_.grad, dy, positions(ctx.stream, b, t),
                          !wpe_.grad_zero_pending);
  wte_.mark_grad_written();
  wpe_.mark_grad_written();
  grad_ready(wte_, ctx.stream);
  grad_ready(wpe_, ctx.stream);
  drop_saved();
  return Tensor();
}

}  // namespace ember::nn
