// Stream-ordered memory, tested as a GPU runs it: lazy streams (work runs only when a host wait
// needs it), so a read that does not wait for the right stream, or a block reused while queued
// work still reads it, gives a wrong answer here. The first three tests are the reproductions
// from outside testing; each failed before tensors remembered their stream.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ember/amp/grad_scaler.hpp"
#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"
#include "ember/data/spirals.hpp"
#include "ember/memory/caching_allocator.hpp"
#include "ember/memory/cuda_stream_events.hpp"
#include "ember/memory/cuda_upstream.hpp"
#include "ember/memory/limiting_adaptor.hpp"
#include "ember/nn/loss.hpp"
#include "ember/nn/mlp.hpp"
#include "ember/nn/parameter.hpp"
#include "ember/ops/elementwise.hpp"
#include "ember/ops/softmax_cross_entropy.hpp"
#include "ember/simt/race_check.hpp"
#include "ember/simt/shim.hpp"
#include "ember/train/adamw.hpp"
#include "stream_test_support.hpp"
#include "test_support.hpp"

namespace {

using ember::Device;
using ember::DType;
using ember::Stream;
using ember::Tensor;
namespace simt = ember::simt;

using ember::testing::error_message;
using ember::testing::LazyStreams;
using ember::testing::RaceCheck;

const Device kGpu = Device::cuda(0);

cudaStream_t native(const Stream& s) {
  return static_cast<cudaStream_t>(s.native());
}

// Reproduction 1: an op on the tensor's stream, then item(). item() used to copy on the
// legacy default stream, which does not wait for ember's non-blocking streams.
TEST(EmulatedStreams, ItemSeesTheOpQueuedBeforeIt) {
  const LazyStreams lazy;
  Tensor a = Tensor::full({1}, 2.0, DType::f32, kGpu);
  Stream s = a.stream();
  ember::ops::scale(s, a, a, 3.0f);
  EXPECT_EQ(a.item(), 6.0);
  ember::ops::scale(s, a, a, 0.5f);
  EXPECT_EQ(a.to_vector<float>(), std::vector<float>{3.0f});
  EXPECT_EQ(a.to(Device::cpu()).item(), 3.0);
}

// Reproduction 2: a tensor freed while a queued kernel still reads it. The next allocation
// reuses its block; the copy into it used to run at once, before the kernel (b = 2 * 9 = 18).
TEST(EmulatedStreams, FreedInputIsNotOverwrittenBeforeTheKernelReadingItRuns) {
  const LazyStreams lazy;
  const Stream s = ember::current_stream(kGpu);
  Tensor b = Tensor::empty({256}, DType::f32, s);
  const void* a_data = nullptr;
  {
    Tensor a = Tensor::full({256}, 3.0, DType::f32, s);
    a_data = a.data();
    Stream run = s;
    ember::ops::scale(run, b, a, 2.0f);
  }  // a goes back to the allocator; the scale has not run
  const Tensor c = Tensor::from_vector(std::vector<float>(256, 9.0f), {256}, s);
  EXPECT_EQ(c.data(), a_data) << "the same stream may reuse the block at once";
  EXPECT_EQ(b.to_vector<float>(), std::vector<float>(256, 6.0f));
  EXPECT_EQ(c.to_vector<float>(), std::vector<float>(256, 9.0f));
}

// The same on another stream: recorded, the block waits for that stream's work.
TEST(EmulatedStreams, BlockUsedOnAnotherStreamWaitsForIt) {
  const LazyStreams lazy;
  const Stream s = ember::current_stream(kGpu);
  Stream other(kGpu);
  Tensor b = Tensor::empty({256}, DType::f32, other);
  const void* a_data = nullptr;
  simt::hold_stream(native(other));
  {
    Tensor a = Tensor::full({256}, 3.0, DType::f32, s);
    a_data = a.data();
    other.wait(s);  // the fill first
    ember::ops::scale(other, b, a, 2.0f);
    a.record_stream(other);
  }
  const Tensor c = Tensor::full({256}, 9.0, DType::f32, s);
  EXPECT_NE(c.data(), a_data) << "handed out while a held stream still reads it";
  simt::release_stream(native(other));
  EXPECT_EQ(b.to_vector<float>(), std::vector<float>(256, 6.0f));
  EXPECT_EQ(c.to_vector<float>(), std::vector<float>(256, 9.0f));
}

// Reproduction 3: empty_cache unmapping (expandable segments) or freeing a segment whose memory
// a queued kernel still reads: the allocator waits for the device first (it segfaulted).
TEST(EmulatedStreams, EmptyCacheWaitsForQueuedWork) {
  const LazyStreams lazy;
  auto cache =
      std::dynamic_pointer_cast<ember::memory::CachingAllocator>(ember::allocator_for(kGpu));
  ASSERT_NE(cache, nullptr);
  const Stream s = ember::current_stream(kGpu);
  const int64_t n = 3 << 20;  // 12 MiB: pages of its own
  Tensor b = Tensor::empty({n}, DType::f32, s);
  {
    Tensor a = Tensor::full({n}, 1.5, DType::f32, s);
    Stream run = s;
    ember::ops::scale(run, b, a, 2.0f);
  }
  cache->empty_cache();
  const std::vector<float> got = b.to_vector<float>();
  EXPECT_EQ(got.front(), 3.0f);
  EXPECT_EQ(got.back(), 3.0f);
}

// A copy between tensors of two streams waits for the source's stream (on the device).
TEST(EmulatedStreams, CopyWaitsForTheSourcesStream) {
  const LazyStreams lazy;
  Stream first(kGpu), second(kGpu);
  Tensor a = Tensor::full({1000}, 4.0, DType::f32, first);
  Tensor b = Tensor::zeros({1000}, DType::f32, second);
  b.copy_(a);
  EXPECT_EQ(b.to_vector<float>(), std::vector<float>(1000, 4.0f));
  const Tensor c = a.to(second).clone();  // same device: a itself
  EXPECT_EQ(c.stream(), first);
  EXPECT_EQ(c.to_vector<float>(), std::vector<float>(1000, 4.0f));
}

// Host reads wait for the tensor's own stream only: another stream's held work does not block.
TEST(EmulatedStreams, HostReadsWaitForTheTensorsStreamOnly) {
  const LazyStreams lazy;
  Stream busy(kGpu);
  Tensor held = Tensor::zeros({4}, DType::f32, busy);
  simt::hold_stream(native(busy));
  Tensor x = Tensor::full({4}, 1.0, DType::f32, kGpu);
  Stream s = x.stream();
  ember::ops::scale(s, x, x, 5.0f);
  EXPECT_EQ(x.to_vector<float>(), std::vector<float>(4, 5.0f));
  simt::release_stream(native(busy));
  EXPECT_EQ(held.to_vector<float>(), std::vector<float>(4, 0.0f));
}

TEST(EmulatedStreams, StreamGuardChangesWhereTensorsAreCreated) {
  Stream mine(kGpu);
  EXPECT_NE(ember::current_stream(kGpu), mine);
  {
    const ember::StreamGuard guard(mine);
    EXPECT_EQ(ember::current_stream(kGpu), mine);
    EXPECT_EQ(Tensor::zeros({3}, DType::f32, kGpu).stream(), mine);
    {
      Stream inner(kGpu);
      const ember::StreamGuard nested(inner);
      EXPECT_EQ(Tensor::empty({3}, DType::f32, kGpu).stream(), inner);
    }
    EXPECT_EQ(ember::current_stream(kGpu), mine);
  }
  EXPECT_EQ(ember::current_stream(kGpu), ember::default_stream(kGpu));
  EXPECT_EQ(Tensor::empty({3}).stream().native(), nullptr);  // the CPU
}

// A tensor keeps its stream alive: the Stream handle may go first.
TEST(EmulatedStreams, TensorOutlivesTheStreamHandleItWasCreatedOn) {
  const LazyStreams lazy;
  Tensor t;
  {
    Stream temporary(kGpu);
    t = Tensor::full({8}, 7.0, DType::f32, temporary);
  }
  EXPECT_EQ(t.to_vector<float>(), std::vector<float>(8, 7.0f));
}

// A stream's native handle outlives it: the next Stream takes it over, so blocks the old stream
// freed, which the allocator keeps under that handle, go to work ordered after the old stream's.
// (Destroyed, the handle could come back from cudaStreamCreate for an unordered new stream: a
// block still used by the old stream's queued fill would be rewritten before the fill ran.)
TEST(EmulatedStreams, ANewStreamTakesOverADeadStreamsHandleAndOrder) {
  const LazyStreams lazy;
  const RaceCheck race_check;
  const void* old_native = nullptr;
  const void* block = nullptr;
  {
    Stream old(kGpu);
    old_native = old.native();
    simt::hold_stream(native(old));
    Tensor t = Tensor::empty({1 << 16}, DType::f32, old);
    block = t.data();
    t.fill_(1.0);  // queued, held
  }                // t's block goes back to the cache under the old handle; the old Stream is gone
  Stream next(kGpu);
  ASSERT_EQ(next.native(), old_native) << "the dead stream's handle is taken over";
  Tensor u = Tensor::empty({1 << 16}, DType::f32, next);
  EXPECT_EQ(u.data(), block) << "the same handle reuses the block at once";
  u.fill_(2.0);
  simt::release_stream(native(next));
  EXPECT_EQ(u.to_vector<float>(), std::vector<float>(1 << 16, 2.0f));  // the old fill ran first
  Stream other(kGpu);
  EXPECT_NE(other.native(), next.native()) << "a live stream's handle is never shared";
}

// Event::query on unfinished work answers false and leaves no error behind for the next call
// (a kernel launch under nvcc checks cudaGetLastError).
TEST(EmulatedStreams, EventQueryLeavesNoError) {
  Stream s(kGpu);
  ember::Event e(kGpu);
  simt::hold_stream(native(s));
  e.record(s);
  EXPECT_FALSE(e.query());
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaStreamQuery(native(s)), cudaErrorNotReady);  // the raw runtime call does leave it
  EXPECT_EQ(cudaGetLastError(), cudaErrorNotReady);
  simt::release_stream(native(s));
  e.synchronize();
  EXPECT_TRUE(e.query());
}

// Deferred work's errors surface from the next host wait, once.
TEST(EmulatedStreams, DeferredErrorsSurfaceFromTheNextWait) {
  const LazyStreams lazy;
  Stream s(kGpu);
  bool after = false;
  simt::stream_submit(native(s), [] { throw ember::Error("kernel fault"); });
  simt::stream_submit(native(s), [&] { after = true; });
  EXPECT_FALSE(after);
  EXPECT_THROW(s.synchronize(), ember::Error);
  EXPECT_TRUE(after);
  EXPECT_NO_THROW(s.synchronize());
}

// The OOM retry waits for blocks whose other-stream work is still queued, instead of failing.
TEST(EmulatedStreams, OutOfMemoryRetryWaitsForPendingBlocks) {
  const LazyStreams lazy;
  ember::memory::AllocatorConfig config;
  config.expandable_segments = false;
  auto upstream = std::make_shared<ember::memory::LimitingUpstream>(
      std::make_shared<ember::memory::CudaUpstream>(0), size_t{24} << 20);
  ember::memory::CachingAllocator cache(upstream, nullptr, config,
                                        ember::memory::make_cuda_stream_events(0));
  Stream a(kGpu), b(kGpu);
  void* p = cache.allocate(size_t{20} << 20, a.id());
  cache.record_stream(p, b.id());
  ASSERT_EQ(cudaMemsetAsync(p, 0, size_t{20} << 20, native(b)), cudaSuccess);  // queued
  cache.free(p);  // pending on b's event
  void* q = nullptr;
  EXPECT_NO_THROW(q = cache.allocate(size_t{20} << 20, a.id()));
  EXPECT_EQ(cache.stats().ooms, 0);
  cache.free(q);
}

// After the first step, a training step on cuda:0 makes no synchronizing call but the explicit
// read of the loss (one D2H copy into pageable memory and one stream synchronize).
TEST(EmulatedStreams, TrainingStepMakesNoSynchronizingCallButItsRead) {
  const LazyStreams lazy;
  const ember::data::Dataset data =
      ember::data::make_spirals({.classes = 4, .points_per_class = 40, .seed = 5});
  auto model = ember::nn::make_mlp(
      {.inputs = 2, .hidden = 32, .depth = 2, .outputs = 4, .seed = 3, .device = kGpu});
  ember::train::AdamW optimizer(model->parameters(), {.lr = 1e-2f});
  ember::nn::SoftmaxCrossEntropy criterion;
  Stream stream = ember::current_stream(kGpu);
  ember::nn::Context ctx{stream};
  const Tensor x_host = data.inputs.slice(0, 64), y_host = data.labels.slice(0, 64);
  std::vector<double> losses;
  simt::SyncCounts before;
  for (int step = 0; step < 4; ++step) {
    if (step == 1) before = simt::sync_counts();
    const Tensor x = x_host.to(stream), y = y_host.to(stream);
    optimizer.zero_grad();
    const Tensor loss = criterion.forward(ctx, model->forward(ctx, x), y);
    model->backward(ctx, criterion.backward(ctx));
    optimizer.step(stream);
    losses.push_back(loss.item());
  }
  const simt::SyncCounts after = simt::sync_counts();
  EXPECT_EQ(after.device_synchronize - before.device_synchronize, 0u);
  EXPECT_EQ(after.event_synchronize - before.event_synchronize, 0u);
  EXPECT_EQ(after.stream_synchronize - before.stream_synchronize, 3u);
  EXPECT_EQ(after.blocking_copies - before.blocking_copies, 3u);
  EXPECT_LT(losses.back(), losses.front());
}

// The same with f16 autocast and the GradScaler: after the first step (which creates state), a
// step queues everything, the scaler's unscale, skip and update included, and waits for
// nothing: no synchronizing call at all while the loss is not read.
TEST(EmulatedStreams, AmpTrainingStepMakesNoSynchronizingCall) {
  const LazyStreams lazy;
  const ember::data::Dataset data =
      ember::data::make_spirals({.classes = 4, .points_per_class = 40, .seed = 5});
  auto model = ember::nn::make_mlp(
      {.inputs = 2, .hidden = 32, .depth = 2, .outputs = 4, .seed = 3, .device = kGpu});
  ember::train::AdamW optimizer(model->parameters(), {.lr = 1e-2f});
  ember::amp::GradScaler scaler(kGpu);
  ember::nn::SoftmaxCrossEntropy criterion;
  Stream stream = ember::current_stream(kGpu);
  ember::nn::Context ctx{stream, true, ember::nn::Precision::f16};
  const Tensor x = data.inputs.slice(0, 64).to(stream), y = data.labels.slice(0, 64).to(stream);
  std::vector<Tensor> losses;
  simt::SyncCounts before;
  for (int step = 0; step < 5; ++step) {
    if (step == 1) before = simt::sync_counts();
    optimizer.zero_grad();
    losses.push_back(criterion.forward(ctx, model->forward(ctx, x), y));
    model->backward(ctx, criterion.backward(ctx, scaler.scale()));
    scaler.step(stream, optimizer);
    scaler.update(stream);
  }
  const simt::SyncCounts after = simt::sync_counts();
  EXPECT_EQ(after.device_synchronize - before.device_synchronize, 0u);
  EXPECT_EQ(after.event_synchronize - before.event_synchronize, 0u);
  EXPECT_EQ(after.stream_synchronize - before.stream_synchronize, 0u);
  EXPECT_EQ(after.blocking_copies - before.blocking_copies, 0u);
  EXPECT_LT(losses.back().item(), losses.front().item());
  EXPECT_EQ(scaler.skipped_steps(), 0);
}

// During a raw CUDA graph capture, host reads are refused with a clear error before anything is
// read (ember::Graph builds on this: test_emulated_graph.cpp).
TEST(EmulatedStreams, HostReadsAreRefusedDuringACapture) {
  Stream s(kGpu);
  Tensor x = Tensor::full({16}, 1.0, DType::f32, s);
  x.to_vector<float>();
  ASSERT_EQ(cudaStreamBeginCapture(native(s), cudaStreamCaptureModeGlobal), cudaSuccess);
  EXPECT_TRUE(s.capturing());
  for (const auto& [what, call] : std::vector<std::pair<std::string, std::function<void()>>>{
           {"Stream::synchronize", [&] { s.synchronize(); }},
           {"Tensor::item", [&] { (void)x.slice(0, 1).item(); }},
       }) {
    try {
      call();
      ADD_FAILURE() << what << ": expected an ember::Error";
    } catch (const ember::Error& e) {
      EXPECT_NE(e.message().find("capturing a CUDA graph"), std::string::npos)
          << what << ": " << e.message();
    }
  }
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(native(s), &graph), cudaSuccess);
  cudaGraphDestroy(graph);
  EXPECT_FALSE(s.capturing());
  EXPECT_EQ(x.to_vector<float>(), std::vector<float>(16, 1.0f));
}

// Found by outside testing: a stream recorded on a tensor dies before the tensor.
TEST(EmulatedStreams, TensorFreedAfterTheStreamItWasRecordedOnIsGone) {
  const LazyStreams lazy;
  Tensor a = Tensor::full({4}, 1.0, DType::f32, kGpu);
  {
    Stream copier(kGpu);
    Tensor b = Tensor::empty({4}, DType::f32, copier);
    b.copy_(a);  // records copier on a
    EXPECT_EQ(b.to_vector<float>(), std::vector<float>(4, 1.0f));
  }
  EXPECT_NO_THROW(a = Tensor());  // used to terminate: an event recorded on a dead stream
}

// A bad label checked on a stream destroyed before any synchronize: reported by the next
// synchronize of another stream, once.
TEST(EmulatedStreams, LabelErrorOfADestroyedStreamIsNotLost) {
  const LazyStreams lazy;
  const Tensor logits = Tensor::zeros({2, 3}, DType::f32, kGpu);
  const Tensor labels = Tensor::from_vector(std::vector<int32_t>{0, 7}, {2}, kGpu);
  {
    Stream s(kGpu);
    s.wait(logits.stream());
    Tensor loss = Tensor::empty({}, DType::f32, s), probs = Tensor::empty({2, 3}, DType::f32, s);
    ember::ops::softmax_cross_entropy_forward(s, loss, probs, logits, labels);
  }
  Stream other(kGpu);
  try {
    other.synchronize();
    ADD_FAILURE() << "expected the label error";
  } catch (const ember::Error& e) {
    EXPECT_NE(e.message().find("label 7 in row 1 is out of range [0, 3)"), std::string::npos)
        << e.message();
  }
  EXPECT_NO_THROW(other.synchronize());
}

// A host read that reports an earlier failure has finished its own copy first; no failure is
// dropped when several are pending.
TEST(EmulatedStreams, DeferredFailuresAreEachReportedOnceAfterTheWait) {
  const LazyStreams lazy;
  Stream s1(kGpu), s2(kGpu);
  Tensor t = Tensor::full({256}, 5.0, DType::f32, s2);
  simt::stream_submit(native(s1), [] { throw ember::Error("fault A"); });
  simt::stream_submit(native(s1), [] { throw ember::Error("fault B"); });
  EXPECT_THROW(s1.synchronize(), ember::Error);  // reports one of them
  std::vector<float> got;
  EXPECT_THROW(got = t.to_vector<float>(), ember::Error);  // the other one
  EXPECT_NO_THROW(got = t.to_vector<float>());
  EXPECT_EQ(got, std::vector<float>(256, 5.0f));
}

TEST(EmulatedStreams, OptimizerOrdersItselfWithTheStreamsOfItsTensors) {
  const LazyStreams lazy;
  for (int run = 0; run < 2; ++run) {
    ember::nn::Parameter p{"w", Tensor::full({4}, 1.0, DType::f32, kGpu),
                           Tensor::full({4}, 0.5, DType::f32, kGpu)};
    Stream s(kGpu);
    ember::train::AdamW opt({&p}, {.lr = 0.1f, .weight_decay = 0.0f});  // zero state, queued
    opt.step(s);                   // on another stream: waits for the parameter's
    opt.zero_grad(/*fill=*/true);  // on the gradient's stream: waits for the step
    const std::vector<float> w = p.value.to_vector<float>();
    EXPECT_NEAR(w[0], 0.9f, 1e-6f);
    EXPECT_EQ(p.grad.to_vector<float>(), std::vector<float>(4, 0.0f));
  }
}

TEST(EmulatedStreams, RequestLargerThanTheDeviceFailsAtOnce) {
  try {
    Tensor::empty({int64_t{1} << 40}, DType::f32, kGpu);  // 4 TiB
    ADD_FAILURE() << "expected OutOfMemory";
  } catch (const ember::memory::OutOfMemory& e) {
    EXPECT_EQ(e.requested(), size_t{4} << 40);
  }
}

// Found in review: a stream whose only queued item is a wait for an event that a host wait
// already completed must still wake the next host wait on it (it hung in lazy mode).
TEST(EmulatedStreams, WaitOnAStreamWhoseEventWaitIsAlreadySatisfiedReturns) {
  const LazyStreams lazy;
  Stream a(kGpu), b(kGpu);
  Tensor x = Tensor::full({16}, 1.0, DType::f32, b);
  ember::Event e(kGpu);
  e.record(b);
  a.wait(e);
  e.synchronize();
  EXPECT_NO_THROW(a.synchronize());
}

// A host read that cannot complete (its stream is held) throws, and its copy never runs later
// into the caller's buffer, which is gone by then (ASan builds would report it).
TEST(EmulatedStreams, AFailedHostReadLeavesNoCopyBehind) {
  const LazyStreams lazy;
  Stream s(kGpu);
  Tensor x = Tensor::full({64}, 3.0, DType::f32, s);
  simt::hold_stream(native(s));
  EXPECT_THROW((void)x.to_vector<float>(), ember::Error);
  simt::release_stream(native(s));
  std::vector<float> canary(64, -1.0f);
  s.synchronize();
  EXPECT_EQ(canary, std::vector<float>(64, -1.0f));
  EXPECT_EQ(x.to_vector<float>(), std::vector<float>(64, 3.0f));
}

// The mistake train_mlp made: tensors on the device's current stream, the step on a new stream.
TEST(EmulatedStreamRaces, AnOpOnAnotherStreamWithoutAWaitIsReported) {
  const RaceCheck check;
  Tensor x = Tensor::full({64}, 1.0, DType::f32, kGpu);  // written on the current stream
  Stream other(kGpu);
  Tensor y = Tensor::empty({64}, DType::f32, other);
  const std::string message = error_message([&] { ember::ops::scale(other, y, x, 2.0f); });
  EXPECT_NE(message.find("stream race on device memory"), std::string::npos) << message;
  EXPECT_NE(message.find("kernel ember::kernels::map_kernel"), std::string::npos) << message;
  EXPECT_NE(message.find("it, but kernel ember::kernels::fill_kernel"), std::string::npos)
      << message;
  EXPECT_NE(message.find("last wrote it"), std::string::npos) << message;
  // Ordered by a wait, the same op is clean.
  other.wait(x.stream());
  EXPECT_NO_THROW(ember::ops::scale(other, y, x, 2.0f));
  x.record_stream(other);
  EXPECT_EQ(y.to_vector<float>(), std::vector<float>(64, 2.0f));
}

TEST(EmulatedStreamRaces, WritingWhatAnotherStreamStillReadsIsReported) {
  const RaceCheck check;
  const Stream s = ember::current_stream(kGpu);
  Stream other(kGpu);
  Tensor x = Tensor::full({64}, 1.0, DType::f32, s);
  Tensor y = Tensor::empty({64}, DType::f32, other);
  other.wait(s);
  ember::ops::scale(other, y, x, 2.0f);  // other reads x
  Stream writer = s;
  const std::string message = error_message([&] { ember::ops::scale(writer, x, x, 3.0f); });
  EXPECT_NE(message.find("writes it, but kernel"), std::string::npos) << message;
  EXPECT_NE(message.find("still reads it"), std::string::npos) << message;
  // Once the host has waited for the reader, the write is ordered after it.
  other.synchronize();
  EXPECT_NO_THROW(ember::ops::scale(writer, x, x, 3.0f));
  EXPECT_EQ(x.to_vector<float>(), std::vector<float>(64, 3.0f));
}

TEST(EmulatedStreamRaces, ReadsFromTwoStreamsAndEventOrderingAreClean) {
  const RaceCheck check;
  const Stream s = ember::current_stream(kGpu);
  Stream a(kGpu), b(kGpu);
  Tensor x = Tensor::full({64}, 1.0, DType::f32, s);
  ember::Event written(kGpu);
  written.record(s);
  a.wait(written);
  b.wait(written);
  Tensor ya = Tensor::empty({64}, DType::f32, a), yb = Tensor::empty({64}, DType::f32, b);
  EXPECT_NO_THROW(ember::ops::scale(a, ya, x, 2.0f));
  EXPECT_NO_THROW(ember::ops::scale(b, yb, x, 4.0f));
  // Raw copies are checked too: a third stream writes ya's bytes with no ordering at all.
  Stream raw(kGpu);
  const std::string message = error_message(
      [&] { ASSERT_EQ(cudaMemsetAsync(ya.data(), 0, 256, native(raw)), cudaSuccess); });
  EXPECT_NE(message.find("cudaMemsetAsync of 256 bytes on stream"), std::string::npos) << message;
  // A copy between the two results, ordered by copy_'s own wait.
  EXPECT_NO_THROW(yb.copy_(ya));
  EXPECT_EQ(yb.to_vector<float>(), std::vector<float>(64, 2.0f));
}

}  // namespace
