#include "ember/nn/kv_cache.hpp"

#include "ember/core/error.hpp"

namespace ember::nn {

KvCache::KvCache(int64_t capacity) : capacity_(capacity) {
  EMBER_CHECK(capacity >= 1, "KvCache: the capacity must be at least 1 position, not {}", capacity);
}

void KvCache::advance(int64_t n) {
  EMBER_CHECK(n >= 0 && position_ + n <= capacity_,
              "KvCache::advance({}): {} positions cached, the capacity is {}", n, position_,
              capacity_);
  position_ += n;
}

void KvCache::clear() {
  position_ = 0;
  for (auto& [layer, slot] : slots_) slot.filled = 0;
}

Tensor& KvCache::slot(const void* layer, const Shape& shape, DType dtype, const Stream& stream,
                      int64_t count) {
  Slot& s = slots_[layer];
  EMBER_CHECK(s.filled == position_,
              "KvCache: a layer holds {} cached positions but the cache is at position {}: "
              "advance() once after each forward, by its new positions (or the cache was filled "
              "by another model: one cache per model, clear() between sequences)",
              s.filled, position_);
  EMBER_CHECK(position_ + count <= capacity_,
              "KvCache: {} new positions after {} cached exceed the capacity of {}", count,
              position_, capacity_);
  Tensor& t = s.rows;
  if (!(t.defined() && t.shape() == shape && t.dtype() == dtype && t.device() == stream.device())) {
    EMBER_CHECK(!t.defined() || position_ == 0,
                "KvCache: a layer's cache is {} but this forward needs {} {} on {}: a new batch "
                "size, dtype or device needs clear() first",
                t.view().describe(), dtype_name(dtype), shape.to_string(),
                stream.device().to_string());
    t = Tensor::empty(shape, dtype, stream);
  }
  s.filled = position_ + count;
  return t;
}

}  // namespace ember::nn
