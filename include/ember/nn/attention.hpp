// Self-attention modules: ScaledDotProductAttention (ops::attention_forward/backward over a
// fused qkv, no parameters) and make_causal_self_attention, GPT-2's attention sublayer:
//   Linear(dim, 3 dim) "c_attn" -> ScaledDotProductAttention(heads) "attn" ->
//   Linear(dim, dim) "c_proj" -> Dropout "dropout"
// Inputs and outputs are [B, T, dim]; under autocast the projections and the attention compute
// in f16/bf16 (f32 softmax statistics).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "ember/nn/module.hpp"
#include "ember/nn/sequential.hpp"
#include "ember/ops/attention.hpp"

namespace ember::nn {

class ScaledDotProductAttention final : public Module {
 public:
  explicit ScaledDotProductAttention(int64_t heads, const ops::AttentionOptions& options = {});

  // qkv [B, T, 3 * dim] (q, k, v side by side, each [heads, dim / heads] per position; dim a
  // multiple of heads) -> [B, T, dim] in qkv's dtype. With ctx.kv_cache (inference): the T new
  // positions join the cache and attend over every cached one (nn/kv_cache.hpp).
  Tensor forward(Context& ctx, const Tensor& qkv) override;
  Tensor backward(Context& ctx, const Tensor& dy) override;  // -> dqkv [B, T, 3 * dim]
  void drop_saved() override {
    qkv_ = Tensor();
    out_ = Tensor();
    lse_ = Tensor();
  }
  bool has_saved() const override { return qkv_.defined(); }
  std::string name() const override;
  int64_t heads() const { return heads_; }

 private:
  Tensor decode(Context& ctx, const Tensor& heads);  // with ctx.kv_cache

  int64_t heads_;
  ops::AttentionOptions options_;
  Tensor qkv_, out_, lse_;  // saved by forward: qkv and out as [B, T, 3, H, D] and [B, T, H, D]
};

struct CausalSelfAttentionOptions {
  int64_t dim = 768;
  int64_t heads = 12;
  float dropout = 0.0f;  // after the output projection
  // Layers seeded from (seed, i); without a seed, each takes the next default seed.
  std::optional<uint64_t> seed;
  Device device;
};

std::shared_ptr<Sequential> make_causal_self_attention(const CausalSelfAttentionOptions& options);

}  // namespace ember::nn
