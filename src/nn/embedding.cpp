#include "ember/nn/embedding.hpp"

#include <cmath>

#include "ember/nn/seed.hpp"
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

}  // namespace ember::nn
