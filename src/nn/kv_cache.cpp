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

Tensor& KvCache::slot(const void* layer, const Shape& shape, DType dtype, const Stream& stream) {
  Tensor& t = slots_[layer];
  if (t.defined() && t.shape() == shape && t.dtype() == dtype && t.device() == stream.device()) {
    return t;
  }
  EMBER_CHECK(!t.defined() || position_ == 0,
              "KvCache: a layer's cache is {} but this forward needs {} {} on {}: a new batch "
              "size, dtype or device needs clear() first",
              t.view().describe(), dtype_name(dtype), shape.to_string(),
              stream.device().to_string());
  t = Tensor::empty(shape, dtype, stream);
  return t;
}

}  // namespace ember::nn
