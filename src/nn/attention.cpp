#include "ember/nn/attention.hpp"

#include "ember/nn/kv_cache.hpp"

#include "ember/nn/dropout.hpp"
#include "ember/nn/linear.hpp"
#include "ember/ops/elementwise.hpp"

namespace ember::nn {

ScaledDotProductAttention::ScaledDotProductAttention(int64_t heads,
                                                     const ops::AttentionOptions& options)
    : heads_(heads), options_(options) {
  EMBER_CHECK(heads > 0, "ScaledDotProductAttention: heads must be positive, not {}", heads);
}

std::string ScaledDotProductAttention::name() const {
  return fmt::format("ScaledDotProductAttention(heads={}{})", heads_,
                     options_.causal ? ", causal" : "");
}

Tensor ScaledDotProductAttention::forward(Context& ctx, const Tensor& qkv) {
  EMBER_CHECK(qkv.defined() && qkv.rank() == 3 && qkv.shape()[2] % (3 * heads_) == 0,
              "{}: qkv must be [batch, seq, 3 * dim] with dim a multiple of {} heads, not {}",
              name(), heads_, qkv.defined() ? qkv.view().describe() : std::string("undefined"));
  if (ctx.training) check_nothing_saved("ScaledDotProductAttention::forward");
  const int64_t b = qkv.shape()[0], t = qkv.shape()[1], dim = qkv.shape()[2] / 3;
  if (ctx.kv_cache != nullptr) return decode(ctx, qkv.reshape({b, t, 3, heads_, dim / heads_}));
  const Tensor heads = qkv.reshape({b, t, 3, heads_, dim / heads_});
  Tensor out = Tensor::empty({b, t, heads_, dim / heads_}, qkv.dtype(), ctx.stream);
  Tensor lse = Tensor::empty({b, heads_, t}, DType::f32, ctx.stream);
  ops::attention_forward(ctx.stream, out, lse, heads, options_);
  if (ctx.training) {
    qkv_ = heads;
    out_ = out;
    lse_ = lse;
  }
  return out.reshape({b, t, dim});
}

// With a cache: the new positions' qkv rows go into this layer's slot, then the queries attend
// over every cached position.
Tensor ScaledDotProductAttention::decode(Context& ctx, const Tensor& heads) {
  KvCache& cache = *ctx.kv_cache;
  EMBER_CHECK(!ctx.training,
              "{}: a key/value cache is for inference: the forward's context must have "
              "training = false",
              name());
  const Shape& s = heads.shape();  // [B, T, 3, H, D]
  const int64_t b = s[0], t = s[1], begin = cache.position();
  Tensor& slot =
      cache.slot(this, Shape{b, cache.capacity(), 3, s[3], s[4]}, heads.dtype(), ctx.stream, t);
  const int64_t row = 3 * s[3] * s[4];  // elements per position
  const size_t bytes = static_cast<size_t>(t * row) * dtype_size(heads.dtype());
  for (int64_t i = 0; i < b; ++i) {
    copy_bytes(
        static_cast<char*>(slot.data()) +
            static_cast<size_t>((i * cache.capacity() + begin) * row) * dtype_size(heads.dtype()),
        slot.device(), static_cast<const char*>(heads.data()) + static_cast<size_t>(i) * bytes,
        heads.device(), bytes, ctx.stream);
  }
  mark_written(slot);
  Tensor out = Tensor::empty({b, t, s[3], s[4]}, heads.dtype(), ctx.stream);
  ops::attention_decode(ctx.stream, out, slot, begin + t, options_);
  return out.reshape({b, t, s[3] * s[4]});
}

Tensor ScaledDotProductAttention::backward(Context& ctx, const Tensor& dy) {
  EMBER_CHECK(qkv_.defined(),
              "{}: backward needs what forward saved (forward was not run in training mode, or "
              "it was dropped)",
              name());
  const Shape q = qkv_.shape();  // a copy: drop_saved() below releases qkv_
  const Shape out_shape{q[0], q[1], q[3] * q[4]};
  EMBER_CHECK(dy.defined() && dy.shape() == out_shape, "{}: the output gradient must be {}, not {}",
              name(), out_shape.to_string(),
              dy.defined() ? dy.view().describe() : std::string("undefined"));
  // The attention's operands share one dtype: dy is rounded to it once when it differs.
  Tensor dout = dy.reshape(out_.shape());
  if (dy.dtype() != out_.dtype()) {
    Tensor cast = Tensor::empty(out_.shape(), out_.dtype(), ctx.stream);
    ops::cast(ctx.stream, cast, dout);
    dout = cast;
  }
  Tensor dqkv = Tensor::empty(q, qkv_.dtype(), ctx.stream);
  ops::attention_backward(ctx.stream, dqkv, dout, qkv_, out_, lse_, options_);
  drop_saved();
  return dqkv.reshape({q[0], q[1], 3 * q[3] * q[4]});
}

std::shared_ptr<Sequential> make_causal_self_attention(const CausalSelfAttentionOptions& o) {
  EMBER_CHECK(o.dim > 0 && o.heads > 0 && o.dim % o.heads == 0,
              "make_causal_self_attention: dim {} must be a positive multiple of heads {}", o.dim,
              o.heads);
  const auto seed = [&](uint64_t i) -> std::optional<uint64_t> {
    if (!o.seed) return std::nullopt;
    return *o.seed * 1000003u + i;
  };
  auto block = std::make_shared<Sequential>();
  block->add("c_attn", std::make_shared<Linear>(
                           o.dim, 3 * o.dim, LinearOptions{.seed = seed(0), .device = o.device}));
  block->add("attn", std::make_shared<ScaledDotProductAttention>(o.heads));
  block->add("c_proj", std::make_shared<Linear>(
                           o.dim, o.dim, LinearOptions{.seed = seed(1), .device = o.device}));
  block->add("dropout", std::make_shared<Dropout>(DropoutOptions{.p = o.dropout, .seed = seed(2)}));
  return block;
}

}  // namespace ember::nn
