// AMP across streams under the emulator (found by outside testing): unscale_ and step on
// different streams, the scale read and written on other streams, working copies used on a
// second stream, long pipelines without host reads, a scaler destroyed with work pending.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "ember/amp/grad_scaler.hpp"
#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"
#include "ember/nn/linear.hpp"
#include "ember/nn/loss.hpp"
#include "ember/nn/parameter.hpp"
#include "ember/ops/elementwise.hpp"
#include "ember/simt/race_check.hpp"
#include "ember/simt/shim.hpp"
#include "ember/train/adamw.hpp"
#include "ember/train/sgd.hpp"
#include "stream_test_support.hpp"

namespace {

using ember::Device;
using ember::DType;
using ember::Stream;
using ember::Tensor;
namespace simt = ember::simt;
namespace amp = ember::amp;
namespace nn = ember::nn;
namespace train = ember::train;

using ember::testing::LazyStreams;
using ember::testing::RaceCheck;

const Device kGpu = Device::cuda(0);

// unscale_ on a stream of its own; the gradients live on the device's current stream, which is
// also where the scaler was made. The doc: "later work there sees the unscaled gradients".
TEST(AmpStreams, GradientReadOnItsStreamSeesTheUnscale) {
  const LazyStreams lazy;
  nn::Parameter a = nn::make_parameter("a", Tensor::from_vector<float>({1.0f, 2.0f}, {2}, kGpu));
  amp::GradScaler scaler(kGpu);  // last stream: the current stream
  train::SGD sgd({&a}, {.lr = 0.0f});
  a.grad.copy_(Tensor::from_vector<float>({65536.0f, 131072.0f}, {2}));
  Stream other(kGpu);
  scaler.unscale_(other, sgd);
  EXPECT_EQ(a.grad.to_vector<float>(), (std::vector<float>{1.0f, 2.0f}))
      << "a read on the gradient's stream does not see unscale_ on another stream";
}

// The same with the race checker: zero_grad (queued on the gradients' stream) after an
// unscale_ + update on another stream.
TEST(AmpStreams, ZeroGradAfterUnscaleOnAnotherStreamIsOrdered) {
  const RaceCheck check;
  nn::Parameter a = nn::make_parameter("a", Tensor::from_vector<float>({1.0f, 2.0f}, {2}, kGpu));
  amp::GradScaler scaler(kGpu);
  train::SGD sgd({&a}, {.lr = 0.0f});
  a.grad.copy_(Tensor::from_vector<float>({65536.0f, 131072.0f}, {2}));
  Stream other(kGpu);
  other.wait(a.grad.stream());
  EXPECT_NO_THROW({
    scaler.unscale_(other, sgd);
    scaler.update(other);
    sgd.zero_grad(/*fill=*/true);
  });
  other.synchronize();
}

// The scale tensor after an update on another stream: a host read of scale() on its own stream.
TEST(AmpStreams, ScaleTensorReadAfterUpdateOnAnotherStream) {
  const LazyStreams lazy;
  nn::Parameter a = nn::make_parameter("a", Tensor::from_vector<float>({1.0f}, {1}, kGpu));
  amp::GradScaler scaler(kGpu);
  train::SGD sgd({&a}, {.lr = 0.0f});
  a.grad.copy_(Tensor::from_vector<float>({INFINITY}, {1}));
  Stream other(kGpu);
  scaler.step(other, sgd);
  scaler.update(other);
  EXPECT_EQ(scaler.scale().item(), 32768.0) << "scale().item() is stale";
  EXPECT_EQ(scaler.get_scale(), 32768.0f);
}

// scale(stream, x) on a second stream reads the scale there; the next update (on the scaler's
// stream) writes it: the scaler orders its own state.
TEST(AmpStreams, ScaleOnAnotherStreamThenUpdate) {
  const RaceCheck check;
  Stream s = ember::current_stream(kGpu);
  nn::Parameter a = nn::make_parameter("a", Tensor::from_vector<float>({1.0f}, {1}, kGpu));
  amp::GradScaler scaler(kGpu);
  train::SGD sgd({&a}, {.lr = 0.0f});
  a.grad.fill_(1.0);
  const Tensor x = Tensor::full({4}, 1.0, DType::f32, s);
  Stream other(kGpu);
  other.wait(s);
  Tensor y;
  EXPECT_NO_THROW({
    y = scaler.scale(other, x);
    x.record_stream(other);
    scaler.step(s, sgd);
    scaler.update(s);
  });
  other.synchronize();
  s.synchronize();
}

// The working copy made on one stream and used by an inference forward on another; then the
// weight changes and a forward on the first stream replaces the copy. The second stream's
// result must be the old weight's.
TEST(AmpStreams, WorkingCopyUsedOnAnotherStreamIsNotReusedUnderIt) {
  const LazyStreams lazy;
  nn::Linear layer(64, 64, {.seed = 1, .device = kGpu});
  Stream a = ember::current_stream(kGpu);
  Stream b(kGpu);
  const Tensor x = Tensor::full({64, 64}, 1.0, DType::f32, a);
  layer.weight().value.fill_(0.5);
  layer.bias().value.fill_(0.0);
  nn::Context ca{a, false, nn::Precision::bf16};
  nn::Context cb{b, false, nn::Precision::bf16};
  layer.forward(ca, x);                    // the copy, on a
  b.wait(a);                               // x and the copy are ready for b
  const Tensor yb = layer.forward(cb, x);  // reuses it on b (b waits for a)
  layer.weight().value.fill_(2.0);         // new version
  const Tensor ya = layer.forward(ca, x);  // a new copy on a; the old one is let go
  EXPECT_EQ(ya.to(DType::f32).to_vector<float>(), std::vector<float>(64 * 64, 128.0f));
  EXPECT_EQ(yb.to(DType::f32).to_vector<float>(), std::vector<float>(64 * 64, 32.0f))
      << "b's forward read the working copy after it was reused";
}

TEST(AmpStreams, WorkingCopyReuseRaceCheck) {
  const RaceCheck check;
  nn::Linear layer(64, 64, {.seed = 1, .device = kGpu});
  Stream a = ember::current_stream(kGpu);
  Stream b(kGpu);
  const Tensor x = Tensor::full({64, 64}, 1.0, DType::f32, a);
  nn::Context ca{a, false, nn::Precision::bf16};
  nn::Context cb{b, false, nn::Precision::bf16};
  layer.forward(ca, x);
  b.wait(a);
  Tensor yb;
  EXPECT_NO_THROW({
    yb = layer.forward(cb, x);
    layer.weight().value.fill_(2.0);
    layer.forward(ca, x);
  });
  b.synchronize();
}

// More than 64 updates with no host read, overflows at known updates on known parameters; then
// the log must be exact.
TEST(AmpStreams, LongPipelineLogIsExact) {
  const LazyStreams lazy;
  nn::Parameter p = nn::make_parameter("p", Tensor::zeros({4}, DType::f32, kGpu));
  nn::Parameter q = nn::make_parameter("q", Tensor::zeros({3}, DType::f32, kGpu));
  amp::GradScalerOptions o;
  o.growth_interval = 5;
  o.collapse_backoffs = 0;
  amp::GradScaler scaler(kGpu, o);
  train::SGD sgd({&p, &q}, {.lr = 0.0f});
  Stream s = ember::current_stream(kGpu);
  const Tensor finite4 = Tensor::full({4}, 1.0, DType::f32, s);
  const Tensor finite3 = Tensor::full({3}, 1.0, DType::f32, s);
  const Tensor bad4 = Tensor::full({4}, INFINITY, DType::f32, s);
  const Tensor bad3 = Tensor::full({3}, NAN, DType::f32, s);
  std::vector<std::pair<int, std::vector<std::string>>> expected;
  float scale = 65536.0f;
  int tracker = 0;
  std::vector<std::pair<float, float>> scales;
  for (int i = 0; i < 200; ++i) {
    const bool bp = i % 7 == 3, bq = i % 11 == 5;
    p.grad.copy_(bp ? bad4 : finite4);
    q.grad.copy_(bq ? bad3 : finite3);
    scaler.step(s, sgd);
    scaler.update(s);
    const float before = scale;
    if (bp || bq) {
      scale *= 0.5f;
      tracker = 0;
    } else if (++tracker == 5) {
      scale *= 2.0f;
      tracker = 0;
    }
    if (bp || bq || before != scale) {
      std::vector<std::string> names;
      if (bp) names.push_back("p");
      if (bq) names.push_back("q");
      expected.push_back({i, names});
      scales.push_back({before, scale});
    }
  }
  const auto h = scaler.history();
  ASSERT_EQ(h.size(), expected.size());
  for (size_t k = 0; k < h.size(); ++k) {
    EXPECT_EQ(h[k].update, expected[k].first);
    EXPECT_EQ(h[k].nonfinite, expected[k].second) << "update " << h[k].update;
    EXPECT_EQ(h[k].scale_before, scales[k].first) << "update " << h[k].update;
    EXPECT_EQ(h[k].scale_after, scales[k].second) << "update " << h[k].update;
  }
  EXPECT_EQ(scaler.get_scale(), scale);
}

// The scaler destroyed with its updates in flight; work continues on the stream.
TEST(AmpStreams, ScalerDestroyedWithPendingWork) {
  const LazyStreams lazy;
  nn::Parameter p = nn::make_parameter("p", Tensor::zeros({4}, DType::f32, kGpu));
  train::SGD sgd({&p}, {.lr = 1.0f});
  Stream s = ember::current_stream(kGpu);
  Stream other(kGpu);
  {
    amp::GradScaler scaler(kGpu);
    for (int i = 0; i < 10; ++i) {
      p.grad.fill_(i % 3 == 0 ? INFINITY : 65536.0);
      Stream& use = i % 2 == 0 ? s : other;
      use.wait(s);
      scaler.step(use, sgd);
      scaler.update(use);
      s.wait(use);
    }
  }
  EXPECT_EQ(p.value.to_vector<float>(), std::vector<float>(4, -28.0f));
}

}  // namespace

namespace {
// unscale_ on one stream, step on another (PyTorch's unscale_ -> clip -> step split across
// streams): the step must see the unscaled gradients.
TEST(AmpStreamsOrder, UnscaleOnOneStreamStepOnAnother) {
  const LazyStreams lazy;
  nn::Parameter a = nn::make_parameter("a", Tensor::from_vector<float>({0.0f, 0.0f}, {2}, kGpu));
  amp::GradScaler scaler(kGpu);
  train::SGD sgd({&a}, {.lr = 1.0f});
  a.grad.copy_(Tensor::from_vector<float>({65536.0f, 131072.0f}, {2}));
  Stream x(kGpu), y(kGpu);
  x.wait(a.grad.stream());
  scaler.unscale_(x, sgd);
  scaler.step(y, sgd);
  scaler.update(y);
  EXPECT_EQ(a.value.to_vector<float>(), (std::vector<float>{-1.0f, -2.0f}))
      << "the step on y read the gradients before unscale_ on x";
}
// A wrong-device input.
TEST(AmpStreams, WrongDeviceInputIsAnError) {
  nn::Linear layer(4, 2, {.seed = 9, .device = kGpu});
  Stream s = ember::current_stream(kGpu);
  nn::Context ctx{s, true, nn::Precision::bf16};
  const Tensor x = Tensor::zeros({3, 4}, DType::f32, Device::cpu());
  try {
    layer.forward(ctx, x);
    ADD_FAILURE() << "cpu input accepted";
  } catch (const ember::Error&) {
  }
  layer.drop_saved();
  Stream cpu;
  nn::Context cctx{cpu, true, nn::Precision::bf16};
  try {
    layer.forward(cctx, Tensor::zeros({3, 4}));
    ADD_FAILURE() << "cpu stream with device weights accepted";
  } catch (const ember::Error&) {
  }
}

}  // namespace
