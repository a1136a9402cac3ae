// Tensors use the memory layer's caching allocator, and a training loop makes no
// upstream calls after its first step.
#include <gtest/gtest.h>

#include "ember/ember.hpp"
#include "ember/memory/caching_allocator.hpp"

namespace ember::memory {
namespace {

TEST(CachingAllocatorTraining, MlpStepsReuseTheCache) {
  auto caching = std::dynamic_pointer_cast<CachingAllocator>(allocator_for(Device::cpu()));
  ASSERT_NE(caching, nullptr) << "allocator_for(cpu) is not the memory layer's CachingAllocator";

  Stream stream(Device::cpu());
  data::SpiralsOptions spirals;
  const data::Dataset train = data::make_spirals(spirals);
  const int64_t batch = 64;
  const int64_t features = train.inputs.shape()[1];
  nn::MlpOptions mlp;
  mlp.inputs = features;
  mlp.hidden = 32;
  mlp.depth = 2;
  mlp.outputs = train.num_classes;
  auto model = nn::make_mlp(mlp);
  train::AdamW optimizer(model->parameters(), {.lr = 1e-2f});
  nn::SoftmaxCrossEntropy criterion;
  nn::Context ctx{stream};
  Tensor x = Tensor::empty({batch, features});
  Tensor y = Tensor::empty({batch}, DType::i32);
  std::vector<int64_t> rows(static_cast<size_t>(batch));
  int64_t upstream_calls_after_step1 = -1;
  for (int step = 1; step <= 5; ++step) {
    for (int64_t i = 0; i < batch; ++i)
      rows[static_cast<size_t>(i)] = (i * 7 + step) % train.size();
    data::gather(train, rows, x, y);
    optimizer.zero_grad();
    const Tensor logits = model->forward(ctx, x);
    const Tensor loss = criterion.forward(ctx, logits, y);
    model->backward(ctx, criterion.backward(ctx));
    optimizer.step();
    (void)loss.item();
    const AllocatorStats s = caching->stats();
    const int64_t calls = s.segment_allocs + s.page_maps;
    if (step == 1) {
      upstream_calls_after_step1 = calls;
    } else {
      EXPECT_EQ(calls, upstream_calls_after_step1) << "upstream calls grew at step " << step;
    }
  }
  EXPECT_GT(caching->stats().allocations, 0);
}

}  // namespace
}  // namespace ember::memory
