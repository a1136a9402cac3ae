// ember::Graph on emulated cuda:0 (the shim records a capture, with the streams that join it, and
// replays its items in order, the race checker checking each launch): replays compute what eager
// work computes, bitwise, reading inputs refilled between replays; a whole training step (MLP,
// cross-entropy, backward, AdamW) replayed gives the eager run's parameters bitwise; the allocator
// keeps the graph's memory in its pool until the graph is gone; what a graph cannot hold is an
// Error naming the call, and CUDA's refusals are CUDA's errors.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "ember/amp/grad_scaler.hpp"
#include "ember/core/graph.hpp"
#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"
#include "ember/memory/caching_allocator.hpp"
#include "ember/nn/loss.hpp"
#include "ember/nn/mlp.hpp"
#include "ember/ops/elementwise.hpp"
#include "ember/ops/matmul.hpp"
#include "ember/simt/shim.hpp"
#include "ember/train/accumulation.hpp"
#include "ember/train/adamw.hpp"
#include "ember/train/captured_step.hpp"
#include "ember/train/residual_mlp.hpp"
#include "stream_test_support.hpp"
#include "test_support.hpp"

namespace {

using ember::Device;
using ember::DType;
using ember::Graph;
using ember::Shape;
using ember::Stream;
using ember::Tensor;
using ember::testing::expect_error;

const Device kGpu = Device::cuda(0);

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::shared_ptr<ember::memory::CachingAllocator> caching_allocator() {
  auto a = std::dynamic_pointer_cast<ember::memory::CachingAllocator>(ember::allocator_for(kGpu));
  EXPECT_NE(a, nullptr);
  return a;
}

// y = gelu(x w): eagerly, and by a graph captured once and replayed on new inputs.
TEST(EmulatedGraph, ReplaysComputeWhatEagerWorkComputes) {
  Stream s(kGpu);
  const Tensor w = Tensor::from_vector(random_values(48 * 40, 1), Shape{48, 40}, s);
  const Tensor a1 = Tensor::from_vector(random_values(37 * 48, 2), Shape{37, 48}, s);
  const Tensor a2 = Tensor::from_vector(random_values(37 * 48, 3), Shape{37, 48}, s);
  auto eager = [&](const Tensor& x) {
    Tensor h = Tensor::empty({37, 40}, DType::f32, s), y = Tensor::empty({37, 40}, DType::f32, s);
    ember::ops::matmul(s, h.view(), x.view(), w.view());
    ember::ops::gelu_forward(s, y.view(), h.view());
    return y.to_vector<float>();
  };
  const std::vector<float> want1 = eager(a1), want2 = eager(a2);

  Tensor x = Tensor::empty({37, 48}, DType::f32, s);  // the graph's input, made before it
  Tensor y;
  const uint64_t launches = ember::simt::sync_counts().graph_launches;
  Graph graph = Graph::capture(s, [&] {
    Tensor h = Tensor::empty({37, 40}, DType::f32, s);  // a temporary, from the graph's pool
    y = Tensor::empty({37, 40}, DType::f32, s);         // the output: kept for the replays
    ember::ops::matmul(s, h.view(), x.view(), w.view());
    ember::ops::gelu_forward(s, y.view(), h.view());
  });
  EXPECT_GE(graph.nodes(), 2u);
  EXPECT_FALSE(s.capturing());
  x.copy_(a1);
  graph.replay(s);
  EXPECT_EQ(y.to_vector<float>(), want1);
  x.copy_(a2);  // refilled between replays, outside the graph
  graph.replay(s);
  EXPECT_EQ(y.to_vector<float>(), want2);
  EXPECT_EQ(ember::simt::sync_counts().graph_launches - launches, 2u);
  // On another stream of the device too.
  Stream other(kGpu);
  other.wait(s);
  x.copy_(a1);
  s.synchronize();
  graph.replay(other);
  other.synchronize();
  EXPECT_EQ(y.to_vector<float>(), want1);
}

struct Mlp {
  std::shared_ptr<ember::nn::Sequential> model;
  std::unique_ptr<ember::train::AdamW> optimizer;
  ember::nn::SoftmaxCrossEntropy criterion;
  explicit Mlp(Device device) {
    model = ember::nn::make_mlp(
        {.inputs = 6, .hidden = 40, .depth = 3, .outputs = 5, .seed = 11, .device = device});
    optimizer = std::make_unique<ember::train::AdamW>(
        model->parameters(), ember::train::AdamWOptions{.lr = 1e-2f, .weight_decay = 0.01f});
  }
  Tensor step(Stream& s, const Tensor& x, const Tensor& y) {
    ember::nn::Context ctx{s};
    optimizer->zero_grad();
    const Tensor logits = model->forward(ctx, x);
    Tensor loss = criterion.forward(ctx, logits, y);
    model->backward(ctx, criterion.backward(ctx));
    optimizer->step(s);
    return loss;
  }
};

// A whole training step (zero_grad, forward, loss, backward, AdamW with its device-side step
// counts) captured once: five replays on five batches give the parameters and losses of five
// eager steps, bitwise.
TEST(EmulatedGraph, AReplayedTrainingStepMatchesEagerStepsBitwise) {
  Stream s = ember::current_stream(kGpu);
  std::vector<Tensor> xs, ys;
  for (uint32_t i = 0; i < 6; ++i) {
    xs.push_back(Tensor::from_vector(random_values(32 * 6, 10 + i), Shape{32, 6}, s));
    std::vector<int32_t> labels(32);
    for (size_t j = 0; j < labels.size(); ++j) labels[j] = static_cast<int32_t>((j * 7 + i) % 5);
    ys.push_back(Tensor::from_vector(labels, Shape{32}, s));
  }
  Mlp eager(kGpu), graphed(kGpu);
  std::vector<float> eager_losses;
  for (int i = 0; i < 6; ++i) eager_losses.push_back(eager.step(s, xs[i], ys[i]).item());

  // Warm-up step eagerly (the optimizer's state is made on its first step), then the capture.
  EXPECT_EQ(graphed.step(s, xs[0], ys[0]).item(), eager_losses[0]);
  Tensor x = Tensor::empty({32, 6}, DType::f32, s), y = Tensor::empty({32}, DType::i32, s);
  Tensor loss;
  Graph step = Graph::capture(s, [&] { loss = graphed.step(s, x, y); });
  for (int i = 1; i < 6; ++i) {
    x.copy_(xs[i]);
    y.copy_(ys[i]);
    step.replay(s);
    EXPECT_EQ(loss.item(), eager_losses[i]) << "step " << i;
  }
  const auto p = graphed.model->parameters(), q = eager.model->parameters();
  ASSERT_EQ(p.size(), q.size());
  for (size_t i = 0; i < p.size(); ++i) {
    EXPECT_EQ(p[i]->value.to_vector<float>(), q[i]->value.to_vector<float>()) << p[i]->name;
  }
  EXPECT_EQ(graphed.optimizer->applied_steps(), 6);
}

// The graph's memory stays in its pool (memory stats show it) until the graph is destroyed;
// memory of the stream freed during the capture is not reused meanwhile.
TEST(EmulatedGraph, ThePoolKeepsTheGraphsMemoryUntilTheGraphIsGone) {
  auto allocator = caching_allocator();
  Stream s(kGpu);
  const int64_t pools_before = allocator->stats().graph_pools;
  Tensor before = Tensor::full({1 << 16}, 2.0, DType::f32, s);
  void* const freed_address = before.data();
  Tensor out;
  std::optional<Graph> graph;
  graph.emplace(Graph::capture(s, [&] {
    Tensor t = Tensor::empty({1 << 16}, DType::f32, s);
    ember::ops::scale(s, t.view(), before.view(), 3.0f);
    before = Tensor();  // freed during the capture: the graph reads it at each replay
    out = Tensor::empty({1 << 16}, DType::f32, s);
    ember::ops::scale(s, out.view(), t.view(), 0.5f);
  }));
  const auto stats = allocator->stats();
  EXPECT_EQ(stats.graph_pools, pools_before + 1);
  EXPECT_GE(stats.graph_pool_reserved, int64_t{2} << 18);
  Tensor eager = Tensor::empty({1 << 16}, DType::f32, s);
  EXPECT_NE(eager.data(), freed_address);  // still the graph's
  // Releasing cached memory (what an out-of-memory retry does) leaves the pool alone.
  allocator->release_unused();
  EXPECT_EQ(allocator->stats().graph_pool_reserved, stats.graph_pool_reserved);
  graph->replay(s);
  EXPECT_EQ(out.to_vector<float>(), std::vector<float>(1 << 16, 3.0f));
  // Memory of another stream recorded onto the capturing one and freed during the capture is
  // kept too.
  {
    Stream other(kGpu);
    Tensor recorded = Tensor::full({1 << 14}, 2.0, DType::f32, other);
    s.wait(other);
    recorded.record_stream(s);
    void* const recorded_address = recorded.data();
    Tensor doubled;
    Graph reads = Graph::capture(s, [&] {
      doubled = Tensor::empty({1 << 14}, DType::f32, s);
      ember::ops::scale(s, doubled.view(), recorded.view(), 2.0f);
      recorded = Tensor();
    });
    other.synchronize();
    Tensor taker = Tensor::empty({1 << 14}, DType::f32, other);
    EXPECT_NE(taker.data(), recorded_address);
    reads.replay(s);
    EXPECT_EQ(doubled.to_vector<float>(), std::vector<float>(1 << 14, 4.0f));
  }  // its graph (and pool) goes
  // A second graph sharing the pool (never run at the same time) takes the same memory.
  Graph second = Graph::capture(s, [&] { Tensor t = Tensor::full({1 << 16}, 1.0, DType::f32, s); },
                                {.pool = graph->pool()});
  EXPECT_EQ(second.pool(), graph->pool());
  EXPECT_EQ(allocator->stats().graph_pools, pools_before + 1);
  graph.reset();
  EXPECT_EQ(allocator->stats().graph_pools, pools_before + 1);  // the second graph holds it
  second = Graph::capture(s, [] {});
  EXPECT_EQ(allocator->stats().graph_pools, pools_before);  // released with its last graph
  ember::memory::detail::verify_invariants(*allocator);
  expect_error([&] { Graph::capture(s, [] {}, {.pool = 987654}); },
               {"Graph::capture: pool 987654 belongs to no live graph on cuda:0"});
}

// What a graph cannot hold: ember refuses it by name; CUDA's own refusals abandon the capture.
// Either way the stream is usable afterwards and nothing of the capture is kept.
TEST(EmulatedGraph, WhatAGraphCannotHoldIsAnErrorNamingIt) {
  Stream s(kGpu);
  Tensor x = Tensor::full({16}, 1.0, DType::f32, s);
  const Tensor host = Tensor::full({16}, 1.0, DType::f32, Device::cpu());
  for (const auto& [what, call] : std::vector<std::pair<std::string, std::function<void()>>>{
           {"Stream::synchronize", [&] { s.synchronize(); }},
           {"a copy to the host (item, to_vector, to)", [&] { (void)x.slice(0, 1).item(); }},
           {"a copy from host memory (to, copy_)", [&] { x.copy_(host); }},
       }) {
    try {
      Graph::capture(s, call);
      ADD_FAILURE() << what << ": expected an ember::Error";
    } catch (const ember::Error& e) {
      EXPECT_NE(e.message().find(what + ": the stream is capturing a CUDA graph"),
                std::string::npos)
          << e.message();
    }
    EXPECT_FALSE(s.capturing()) << what;
  }
  Stream other(kGpu);
  expect_error([&] { Graph::capture(s, [&] { s.wait(other); }); },
               {"cudaErrorStreamCaptureIsolation"});
  EXPECT_FALSE(s.capturing());
  EXPECT_EQ(x.to_vector<float>(), std::vector<float>(16, 1.0f));
  expect_error([&] { Graph::capture(s, [&] { Graph::capture(s, [] {}); }); },
               {"Graph::capture: the stream is capturing already"});
  Stream cpu(Device::cpu());
  expect_error([&] { Graph::capture(cpu, [] {}); },
               {"Graph::capture: CUDA graphs capture a CUDA stream, not one of cpu"});
  // CUDA's runtime directly: a synchronize during a capture invalidates it.
  ASSERT_EQ(
      cudaStreamBeginCapture(static_cast<cudaStream_t>(s.native()), cudaStreamCaptureModeGlobal),
      cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(static_cast<cudaStream_t>(s.native())),
            cudaErrorStreamCaptureUnsupported);
  cudaStreamCaptureStatus status{};
  ASSERT_EQ(cudaStreamIsCapturing(static_cast<cudaStream_t>(s.native()), &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusInvalidated);
  cudaGraph_t g = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(static_cast<cudaStream_t>(s.native()), &g),
            cudaErrorStreamCaptureInvalidated);
  EXPECT_EQ(g, nullptr);
  cudaGetLastError();
}

// A second stream that waits on an event recorded in the capture joins it (CUDA's fork): its work
// is part of the graph, ordered after what it waited for, and the origin waits for it again (the
// join) before the capture ends. Work of a joined stream left unjoined is CUDA's unjoined error,
// and that stream leaves the capture all the same.
TEST(EmulatedGraph, AStreamThatJoinsTheCaptureAddsItsWorkToTheGraph) {
  const ember::testing::LazyStreams lazy;
  Stream s(kGpu), side(kGpu);
  Tensor x = Tensor::full({8}, 1.0, DType::f32, s);
  Tensor y = Tensor::zeros({8}, DType::f32, s);
  s.synchronize();
  Graph graph = Graph::capture(s, [&] {
    ember::ops::scale(s, x, x, 2.0f);
    side.wait(s);  // the fork
    EXPECT_TRUE(side.capturing());
    ember::ops::add(side, y, y, x);
    s.wait(side);  // the join
    ember::ops::scale(s, x, x, 3.0f);
  });
  EXPECT_FALSE(side.capturing());
  EXPECT_EQ(x.to_vector<float>(), std::vector<float>(8, 1.0f)) << "nothing runs at the capture";
  EXPECT_EQ(y.to_vector<float>(), std::vector<float>(8, 0.0f));
  graph.replay(s);  // x 2, y 2, x 6
  graph.replay(s);  // x 12, y 14, x 36
  EXPECT_EQ(x.to_vector<float>(), std::vector<float>(8, 36.0f));
  EXPECT_EQ(y.to_vector<float>(), std::vector<float>(8, 14.0f));

  expect_error(
      [&] {
        Graph::capture(s, [&] {
          side.wait(s);
          ember::ops::scale(side, y, y, 2.0f);  // never waited for by s
        });
      },
      {"cudaErrorStreamCaptureUnjoined"});
  EXPECT_FALSE(side.capturing());
  EXPECT_FALSE(s.capturing());
  ember::ops::scale(side, y, y, 0.5f);  // both streams work as before, nothing of the capture ran
  side.synchronize();
  EXPECT_EQ(y.to_vector<float>(), std::vector<float>(8, 7.0f));
  EXPECT_EQ(x.to_vector<float>(), std::vector<float>(8, 36.0f));

  // An event recorded in an ended capture forks nothing into the origin's next capture, and the
  // legacy default stream cannot join a capture.
  const auto origin = static_cast<cudaStream_t>(s.native());
  const auto other = static_cast<cudaStream_t>(side.native());
  cudaEvent_t event = nullptr;
  ASSERT_EQ(cudaEventCreate(&event), cudaSuccess);
  cudaGraph_t g = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(origin, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(event, origin), cudaSuccess);
  ASSERT_EQ(cudaStreamEndCapture(origin, &g), cudaSuccess);
  cudaGraphDestroy(g);
  ASSERT_EQ(cudaStreamBeginCapture(origin, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  EXPECT_EQ(cudaStreamWaitEvent(other, event, 0), cudaSuccess);
  cudaStreamCaptureStatus status{};
  ASSERT_EQ(cudaStreamIsCapturing(other, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusNone) << "joined a capture through a stale event";
  ASSERT_EQ(cudaEventRecord(event, origin), cudaSuccess);
  EXPECT_EQ(cudaStreamWaitEvent(nullptr, event, 0), cudaErrorStreamCaptureImplicit);
  (void)cudaGetLastError();
  EXPECT_EQ(cudaStreamEndCapture(origin, &g), cudaSuccess);
  cudaGraphDestroy(g);
  cudaEventDestroy(event);
}

// CUDA's join is a dependency of the origin: a joined stream's work counts as joined when the
// origin follows it, directly or through another stream that waited for it, not when just any
// stream of the capture waited for it.
TEST(EmulatedGraph, ACaptureEndsJoinedOnlyWhenTheOriginFollowsEveryJoinedStream) {
  const ember::testing::LazyStreams lazy;
  Stream s(kGpu), a(kGpu), b(kGpu);
  Tensor x = Tensor::full({8}, 1.0, DType::f32, s);
  Tensor y = Tensor::full({8}, 1.0, DType::f32, s);
  s.synchronize();
  // Transitive: a's work joins b, b's joins the origin.
  Graph graph = Graph::capture(s, [&] {
    a.wait(s);
    b.wait(s);
    ember::ops::scale(a, x, x, 2.0f);
    b.wait(a);
    ember::ops::add(b, y, y, x);
    s.wait(b);
  });
  graph.replay(s);
  EXPECT_EQ(x.to_vector<float>(), std::vector<float>(8, 2.0f));
  EXPECT_EQ(y.to_vector<float>(), std::vector<float>(8, 3.0f));

  // b waited for a, but nothing brings either back to the origin: unjoined (b's wait alone used to
  // count a's work as joined).
  expect_error(
      [&] {
        Graph::capture(s, [&] {
          a.wait(s);
          b.wait(s);
          ember::ops::scale(a, x, x, 2.0f);
          b.wait(a);
        });
      },
      {"cudaErrorStreamCaptureUnjoined"});
  // The origin waits for b before b waited for a: a's work is not followed.
  expect_error(
      [&] {
        Graph::capture(s, [&] {
          a.wait(s);
          b.wait(s);
          ember::ops::scale(b, y, y, 2.0f);
          s.wait(b);
          ember::ops::scale(a, x, x, 2.0f);
          b.wait(a);
        });
      },
      {"cudaErrorStreamCaptureUnjoined"});
  EXPECT_FALSE(a.capturing());
  EXPECT_FALSE(b.capturing());
  EXPECT_EQ(x.to_vector<float>(), std::vector<float>(8, 2.0f)) << "nothing of the captures ran";
}

// The residual-MLP steps of the graph tests below: a checkpointed model (6 inputs, 5 classes),
// ten micro-batches of 16 samples, and one AdamW step over two accumulated micro-batches.
std::shared_ptr<ember::nn::Module> checkpointed_residual_mlp(float dropout) {
  return ember::train::make_residual_mlp({.inputs = 6,
                                          .width = 32,
                                          .depth = 2,
                                          .outputs = 5,
                                          .dropout = dropout,
                                          .checkpoint = true,
                                          .seed = 3,
                                          .device = kGpu});
}

struct MicroBatches {
  std::vector<Tensor> x, y;
  MicroBatches(Stream& s, uint32_t seed) {
    for (uint32_t i = 0; i < 10; ++i) {
      x.push_back(Tensor::from_vector(random_values(16 * 6, seed + i), Shape{16, 6}, s));
      std::vector<int32_t> labels(16);
      for (size_t j = 0; j < labels.size(); ++j) labels[j] = static_cast<int32_t>((j + i) % 5);
      y.push_back(Tensor::from_vector(labels, Shape{16}, s));
    }
  }
};

void accumulated_step(Stream& s, ember::nn::Module& model, ember::train::AdamW& opt,
                      ember::nn::SoftmaxCrossEntropy& criterion, ember::nn::Context& ctx,
                      const Tensor* x, const Tensor* y) {
  opt.zero_grad();
  ember::train::Accumulation(2).run(ctx, [&](const ember::train::MicroBatch& mb) {
    (void)criterion.forward(ctx, model.forward(ctx, x[mb.index]), y[mb.index]);
    model.backward(ctx, criterion.backward(ctx, mb.dloss));
  });
  opt.step(s);
}

// Gradient accumulation (two micro-batches) through a checkpointed residual MLP (its blocks'
// forwards recomputed in the backward) in one graph: the eager run's parameters, bitwise. Dropout
// under capture is refused by name (its offset is a host value).
TEST(EmulatedGraph, AccumulationAndCheckpointingReplayBitwise) {
  Stream s = ember::current_stream(kGpu);
  const auto make = checkpointed_residual_mlp;
  auto eager_model = make(0.0f), graphed_model = make(0.0f);
  ember::train::AdamW eager_opt(eager_model->parameters()),
      graphed_opt(graphed_model->parameters());
  ember::nn::SoftmaxCrossEntropy eager_loss, graphed_loss;
  const MicroBatches data(s, 40);
  const std::vector<Tensor>&xs = data.x, &ys = data.y;
  auto step = [&](auto&&... args) { accumulated_step(s, args...); };
  ember::nn::Context eager_ctx{s}, graphed_ctx{s};
  for (int i = 0; i < 5; ++i) {
    step(*eager_model, eager_opt, eager_loss, eager_ctx, &xs[2 * i], &ys[2 * i]);
  }
  Tensor gx[2] = {Tensor::empty({16, 6}, DType::f32, s), Tensor::empty({16, 6}, DType::f32, s)};
  Tensor gy[2] = {Tensor::empty({16}, DType::i32, s), Tensor::empty({16}, DType::i32, s)};
  ember::train::CapturedStep captured(
      s, [&] { step(*graphed_model, graphed_opt, graphed_loss, graphed_ctx, gx, gy); },
      ember::train::CapturedStep::Options{.optimizers = {&graphed_opt}});
  for (int i = 0; i < 5; ++i) {
    for (int m = 0; m < 2; ++m) {
      gx[m].copy_(xs[2 * i + m]);
      gy[m].copy_(ys[2 * i + m]);
    }
    captured.run();
  }
  EXPECT_EQ(captured.replays(), 4);
  const auto p = graphed_model->parameters(), q = eager_model->parameters();
  for (size_t i = 0; i < p.size(); ++i) {
    EXPECT_EQ(p[i]->value.to_vector<float>(), q[i]->value.to_vector<float>()) << p[i]->name;
  }

  auto dropping = make(0.1f);
  ember::train::AdamW dropping_opt(dropping->parameters());
  ember::nn::Context ctx{s};
  step(*dropping, dropping_opt, graphed_loss, ctx, &xs[0], &ys[0]);
  expect_error(
      [&] { Graph::capture(s, [&] { step(*dropping, dropping_opt, graphed_loss, ctx, gx, gy); }); },
      {"dropout in a CUDA graph would draw the same mask at every replay",
       "Context::step_counter"});
}

// Dropout in a replayed step, with its Philox offset in device memory (Context::step_counter):
// every replay draws the masks the eager step of the same number draws (checkpointed blocks
// re-draw theirs in the backward, two micro-batches per step), so the parameters are the eager
// run's, bitwise, and differ from a run whose replays all drew the capture's masks.
TEST(EmulatedGraph, DropoutReplaysDrawEachStepsMasks) {
  Stream s = ember::current_stream(kGpu);
  const auto make = [] { return checkpointed_residual_mlp(0.25f); };
  auto eager_model = make(), graphed_model = make();
  ember::train::AdamW eager_opt(eager_model->parameters()),
      graphed_opt(graphed_model->parameters());
  ember::nn::SoftmaxCrossEntropy eager_loss, graphed_loss;
  const MicroBatches data(s, 60);
  const std::vector<Tensor>&xs = data.x, &ys = data.y;
  auto step = [&](auto&&... args) { accumulated_step(s, args...); };
  ember::nn::Context eager_ctx{s}, graphed_ctx{s};
  for (int i = 0; i < 5; ++i) {
    step(*eager_model, eager_opt, eager_loss, eager_ctx, &xs[2 * i], &ys[2 * i]);
  }
  graphed_ctx.step_counter = Tensor::zeros({1}, DType::i64, s);
  Tensor gx[2] = {Tensor::empty({16, 6}, DType::f32, s), Tensor::empty({16, 6}, DType::f32, s)};
  Tensor gy[2] = {Tensor::empty({16}, DType::i32, s), Tensor::empty({16}, DType::i32, s)};
  ember::train::CapturedStep captured(
      s, [&] { step(*graphed_model, graphed_opt, graphed_loss, graphed_ctx, gx, gy); },
      ember::train::CapturedStep::Options{.optimizers = {&graphed_opt}});
  for (int i = 0; i < 5; ++i) {
    for (int m = 0; m < 2; ++m) {
      gx[m].copy_(xs[2 * i + m]);
      gy[m].copy_(ys[2 * i + m]);
    }
    const uint64_t first = graphed_ctx.step;
    graphed_ctx.publish_step();
    captured.run();
    graphed_ctx.step = first + 2;  // a replay ran no host code
  }
  EXPECT_EQ(captured.replays(), 4);
  const auto p = graphed_model->parameters(), q = eager_model->parameters();
  for (size_t i = 0; i < p.size(); ++i) {
    EXPECT_EQ(p[i]->value.to_vector<float>(), q[i]->value.to_vector<float>()) << p[i]->name;
  }

  // Without publishing, every replay reads the capture's counter: the capture's masks again.
  auto stale_model = make();
  ember::train::AdamW stale_opt(stale_model->parameters());
  ember::nn::Context stale_ctx{s};
  stale_ctx.step_counter = Tensor::zeros({1}, DType::i64, s);
  ember::train::CapturedStep stale(
      s, [&] { step(*stale_model, stale_opt, graphed_loss, stale_ctx, gx, gy); },
      ember::train::CapturedStep::Options{.optimizers = {&stale_opt}});
  for (int i = 0; i < 5; ++i) {
    for (int m = 0; m < 2; ++m) {
      gx[m].copy_(xs[2 * i + m]);
      gy[m].copy_(ys[2 * i + m]);
    }
    if (i < 2) stale_ctx.publish_step();  // the warm-up and the capture only
    stale.run();
  }
  bool any_differs = false;
  const auto r = stale_model->parameters();
  for (size_t i = 0; i < r.size(); ++i) {
    any_differs |= r[i]->value.to_vector<float>() != q[i]->value.to_vector<float>();
  }
  EXPECT_TRUE(any_differs);

  // Misuse is an Error: a counter that is not one i64, one made on another stream, one never
  // published, a step before the base, a step published twice (a replay does not advance
  // Context::step), and publishing inside a capture.
  const Tensor x = xs[0];
  ember::nn::Context bad{s};
  bad.step_counter = Tensor::zeros({1}, DType::f32, s);
  bad.publish_step();
  expect_error([&] { (void)make()->forward(bad, x); },
               {"ops::dropout_forward", "offset counter", "must be one i64"});
  Stream other(kGpu);
  bad.step_counter = Tensor::zeros({1}, DType::i64, other);
  expect_error([&] { (void)make()->forward(bad, x); },
               {"Context::step_counter must be made on the Context's stream"});
  other.synchronize();  // the counter's fill, before its memory serves another stream
  ember::nn::Context unpublished{s};
  unpublished.step_counter = Tensor::zeros({1}, DType::i64, s);
  expect_error([&] { (void)make()->forward(unpublished, x); },
               {"Context::step_counter is set but publish_step was not called"});
  bad.step_counter = Tensor::zeros({1}, DType::i64, s);
  bad.step = 3;
  bad.step_counter_base = 4;
  expect_error([&] { (void)make()->forward(bad, x); },
               {"Context::step 3 is before step_counter_base 4"});
  expect_error([&] { bad.publish_step(); },
               {"Context::publish_step: step 3 is not after the last step published (4)"});
  bad.step = 5;
  expect_error([&] { Graph::capture(s, [&] { bad.publish_step(); }); },
               {"Context::publish_step: inside a capture"});
}

// cudaLaunchHostFunc: run in stream order (a lazy stream runs it at its synchronize, after the
// work before it), and captured as a host node that runs at every replay, not at the capture.
TEST(EmulatedGraph, HostFunctionsRunInStreamOrderAndAtEveryReplay) {
  const ember::testing::LazyStreams lazy;
  Stream s(kGpu);
  const auto native = static_cast<cudaStream_t>(s.native());
  struct Log {
    std::vector<float> seen;
    const float* value;  // host memory the stream's copy writes first
  };
  float* host = nullptr;  // pinned: a graph may copy into it (pageable memory it may not)
  ASSERT_EQ(cudaMallocHost(reinterpret_cast<void**>(&host), sizeof(float)), cudaSuccess);
  Log log{{}, host};
  auto note = [](void* user) {
    auto* l = static_cast<Log*>(user);
    l->seen.push_back(*l->value);
  };
  Tensor x = Tensor::full({1}, 7.0, DType::f32, s);
  ASSERT_EQ(cudaMemcpyAsync(host, x.data(), sizeof(float), cudaMemcpyDeviceToHost, native),
            cudaSuccess);
  ASSERT_EQ(cudaLaunchHostFunc(native, note, &log), cudaSuccess);
  EXPECT_TRUE(log.seen.empty()) << "queued, not run: the stream is lazy";
  s.synchronize();
  EXPECT_EQ(log.seen, std::vector<float>{7.0f}) << "after the copy queued before it";

  Graph graph = Graph::capture(s, [&] {
    ember::ops::scale(s, x, x, 2.0f);
    ASSERT_EQ(cudaMemcpyAsync(host, x.data(), sizeof(float), cudaMemcpyDeviceToHost, native),
              cudaSuccess);
    ASSERT_EQ(cudaLaunchHostFunc(native, note, &log), cudaSuccess);
  });
  s.synchronize();
  EXPECT_EQ(log.seen.size(), 1u) << "nothing runs at the capture";
  graph.replay(s);
  graph.replay(s);
  s.synchronize();
  EXPECT_EQ(log.seen, (std::vector<float>{7.0f, 14.0f, 28.0f}));
  EXPECT_EQ(cudaLaunchHostFunc(native, nullptr, nullptr), cudaErrorInvalidValue);
  (void)cudaGetLastError();
  cudaFreeHost(host);
}

// f16 with the GradScaler, its skipped steps replayed: two batches of the run overflow f16 (the
// first layer's outputs pass 65504, so the gradients are not finite). In a replay, as in an eager
// step, the device skips AdamW's update of that step, halves the scale, and leaves the applied
// step count where it was; the other steps grow the tracker. The parameters, the scale, the
// growth tracker and the applied steps equal the eager run's, bitwise.
TEST(EmulatedGraph, SkippedF16StepsReplayAsEagerSteps) {
  Stream s = ember::current_stream(kGpu);
  std::vector<Tensor> xs, ys;
  for (uint32_t i = 0; i < 7; ++i) {
    std::vector<float> x = random_values(32 * 6, 40 + i);
    if (i == 3 || i == 5) {
      for (float& v : x) v *= 3e4f;  // overflows f16 in the first product
    }
    xs.push_back(Tensor::from_vector(x, Shape{32, 6}, s));
    std::vector<int32_t> labels(32);
    for (size_t j = 0; j < labels.size(); ++j) labels[j] = static_cast<int32_t>((j * 3 + i) % 5);
    ys.push_back(Tensor::from_vector(labels, Shape{32}, s));
  }
  struct F16Mlp : Mlp {
    ember::amp::GradScaler scaler{kGpu, {.init_scale = 1024.0, .growth_interval = 2}};
    explicit F16Mlp(Device device) : Mlp(device) {}
    void step(Stream& stream, const Tensor& x, const Tensor& y) {
      ember::nn::Context ctx{stream, /*training=*/true, ember::nn::Precision::f16};
      optimizer->zero_grad();
      const Tensor logits = model->forward(ctx, x);
      (void)criterion.forward(ctx, logits, y);
      model->backward(ctx, criterion.backward(ctx, scaler.scale()));
      scaler.step(stream, *optimizer);
      scaler.update(stream);
    }
  };
  F16Mlp eager(kGpu), graphed(kGpu);
  graphed.optimizer->keep_lr_on_device();
  Tensor x = Tensor::empty({32, 6}, DType::f32, s), y = Tensor::empty({32}, DType::i32, s);
  ember::train::CapturedStep step(s, [&] { graphed.step(s, x, y); },
                                  {.optimizers = {graphed.optimizer.get()}});
  for (size_t i = 0; i < xs.size(); ++i) {
    eager.step(s, xs[i], ys[i]);
    x.copy_(xs[i]);
    y.copy_(ys[i]);
    step.run();
  }
  EXPECT_EQ(step.replays(), 6);  // all but the warm-up
  EXPECT_EQ(eager.scaler.skipped_steps(), 2);
  EXPECT_EQ(graphed.scaler.get_scale(), eager.scaler.get_scale());
  EXPECT_EQ(graphed.scaler.growth_tracker(), eager.scaler.growth_tracker());
  EXPECT_EQ(eager.optimizer->applied_steps(), 5);
  EXPECT_EQ(graphed.optimizer->applied_steps(), 5);
  const auto p = graphed.model->parameters(), q = eager.model->parameters();
  ASSERT_EQ(p.size(), q.size());
  for (size_t i = 0; i < p.size(); ++i) {
    EXPECT_EQ(p[i]->value.to_vector<float>(), q[i]->value.to_vector<float>()) << p[i]->name;
  }
}

// train::CapturedStep: direct runs for the warm-up, then one capture and replays; a replay
// counts as the optimizer's step (schedules follow steps()); on the CPU every run is direct; a
// host read inside the step is an Error naming it.
TEST(EmulatedGraph, CapturedStepWarmsUpCapturesAndReplays) {
  Stream s = ember::current_stream(kGpu);
  Mlp mlp(kGpu), reference(kGpu);
  const Tensor x = Tensor::from_vector(random_values(32 * 6, 5), Shape{32, 6}, s);
  std::vector<int32_t> labels(32);
  for (size_t j = 0; j < labels.size(); ++j) labels[j] = static_cast<int32_t>(j % 5);
  const Tensor y = Tensor::from_vector(labels, Shape{32}, s);
  Tensor loss;
  mlp.optimizer->keep_lr_on_device();
  ember::train::CapturedStep step(
      s, [&] { loss = mlp.step(s, x, y); },
      ember::train::CapturedStep::Options{.warmup = 2, .optimizers = {mlp.optimizer.get()}});
  for (int i = 0; i < 6; ++i) {
    mlp.optimizer->set_lr(1e-2f / static_cast<float>(i + 1));  // a schedule, between replays
    reference.optimizer->set_lr(1e-2f / static_cast<float>(i + 1));
    step.run();
    EXPECT_EQ(step.captured(), i >= 2);
    EXPECT_EQ(mlp.optimizer->steps(), i + 1);
    EXPECT_EQ(loss.item(), reference.step(s, x, y).item()) << "run " << i;
  }
  EXPECT_EQ(step.replays(), 4);
  EXPECT_TRUE(step.eager_reason().empty());
  EXPECT_EQ(step.describe(), "4 of the steps replayed one captured graph");
  EXPECT_EQ(mlp.model->parameters()[0]->value.to_vector<float>(),
            reference.model->parameters()[0]->value.to_vector<float>());
  expect_error([&] { Graph::capture(s, [&] { mlp.optimizer->set_lr(0.5f); }); },
               {"set the learning rate (schedule.apply) outside the captured step"});

  Stream cpu(Device::cpu());
  int runs = 0;
  std::string warned;
  ember::train::CapturedStep eager(cpu, [&] { ++runs; },
                                   {.warn = [&](const std::string& w) { warned = w; }});
  for (int i = 0; i < 3; ++i) eager.run();
  EXPECT_EQ(runs, 3);
  EXPECT_FALSE(eager.captured());
  EXPECT_EQ(eager.eager_reason(), "cpu has no CUDA graphs");
  EXPECT_EQ(eager.describe(), "not used, the steps ran eagerly: cpu has no CUDA graphs");
  ember::train::CapturedStep unused(s, [] {});
  unused.run();  // the warm-up only
  EXPECT_EQ(unused.describe(), "not used: every run so far was a warm-up run");
  EXPECT_NE(warned.find("runs without a CUDA graph: cpu has no CUDA graphs"), std::string::npos);

  Tensor t = Tensor::full({4}, 1.0, DType::f32, s);
  ember::train::CapturedStep reads(s, [&] { (void)t.slice(0, 1).item(); });
  reads.run();  // the warm-up runs directly
  expect_error([&] { reads.run(); }, {"a copy to the host (item, to_vector, to): the stream is "
                                      "capturing a CUDA graph"});
  EXPECT_FALSE(s.capturing());
  expect_error([&] { ember::train::CapturedStep(s, [] {}, {.warmup = 0}); },
               {"CapturedStep: warmup must be at least 1"});
}

}  // namespace
