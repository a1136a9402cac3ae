// KvCache: a key/value cache for decoding, so that each new token of generation costs one
// position, not a rerun of the whole window.
//
//   nn::KvCache cache(config.context);
//   nn::Context ctx{stream, /*training=*/false};
//   ctx.kv_cache = &cache;
//   logits = model.forward(ctx, prompt);  cache.advance(prompt_length);
//   logits = model.forward(ctx, next);    cache.advance(1);   ...
//
// Under a context with a cache, nn::ScaledDotProductAttention writes its input's fused qkv rows
// into its own slot at positions position() ... position() + T - 1 and attends over all cached
// positions (ops::attention_decode), and nn::TokenPositionEmbedding numbers the new tokens from
// position(). The caller advances the cache after each forward. Inference only: a training
// forward with a cache is an Error.
#pragma once

#include <cstdint>
#include <map>

#include "ember/core/tensor.hpp"

namespace ember::nn {

class KvCache {
 public:
  explicit KvCache(int64_t capacity);  // positions at most (the model's context, say)

  int64_t capacity() const { return capacity_; }
  int64_t position() const { return position_; }  // positions cached so far
  // After a forward of n new positions. Beyond the capacity: an Error.
  void advance(int64_t n);
  // Forgets the positions (a new sequence); the slots' memory is kept.
  void clear();

  // A layer's slot, [batch, capacity, 3, heads, head_dim] of `dtype` on `stream`'s device, made
  // at its first use, for `count` new positions from position(). Errors: a layer whose shape
  // changed (another batch) except at position 0; a layer that holds other positions than
  // position() (a forward without advance(), an advance() without a forward, or a cache filled
  // by another model); more positions than the capacity. The layer then holds them.
  Tensor& slot(const void* layer, const Shape& shape, DType dtype, const Stream& stream,
               int64_t count);

 private:
  struct Slot {
    Tensor rows;
    int64_t filled = 0;  // positions written
  };
  int64_t capacity_;
  int64_t position_ = 0;
  std::map<const void*, Slot> slots_;
};

}  // namespace ember::nn
