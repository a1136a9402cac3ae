// Subnormals on the CPU backend: flushed in ember's loops by default, on every thread of a team,
// kept with set_flush_denormals(false); the caller's own floating-point mode untouched; AdamW's
// and SGD's state never decays into subnormals; count_subnormals.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ember/core/denormals.hpp"
#include "ember/core/half.hpp"
#include "ember/core/tensor.hpp"
#include "ember/nn/activation.hpp"
#include "ember/nn/sequential.hpp"
#include "ember/ops/elementwise.hpp"
#include "ember/ops/matmul.hpp"
#include "ember/ops/reduce.hpp"
#include "ember/train/adamw.hpp"
#include "ember/train/sgd.hpp"

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

namespace {

using ember::DType;
using ember::Tensor;

constexpr float kSubnormal = 1e-39f;  // below 2^-126 = 1.1754944e-38

// Sets the flushing choice for a scope, and restores the default (on) after.
class FlushScope {
 public:
  explicit FlushScope(bool flush) { ember::set_flush_denormals(flush); }
  ~FlushScope() { ember::set_flush_denormals(true); }
};

// Four threads, whatever the machine has, so that a team's workers run part of every loop.
class ThreadsScope {
 public:
  ThreadsScope() { omp_set_num_threads(4); }
  ~ThreadsScope() { omp_set_num_threads(saved_); }

 private:
  int saved_ = omp_get_max_threads();
};

// EMBER_FLUSH_DENORMALS applies from the first op, also one on the program's own memory before
// any tensor exists (ctest runs this case alone with the variable set to 0:
// ops.keeping_subnormals_before_any_tensor), and otherwise flushing is on.
TEST(Denormals, TheEnvironmentAppliesBeforeAnyTensor) {
  const char* env = std::getenv("EMBER_FLUSH_DENORMALS");
  const bool keep = env != nullptr && std::string(env) == "0";
  std::vector<float> x(4, kSubnormal), y(4, 1.0f);
  const ember::TensorView xv{x.data(), DType::f32, ember::Shape{4}, ember::Device::cpu()};
  const ember::TensorView yv{y.data(), DType::f32, ember::Shape{4}, ember::Device::cpu()};
  ember::Stream stream;
  ember::ops::scale(stream, yv, xv, 1.0f);
  EXPECT_EQ(y[0], keep ? kSubnormal : 0.0f);
  EXPECT_EQ(ember::flush_denormals(), !keep);
}

#if defined(__x86_64__)
// A pointwise op over 2^17 elements (an OpenMP team): subnormal inputs read as zero and
// subnormal results are written as zero on every thread; with flushing off both are kept.
TEST(Denormals, PointwiseOpsFlushOnEveryThreadOfTheTeam) {
  const ThreadsScope threads;
  ember::Stream stream;
  const int64_t n = int64_t{1} << 17;
  const Tensor x = Tensor::full({n}, kSubnormal);  // subnormal in
  const Tensor tiny = Tensor::full({n}, 1e-20f);   // normal, squared: 1e-40, subnormal out
  Tensor y = Tensor::empty({n}), z = Tensor::empty({n});
  {
    const FlushScope flush(true);
    ember::ops::scale(stream, y, x, 1.0f);
    ember::ops::mul(stream, z, tiny, tiny);
    for (float v : y.to_vector<float>()) ASSERT_EQ(v, 0.0f);
    for (float v : z.to_vector<float>()) ASSERT_EQ(v, 0.0f);
  }
  {
    const FlushScope keep(false);
    ember::ops::scale(stream, y, x, 1.0f);
    ember::ops::mul(stream, z, tiny, tiny);
    for (float v : y.to_vector<float>()) ASSERT_EQ(v, kSubnormal);
    for (float v : z.to_vector<float>()) ASSERT_EQ(v, 1e-20f * 1e-20f);
  }
}

// The products run inside the library (oneDNN or OpenBLAS) on the team's threads: they flush too.
TEST(Denormals, MatmulFlushesInsideTheGemmEngine) {
  const ThreadsScope threads;
  ember::Stream stream;
  std::vector<ember::ops::CpuGemmEngine> engines{ember::ops::CpuGemmEngine::openblas};
  const char* onednn_off = std::getenv("EMBER_ONEDNN");
  if (EMBER_WITH_ONEDNN && (onednn_off == nullptr || std::string(onednn_off) != "0")) {
    engines.push_back(ember::ops::CpuGemmEngine::onednn);
  }
  for (auto engine : engines) {
    const ember::ops::CpuGemmEngine saved = ember::ops::cpu_gemm_engine();
    ember::ops::set_cpu_gemm_engine(engine);
    const Tensor a = Tensor::full({96, 40}, kSubnormal), b = Tensor::full({40, 96}, 1.0f);
    Tensor c = Tensor::empty({96, 96});
    {
      const FlushScope flush(true);
      ember::ops::matmul(stream, c, a, b);
      for (float v : c.to_vector<float>()) ASSERT_EQ(v, 0.0f);
    }
    {
      const FlushScope keep(false);
      ember::ops::matmul(stream, c, a, b);
      for (float v : c.to_vector<float>()) ASSERT_GT(v, 0.0f);  // 40 subnormals summed
    }
    ember::ops::set_cpu_gemm_engine(saved);
  }
}

// The calling thread's mode is its own before and after an op: ember sets and restores it.
TEST(Denormals, TheCallersModeIsRestored) {
  ember::Stream stream;
  const unsigned before = _mm_getcsr();
  ASSERT_EQ(before & 0x8040u, 0u) << "the test runner itself flushes subnormals";
  const Tensor x = Tensor::full({1000}, kSubnormal);
  Tensor y = Tensor::empty({1000});
  ember::ops::scale(stream, y, x, 2.0f);
  EXPECT_EQ(_mm_getcsr(), before);
  volatile float tiny = kSubnormal;
  EXPECT_EQ(tiny * 1.0f, kSubnormal);  // the caller still computes with subnormals
  // A caller that flushes itself keeps flushing, also when ember is told not to.
  _mm_setcsr(before | 0x8040u);
  {
    const FlushScope keep(false);
    ember::ops::scale(stream, y, x, 2.0f);
    EXPECT_EQ(y.to_vector<float>()[0], 2.0f * kSubnormal);
    EXPECT_EQ(_mm_getcsr(), before | 0x8040u);
  }
  _mm_setcsr(before);
}

// OpenMP's worker threads are created by the thread that first opens a team of that size: while
// ember's loops run, they flush, but they keep no flushing mode for the program's own OpenMP
// code afterwards (a team larger than any before makes libgomp create new threads).
TEST(Denormals, OpenMpWorkersKeepTheirModeAfterEmbersLoops) {
  const int saved = omp_get_max_threads();
  ember::Stream stream;
  for (int threads : {omp_get_num_procs() + 3, omp_get_num_procs() + 7}) {
    omp_set_num_threads(threads);
    const int64_t n = int64_t{1} << 17;
    const Tensor x = Tensor::full({n}, kSubnormal);
    Tensor y = Tensor::empty({n});
    ember::ops::scale(stream, y, x, 1.0f);          // a map: flushed on every thread
    ember::ops::sum(stream, Tensor::empty({}), x);  // a reduction
    EXPECT_EQ(y.to_vector<float>()[n - 1], 0.0f);
    const Tensor a = Tensor::full({256, 64}, 1.0f), b = Tensor::full({64, 256}, 1.0f);
    Tensor c = Tensor::empty({256, 256});
    ember::ops::matmul(stream, c, a, b);
    int flushing = 0;
#pragma omp parallel reduction(+ : flushing)
    flushing += (_mm_getcsr() & 0x8040u) != 0 ? 1 : 0;
    EXPECT_EQ(flushing, 0) << threads << " threads";
  }
  omp_set_num_threads(saved);
}
#endif

// A parameter whose gradient stays zero: its moments decay by beta each step. They never become
// subnormal, and they are the same bits whether or not the CPU flushes (the optimizers flush
// their updates' results themselves, as a GPU step does): AdamW's and SGD's whole state and the
// parameters, over 200 steps, with a subnormal gradient and a tiny one thrown in.
TEST(Denormals, OptimizerStateNeverHoldsSubnormalsAndIgnoresTheMode) {
  struct Run {
    std::vector<float> p, m, v, q, buf;
  };
  const auto run = [](bool flush) {
    const FlushScope mode(flush);
    ember::nn::Parameter p = ember::nn::make_parameter("p", Tensor::full({4}, 0.5f));
    ember::nn::Parameter q = ember::nn::make_parameter("q", Tensor::full({4}, 0.5f));
    ember::train::AdamW adamw({&p}, {.lr = 1e-3f, .beta1 = 0.5f, .beta2 = 0.5f});
    ember::train::SGD sgd({&q}, {.lr = 1e-3f, .momentum = 0.5f});
    const std::vector<float> first = {1.0f, -1.0f, kSubnormal, 1e-20f};
    p.grad.copy_(Tensor::from_vector(first, {4}));
    q.grad.copy_(Tensor::from_vector(first, {4}));
    adamw.step();
    sgd.step();
    p.grad.copy_(Tensor::zeros({4}));
    q.grad.copy_(Tensor::zeros({4}));
    // 0.5^t reaches 2^-126 at t = 126, the last subnormal at t = 149; 0.5^2t (v) earlier.
    for (int t = 0; t < 200; ++t) {
      adamw.step();
      sgd.step();
      SCOPED_TRACE(::testing::Message() << "flush " << flush << ", step " << t);
      EXPECT_EQ(ember::count_subnormals(adamw.exp_avg(0)), 0);
      EXPECT_EQ(ember::count_subnormals(adamw.exp_avg_sq(0)), 0);
      EXPECT_EQ(ember::count_subnormals(sgd.momentum_buffer(0)), 0);
      if (::testing::Test::HasFailure()) break;
    }
    return Run{p.value.to_vector<float>(), adamw.exp_avg(0).to_vector<float>(),
               adamw.exp_avg_sq(0).to_vector<float>(), q.value.to_vector<float>(),
               sgd.momentum_buffer(0).to_vector<float>()};
  };
  const Run flushed = run(true), kept = run(false);
  EXPECT_EQ(flushed.p, kept.p);
  EXPECT_EQ(flushed.m, kept.m);
  EXPECT_EQ(flushed.v, kept.v);
  EXPECT_EQ(flushed.q, kept.q);
  EXPECT_EQ(flushed.buf, kept.buf);
  // Below 2^-100 a moment is zero: after 200 halvings every one is.
  EXPECT_EQ(flushed.m, std::vector<float>(4, 0.0f));
  EXPECT_EQ(flushed.v, std::vector<float>(4, 0.0f));
  EXPECT_EQ(flushed.buf, std::vector<float>(4, 0.0f));
}

// The census: each child's output and input gradient, by path, summed over calls, then reset.
TEST(Denormals, SubnormalCensusOfModuleOutputs) {
  const FlushScope keep(false);  // ReLU passes subnormal inputs on unchanged
  ember::nn::Sequential model;
  model.emplace<ember::nn::ReLU>().emplace<ember::nn::ReLU>();
  ember::Stream stream;
  ember::nn::Context ctx{stream, /*training=*/true};
  const Tensor x = Tensor::from_vector(std::vector<float>{kSubnormal, 1.0f, -kSubnormal}, {3});
  ember::set_subnormal_census(true);
  for (int i = 0; i < 2; ++i) {
    model.forward(ctx, x);
    model.backward(ctx, Tensor::full({3}, kSubnormal));
  }
  ember::set_subnormal_census(false);
  const std::vector<ember::SubnormalCount> counts = ember::take_subnormal_census();
  ASSERT_EQ(counts.size(), 4u);
  EXPECT_EQ(counts[0].where, "0 (ReLU) output");
  EXPECT_EQ(counts[1].where, "1 (ReLU) output");
  EXPECT_EQ(counts[2].where, "1 (ReLU) input gradient");
  EXPECT_EQ(counts[3].where, "0 (ReLU) input gradient");
  // Per call: the output keeps the positive subnormal; the gradient (all subnormal) passes where
  // x > 0, at the subnormal and at 1.
  for (const auto& c : counts) {
    EXPECT_EQ(c.subnormals, c.where.ends_with("output") ? 2 : 4) << c.where;
    EXPECT_EQ(c.elements, 6) << c.where;
  }
  EXPECT_TRUE(ember::take_subnormal_census().empty());
  model.forward(ctx, x);  // census off: nothing counted
  EXPECT_TRUE(ember::take_subnormal_census().empty());
}

TEST(Denormals, CountSubnormals) {
  const std::vector<float> f32 = {kSubnormal, -kSubnormal, 0.0f,     -0.0f,
                                  1.0f,       1.2e-38f,    1.1e-38f, 1e-45f};
  EXPECT_EQ(ember::count_subnormals(Tensor::from_vector(f32, {8})), 4);
  // f16: 2^-24 (the smallest subnormal) and 6e-5 (below 2^-14) are subnormal, 1e-4 is not.
  std::vector<ember::half> f16 = {ember::half(5.9604645e-8f), ember::half(6e-5f),
                                  ember::half(1e-4f), ember::half(0.0f)};
  EXPECT_EQ(ember::count_subnormals(Tensor::from_vector(f16, {4})), 2);
  // bf16 shares f32's exponent: +-1e-39 and 1.1e-38 stay subnormal, 1e-45 rounds to zero.
  EXPECT_EQ(ember::count_subnormals(Tensor::from_vector(f32, {8}).to(DType::bf16)), 3);
  EXPECT_EQ(ember::count_subnormals(Tensor::zeros({0})), 0);
  EXPECT_EQ(ember::count_subnormals(Tensor::zeros({4}, DType::i32)), 0);
  EXPECT_EQ(ember::count_subnormals(Tensor()), 0);
}

}  // namespace
