// ops::attention_forward / attention_backward on every device (device_cases.hpp): out, the
// log-sum-exp and every gradient against a double-precision reference written here, causal and
// not, T = 1, head dims that are not a multiple of a warp (1 to 256), every float dtype; the
// first causal row is exactly its value row; huge scores stay finite and a nan stays in its row;
// the same bits run to run and at any thread count, the GPU close to the CPU; bad operands.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "ember/ops/attention.hpp"
#include "ops/device_cases.hpp"
#include "ops/ops_test_support.hpp"
#include "test_support.hpp"

namespace {

using ember::Device;
using ember::DType;
using ember::Shape;
using ember::Stream;
using ember::Tensor;
using ember::TensorView;
using ember::testing::expect_error;
using ember::testing::kFloatTypes;
using ember::testing::kNan;
using ember::testing::raw;
using ember::testing::values;
namespace ops = ember::ops;

class Attention : public ember::testing::OnDevice {};

struct Dims {
  int64_t b, t, h, d;
};

int64_t qkv_at(const Dims& s, int64_t b, int64_t t, int part, int64_t h, int64_t d) {
  return (((b * s.t + t) * 3 + part) * s.h + h) * s.d + d;
}
int64_t out_at(const Dims& s, int64_t b, int64_t t, int64_t h, int64_t d) {
  return ((b * s.t + t) * s.h + h) * s.d + d;
}

struct Reference {
  std::vector<double> out, lse, dqkv;
};

// Attention in double from the operands' (rounded) values.
Reference reference(const Dims& s, const std::vector<float>& x, const std::vector<float>& g,
                    bool causal, double scale) {
  Reference r;
  r.out.assign(static_cast<size_t>(s.b * s.t * s.h * s.d), 0.0);
  r.lse.assign(static_cast<size_t>(s.b * s.h * s.t), 0.0);
  r.dqkv.assign(x.size(), 0.0);
  for (int64_t b = 0; b < s.b; ++b) {
    for (int64_t h = 0; h < s.h; ++h) {
      // p[i][j] for the keys j each query i sees.
      std::vector<std::vector<double>> p(static_cast<size_t>(s.t));
      for (int64_t i = 0; i < s.t; ++i) {
        const int64_t keys = causal ? i + 1 : s.t;
        std::vector<double> score(static_cast<size_t>(keys));
        double m = -INFINITY;
        for (int64_t j = 0; j < keys; ++j) {
          double dot = 0.0;
          for (int64_t d = 0; d < s.d; ++d) {
            dot += double{x[qkv_at(s, b, i, 0, h, d)]} * x[qkv_at(s, b, j, 1, h, d)];
          }
          score[j] = dot * scale;
          m = std::max(m, score[j]);
        }
        double total = 0.0;
        for (int64_t j = 0; j < keys; ++j) total += std::exp(score[j] - m);
        r.lse[(b * s.h + h) * s.t + i] = m + std::log(total);
        p[i].resize(static_cast<size_t>(keys));
        for (int64_t j = 0; j < keys; ++j) {
          p[i][j] = std::exp(score[j] - m) / total;
          for (int64_t d = 0; d < s.d; ++d) {
            r.out[out_at(s, b, i, h, d)] += p[i][j] * x[qkv_at(s, b, j, 2, h, d)];
          }
        }
      }
      if (g.empty()) continue;
      for (int64_t i = 0; i < s.t; ++i) {
        const int64_t keys = static_cast<int64_t>(p[i].size());
        std::vector<double> dp(static_cast<size_t>(keys));
        double correction = 0.0;
        for (int64_t j = 0; j < keys; ++j) {
          for (int64_t d = 0; d < s.d; ++d) {
            dp[j] += double{g[out_at(s, b, i, h, d)]} * x[qkv_at(s, b, j, 2, h, d)];
          }
          correction += p[i][j] * dp[j];
        }
        for (int64_t j = 0; j < keys; ++j) {
          const double ds = p[i][j] * (dp[j] - correction);
          for (int64_t d = 0; d < s.d; ++d) {
            r.dqkv[qkv_at(s, b, i, 0, h, d)] += scale * ds * x[qkv_at(s, b, j, 1, h, d)];
            r.dqkv[qkv_at(s, b, j, 1, h, d)] += scale * ds * x[qkv_at(s, b, i, 0, h, d)];
            r.dqkv[qkv_at(s, b, j, 2, h, d)] += p[i][j] * g[out_at(s, b, i, h, d)];
          }
        }
      }
    }
  }
  return r;
}

// Random qkv in [-range, range] and dout in [-1, 1], on the CPU, for shape d; two seeds used.
struct Operands {
  Tensor qkv, dout;
};
Operands random_operands(const Dims& d, uint32_t& seed, DType dtype, float range) {
  Operands o;
  o.qkv = ember::testing::random_tensor({d.b, d.t, 3, d.h, d.d}, seed++, dtype, Device::cpu(),
                                        -range, range);
  o.dout = ember::testing::random_tensor({d.b, d.t, d.h, d.d}, seed++, dtype, Device::cpu(), -1.0f,
                                         1.0f);
  return o;
}

const std::vector<Dims> kShapes = {{1, 1, 1, 1},   {2, 7, 3, 8},   {1, 33, 2, 33},
                                   {2, 16, 1, 64}, {1, 5, 2, 100}, {1, 3, 1, 256}};

double tolerance(DType dtype) {
  return dtype == DType::f32 ? 2e-5 : dtype == DType::bf16 ? 3e-2 : 4e-3;
}

struct Results {
  Tensor out, lse, dqkv;
};

Results run_attention(Stream& s, const Tensor& qkv, const Tensor& dout,
                      const ops::AttentionOptions& options) {
  const Shape& q = qkv.shape();
  Results r{Tensor::zeros({q[0], q[1], q[3], q[4]}, qkv.dtype(), s),
            Tensor::zeros({q[0], q[3], q[1]}, DType::f32, s), Tensor::zeros(q, qkv.dtype(), s)};
  ops::attention_forward(s, r.out, r.lse, qkv, options);
  if (dout.defined()) ops::attention_backward(s, r.dqkv, dout, qkv, r.out, r.lse, options);
  return r;
}

// Whether EMBER_ATTENTION_KERNEL replaces the automatic kernel (the GPU check's sanitizer runs set
// it to simt).
bool environment_steers_automatic() {
  const char* env = std::getenv("EMBER_ATTENTION_KERNEL");
  return env != nullptr && *env != '\0' && std::string_view(env) != "automatic";
}

// Whether automatic runs cuDNN for these operands on s's device: where the forced cuDNN kernel
// runs them, forward and backward (a defined dout: the backward's check too).
bool automatic_runs_cudnn(Stream& s, const Tensor& qkv, const Tensor& dout, bool causal) {
  if (s.device().is_cpu() || !ops::cudnn_attention_unavailable().empty()) return false;
  try {
    const Shape& q = qkv.shape();
    const Tensor any_dout =
        dout.defined() ? dout : Tensor::zeros({q[0], q[1], q[3], q[4]}, qkv.dtype(), s);
    run_attention(s, qkv, any_dout, {.causal = causal, .kernel = ops::AttentionKernel::cudnn});
  } catch (const ember::Error&) {
    return false;
  }
  return true;
}

void expect_near_all(const std::vector<float>& got, const std::vector<double>& want, double tol,
                     const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * (1.0 + std::abs(want[i]))) << what << " element " << i;
  }
}

TEST_P(Attention, MatchesTheDoubleReference) {
  Stream s = stream();
  uint32_t seed = 1;
  for (const Dims& d : kShapes) {
    for (bool causal : {true, false}) {
      for (DType dtype : kFloatTypes) {
        const auto [qkv, dout] = random_operands(d, seed, dtype, 1.0f);
        const ops::AttentionOptions options{.causal = causal};
        const Results r = run_attention(s, on(qkv), on(dout), options);
        const Reference want = reference(d, values(qkv), values(dout), causal,
                                         1.0 / std::sqrt(static_cast<double>(d.d)));
        const std::string what = fmt::format("B{} T{} H{} D{} {} {}", d.b, d.t, d.h, d.d,
                                             causal ? "causal" : "full", dtype_name(dtype));
        expect_near_all(values(r.out), want.out, tolerance(dtype), what + " out");
        expect_near_all(values(r.lse), want.lse, 1e-5, what + " lse");
        expect_near_all(values(r.dqkv), want.dqkv, 2 * tolerance(dtype), what + " dqkv");
      }
    }
  }
}

// The CUDA tensor-core kernels (f16/bf16; the forward at head dims 32, 64, 128, the backward at
// 32 and 64; 64 query rows and 64 keys per step) against the double reference and against the
// SIMT kernels: sequences that end inside a block of rows and of keys, one position, causal and
// full. They round the probabilities (and dS) to the operands' type, so they agree with the
// SIMT kernels within that rounding.
// The CPU ignores the kernel option: it gives the same bits whatever the option says.
TEST_P(Attention, TheTensorCoreKernelsMatchTheReferenceAndTheSimtKernels) {
  Stream s = stream();
  uint32_t seed = 40;
  for (const Dims& d :
       {Dims{2, 70, 3, 32}, Dims{1, 130, 2, 64}, Dims{1, 65, 1, 128}, Dims{1, 1, 2, 64}}) {
    for (bool causal : {true, false}) {
      for (DType dtype : {DType::bf16, DType::f16}) {
        const auto [qkv, dout] = random_operands(d, seed, dtype, 2.0f);
        const std::string what = fmt::format("B{} T{} H{} D{} {} {}", d.b, d.t, d.h, d.d,
                                             causal ? "causal" : "full", dtype_name(dtype));
        const Results tc = run_attention(
            s, on(qkv), on(dout), {.causal = causal, .kernel = ops::AttentionKernel::tensor_core});
        const Results simt = run_attention(
            s, on(qkv), on(dout), {.causal = causal, .kernel = ops::AttentionKernel::simt});
        const Results automatic = run_attention(s, on(qkv), on(dout), {.causal = causal});
        const Reference want = reference(d, values(qkv), values(dout), causal,
                                         1.0 / std::sqrt(static_cast<double>(d.d)));
        expect_near_all(values(tc.out), want.out, tolerance(dtype), what + " out");
        expect_near_all(values(tc.lse), want.lse, 1e-5, what + " lse");
        expect_near_all(values(tc.dqkv), want.dqkv, 2 * tolerance(dtype), what + " dqkv");
        const std::vector<float> o = values(simt.out), l = values(simt.lse);
        expect_near_all(values(tc.out), std::vector<double>(o.begin(), o.end()), tolerance(dtype),
                        what + " out against the SIMT kernel");
        expect_near_all(values(tc.lse), std::vector<double>(l.begin(), l.end()), 1e-5,
                        what + " lse against the SIMT kernel");
        const std::vector<float> g = values(simt.dqkv);
        expect_near_all(values(tc.dqkv), std::vector<double>(g.begin(), g.end()),
                        2 * tolerance(dtype), what + " dqkv against the SIMT kernels");
        // automatic takes cuDNN where it runs the case (a GPU with libcudnn), else tensor cores;
        // EMBER_ATTENTION_KERNEL replaces it (the GPU check's sanitizer runs set it to simt).
        const bool env_steers = environment_steers_automatic();
        const bool automatic_is_cudnn =
            !env_steers && automatic_runs_cudnn(s, on(qkv), on(dout), causal);
        if (!automatic_is_cudnn && !env_steers) {
          EXPECT_EQ(raw(automatic.dqkv), raw(tc.dqkv)) << what;
        }
        if (!device().is_cpu() && d.t > 1) {  // the tensor cores ran: their rounding shows
          EXPECT_NE(raw(tc.out), raw(simt.out)) << what;
          if (d.d <= 64) {
            EXPECT_NE(raw(tc.dqkv), raw(simt.dqkv)) << what;
          }
        }
        if (env_steers) {
          // nothing to compare automatic with
        } else if (automatic_is_cudnn) {
          const Results cudnn = run_attention(
              s, on(qkv), on(dout), {.causal = causal, .kernel = ops::AttentionKernel::cudnn});
          EXPECT_EQ(raw(automatic.out), raw(cudnn.out)) << what << ": automatic takes cuDNN";
          EXPECT_EQ(raw(automatic.lse), raw(cudnn.lse)) << what;
          EXPECT_EQ(raw(automatic.dqkv), raw(cudnn.dqkv)) << what;
        } else {
          EXPECT_EQ(raw(automatic.out), raw(tc.out)) << what << ": automatic takes tensor cores";
          EXPECT_EQ(raw(automatic.lse), raw(tc.lse)) << what;
        }
        if (device().is_cpu()) {
          EXPECT_EQ(raw(simt.out), raw(tc.out)) << what;
        }
      }
    }
  }
}

// Long 16-bit sequences on the CPU take oneDNN's 16-bit products (where the CPU has native
// kernels for the dtype: bf16 with AVX512-BF16 or AMX; f16 only with oneDNN's f16 kernels,
// else the f32 arithmetic) with the probabilities rounded to the operands' type: still close
// to the reference. T = 1030 ends inside a block; two batch entries; the GPU kernels are the
// ones tested above.
TEST_P(Attention, LongSixteenBitSequencesOnTheCpuMatchTheReference) {
  if (!device().is_cpu()) GTEST_SKIP() << "the CPU's path for T >= 1024; quadratic in the emulator";
  Stream s = stream();
  uint32_t seed = 60;
  const Dims d{2, 1030, 2, 16};
  for (bool causal : {true, false}) {
    for (DType dtype : {DType::bf16, DType::f16}) {
      const auto [qkv, dout] = random_operands(d, seed, dtype, 2.0f);
      const Results r = run_attention(s, qkv, dout, {.causal = causal});
      const Reference want = reference(d, values(qkv), values(dout), causal, 0.25);
      const std::string what =
          fmt::format("T{} {} {}", d.t, causal ? "causal" : "full", dtype_name(dtype));
      expect_near_all(values(r.out), want.out, tolerance(dtype), what + " out");
      expect_near_all(values(r.lse), want.lse, 1e-5, what + " lse");
      expect_near_all(values(r.dqkv), want.dqkv, 2 * tolerance(dtype), what + " dqkv");
      Results again;
      ember::testing::with_threads(
          1, [&] { again = run_attention(s, qkv, dout, {.causal = causal}); });
      EXPECT_EQ(raw(r.out), raw(again.out)) << what << ": the same bits on one thread";
      EXPECT_EQ(raw(r.dqkv), raw(again.dqkv)) << what;
    }
  }
}

// A nan value at position 66 (the second block of 64): every row that sees it is nan; the rows of
// the first block never read it, on any kernel (the SIMT kernels also keep rows 64 and 65
// clean; the CPU's blocks and the tensor cores may not).
TEST_P(Attention, ANanValueReachesNoEarlierBlock) {
  Stream s = stream();
  const Dims d{1, 70, 1, 32};
  for (DType dtype : {DType::f32, DType::bf16}) {
    std::vector<float> x = ember::testing::random_floats(70 * 3 * 32, 70, -1.0f, 1.0f);
    x[qkv_at(d, 0, 66, 2, 0, 3)] = kNan;
    const Tensor qkv = Tensor::from_vector(x, Shape{1, 70, 3, 1, 32}).to(dtype);
    // cuDNN (automatic's choice on a GPU for bf16) multiplies whole key tiles of 128: its masked
    // zero probabilities times the NaN value reach every row of the tile (the first H100 run).
    const bool cudnn = dtype != DType::f32 && !environment_steers_automatic() &&
                       automatic_runs_cudnn(s, on(qkv), Tensor(), true);
    for (auto kernel : {ops::AttentionKernel::automatic, ops::AttentionKernel::simt}) {
      const std::vector<float> out =
          values(run_attention(s, on(qkv), Tensor(), {.kernel = kernel}).out);
      for (int64_t t = 0; t < 70; ++t) {
        bool nan = false;
        for (int64_t e = 0; e < 32; ++e) nan = nan || std::isnan(out[out_at(d, 0, t, 0, e)]);
        if (t >= 66) {
          EXPECT_TRUE(nan) << dtype_name(dtype) << " row " << t;
        }
        if (t < 64 && !(cudnn && kernel == ops::AttentionKernel::automatic)) {
          EXPECT_FALSE(nan) << dtype_name(dtype) << " row " << t;
        }
        if (t < 66 && kernel == ops::AttentionKernel::simt && !device().is_cpu()) {
          EXPECT_FALSE(nan) << dtype_name(dtype) << " row " << t << ": the SIMT kernel";
        }
      }
    }
  }
}

TEST_P(Attention, TheTensorCoreKernelRefusesWhatItCannotRun) {
  if (device().is_cpu()) GTEST_SKIP() << "the CPU ignores the kernel option";
  Stream s = stream();
  const ops::AttentionOptions forced{.kernel = ops::AttentionKernel::tensor_core};
  Tensor out = on(Tensor::zeros({1, 4, 2, 32}));
  Tensor lse = on(Tensor::zeros({1, 2, 4}));
  expect_error(
      [&] {
        ops::attention_forward(s, out, lse, on(Tensor::zeros({1, 4, 3, 2, 32})), forced);
      },
      {"ops::attention_forward",
       "the tensor-core kernel takes f16 or bf16 qkv with a head dim of "
       "32, 64 or 128, 16-byte aligned",
       "f32[1, 4, 3, 2, 32]"});
  Tensor out48 = on(Tensor::zeros({1, 4, 2, 48}, DType::bf16));
  expect_error(
      [&] {
        ops::attention_forward(s, out48, lse, on(Tensor::zeros({1, 4, 3, 2, 48}, DType::bf16)),
                               forced);
      },
      {"ops::attention_forward", "bf16[1, 4, 3, 2, 48]"});
  // qkv 2 bytes past an aligned address.
  const Tensor storage = on(Tensor::zeros({1 * 4 * 3 * 2 * 32 + 8}, DType::bf16));
  const TensorView shifted{static_cast<char*>(storage.data()) + 2, DType::bf16,
                           Shape{1, 4, 3, 2, 32}, storage.device()};
  Tensor out32 = on(Tensor::zeros({1, 4, 2, 32}, DType::bf16));
  expect_error([&] { ops::attention_forward(s, out32, lse, shifted, forced); },
               {"ops::attention_forward", "16-byte aligned"});
  // Empty tensors are no exception.
  Tensor empty_out = on(Tensor::zeros({1, 0, 2, 32}));
  Tensor empty_lse = on(Tensor::zeros({1, 2, 0}));
  expect_error(
      [&] {
        ops::attention_forward(s, empty_out, empty_lse, on(Tensor::zeros({1, 0, 3, 2, 32})),
                               forced);
      },
      {"ops::attention_forward", "the tensor-core kernel takes"});
  // Automatic takes the SIMT kernel there, with the same result as forcing it.
  Tensor simt_out = on(Tensor::zeros({1, 4, 2, 32}, DType::bf16));
  ops::attention_forward(s, out32, lse, shifted);
  ops::attention_forward(s, simt_out, lse, shifted, {.kernel = ops::AttentionKernel::simt});
  EXPECT_EQ(raw(out32), raw(simt_out));
}

// AttentionKernel::cudnn: on a GPU with cuDNN, cuDNN's fused attention against the double
// reference (sequences that end inside cuDNN's tiles, causal and full, both 16-bit types), its
// backward the same bits on every run (deterministic, so a checkpoint's recomputed backward is
// plain training's), and an Error for what it does not take. Where cuDNN is unavailable (this
// machine's emulated build, a GPU without libcudnn) a forced call is an Error saying why.
TEST_P(Attention, TheCudnnKernelMatchesTheReferenceOrSaysWhyNot) {
  if (device().is_cpu()) GTEST_SKIP() << "the CPU ignores the kernel option";
  Stream s = stream();
  const ops::AttentionOptions forced{.kernel = ops::AttentionKernel::cudnn};
  const std::string missing = ops::cudnn_attention_unavailable();
  if (!missing.empty()) {
    Tensor out = on(Tensor::zeros({1, 4, 2, 64}, DType::bf16));
    Tensor lse = on(Tensor::zeros({1, 2, 4}));
    expect_error(
        [&] {
          ops::attention_forward(s, out, lse, on(Tensor::zeros({1, 4, 3, 2, 64}, DType::bf16)),
                                 forced);
        },
        {"ops::attention_forward", "AttentionKernel::cudnn", missing});
    GTEST_SKIP() << "cuDNN attention is unavailable: " << missing;
  }
  uint32_t seed = 90;
  for (const Dims& d : {Dims{2, 100, 3, 64}, Dims{1, 256, 2, 128}, Dims{1, 1, 2, 64}}) {
    for (bool causal : {true, false}) {
      for (DType dtype : {DType::bf16, DType::f16}) {
        const auto [qkv, dout] = random_operands(d, seed, dtype, 2.0f);
        const std::string what = fmt::format("cudnn B{} T{} H{} D{} {} {}", d.b, d.t, d.h, d.d,
                                             causal ? "causal" : "full", dtype_name(dtype));
        const ops::AttentionOptions options{.causal = causal, .kernel = forced.kernel};
        if (d.t == 1) {  // cuDNN's own tests never run a one-position backward: it may refuse it
          try {
            run_attention(s, on(qkv), on(dout), options);
          } catch (const ember::Error& e) {
            if (std::string(e.what()).find("does not run this case") == std::string::npos) throw;
            continue;
          }
        }
        const Results first = run_attention(s, on(qkv), on(dout), options);
        const Results again = run_attention(s, on(qkv), on(dout), options);
        const Reference want = reference(d, values(qkv), values(dout), causal,
                                         1.0 / std::sqrt(static_cast<double>(d.d)));
        expect_near_all(values(first.out), want.out, tolerance(dtype), what + " out");
        expect_near_all(values(first.lse), want.lse, 1e-4, what + " lse");
        expect_near_all(values(first.dqkv), want.dqkv, 2 * tolerance(dtype), what + " dqkv");
        EXPECT_EQ(raw(first.out), raw(again.out)) << what;
        EXPECT_EQ(raw(first.dqkv), raw(again.dqkv)) << what << ": a deterministic backward";
      }
    }
  }
  Tensor out = on(Tensor::zeros({1, 4, 2, 64}));
  Tensor lse = on(Tensor::zeros({1, 2, 4}));
  expect_error(
      [&] {
        ops::attention_forward(s, out, lse, on(Tensor::zeros({1, 4, 3, 2, 64})), forced);
      },
      {"ops::attention_forward", "AttentionKernel::cudnn", "f16 or bf16, not f32"});
}

// EMBER_ATTENTION_KERNEL replaces automatic (not a forced kernel); a bad value is an Error.
TEST_P(Attention, TheEnvironmentChoosesTheAutomaticKernel) {
  if (device().is_cpu()) GTEST_SKIP() << "the CPU ignores the kernel option";
  Stream s = stream();
  uint32_t seed = 120;
  const auto [qkv, dout] = random_operands(Dims{1, 70, 2, 64}, seed, DType::bf16, 2.0f);
  const Results simt = run_attention(s, on(qkv), on(dout), {.kernel = ops::AttentionKernel::simt});
  const Results tc =
      run_attention(s, on(qkv), on(dout), {.kernel = ops::AttentionKernel::tensor_core});
  ASSERT_NE(raw(simt.out), raw(tc.out));
  setenv("EMBER_ATTENTION_KERNEL", "simt", 1);
  const Results automatic = run_attention(s, on(qkv), on(dout), {});
  const Results forced =
      run_attention(s, on(qkv), on(dout), {.kernel = ops::AttentionKernel::tensor_core});
  setenv("EMBER_ATTENTION_KERNEL", "fastest", 1);
  expect_error([&] { run_attention(s, on(qkv), on(dout), {}); },
               {"EMBER_ATTENTION_KERNEL must be automatic, simt, tensor_core or cudnn, not "
                "'fastest'"});
  unsetenv("EMBER_ATTENTION_KERNEL");
  EXPECT_EQ(raw(automatic.out), raw(simt.out));
  EXPECT_EQ(raw(automatic.dqkv), raw(simt.dqkv));
  EXPECT_EQ(raw(forced.out), raw(tc.out));
}

TEST_P(Attention, AGivenScaleIsUsed) {
  Stream s = stream();
  const Dims d{1, 6, 2, 16};
  const Tensor qkv = ember::testing::random_tensor({1, 6, 3, 2, 16}, 5, DType::f32, Device::cpu());
  const Tensor dout = ember::testing::random_tensor({1, 6, 2, 16}, 6, DType::f32, Device::cpu());
  const Results r = run_attention(s, on(qkv), on(dout), {.causal = true, .scale = 0.7f});
  const Reference want = reference(d, values(qkv), values(dout), true, double{0.7f});
  expect_near_all(values(r.out), want.out, 2e-5, "out");
  expect_near_all(values(r.dqkv), want.dqkv, 4e-5, "dqkv");
}

TEST_P(Attention, TheFirstCausalRowIsItsValueRow) {
  Stream s = stream();
  for (DType dtype : kFloatTypes) {
    const Tensor qkv = ember::testing::random_tensor({2, 4, 3, 3, 40}, 8, dtype, Device::cpu());
    const Results r = run_attention(s, on(qkv), Tensor(), {});
    const std::vector<float> x = values(qkv), out = values(r.out);
    const Dims d{2, 4, 3, 40};
    for (int64_t b = 0; b < 2; ++b) {
      for (int64_t h = 0; h < 3; ++h) {
        for (int64_t e = 0; e < 40; ++e) {
          ASSERT_EQ(out[out_at(d, b, 0, h, e)], x[qkv_at(d, b, 0, 2, h, e)]) << b << h << e;
        }
      }
    }
  }
}

TEST_P(Attention, HugeScoresStayFiniteAndANanStaysInItsRow) {
  Stream s = stream();
  const Dims d{1, 5, 1, 4};
  std::vector<float> x = ember::testing::random_floats(5 * 3 * 4, 11, -1.0f, 1.0f);
  for (float& v : x) v *= 1e4f;  // scores ~1e8
  Tensor qkv = Tensor::from_vector(x, Shape{1, 5, 3, 1, 4});
  Results r = run_attention(s, on(qkv), Tensor(), {});
  for (float v : values(r.out)) EXPECT_TRUE(std::isfinite(v));
  x = ember::testing::random_floats(5 * 3 * 4, 12, -1.0f, 1.0f);
  x[qkv_at(d, 0, 2, 0, 0, 1)] = kNan;  // query 2
  qkv = Tensor::from_vector(x, Shape{1, 5, 3, 1, 4});
  r = run_attention(s, on(qkv), Tensor(), {});
  const std::vector<float> out = values(r.out);
  for (int64_t t = 0; t < 5; ++t) {
    for (int64_t e = 0; e < 4; ++e) {
      EXPECT_EQ(std::isnan(out[out_at(d, 0, t, 0, e)]), t == 2) << t << " " << e;
    }
  }
}

TEST_P(Attention, SameBitsEveryRunAndCloseToTheCpu) {
  Stream s = stream();
  for (DType dtype : {DType::f32, DType::bf16}) {
    const Tensor qkv = ember::testing::random_tensor({2, 19, 3, 2, 72}, 21, dtype, Device::cpu());
    const Tensor dout = ember::testing::random_tensor({2, 19, 2, 72}, 22, dtype, Device::cpu());
    const Results first = run_attention(s, on(qkv), on(dout), {});
    const Results again = run_attention(s, on(qkv), on(dout), {});
    EXPECT_EQ(raw(first.out), raw(again.out));
    EXPECT_EQ(raw(first.lse), raw(again.lse));
    EXPECT_EQ(raw(first.dqkv), raw(again.dqkv));
    if (!device().is_cpu()) {  // the GPU's online softmax against the CPU's GEMMs
      Stream cpu;
      const Results host = run_attention(cpu, qkv, dout, {});
      const std::vector<float> o = values(host.out), l = values(host.lse), d = values(host.dqkv);
      expect_near_all(values(first.out), std::vector<double>(o.begin(), o.end()), tolerance(dtype),
                      "out");
      expect_near_all(values(first.lse), std::vector<double>(l.begin(), l.end()), 1e-5, "lse");
      expect_near_all(values(first.dqkv), std::vector<double>(d.begin(), d.end()),
                      2 * tolerance(dtype), "dqkv");
    }
  }
}

// The same bits at any thread count on the CPU (each head is one single-threaded GEMM chain).
TEST_P(Attention, SameBitsAtAnyThreadCount) {
  if (!device().is_cpu()) GTEST_SKIP() << "OpenMP threads: the CPU's";
  Stream s = stream();
  const Tensor qkv = ember::testing::random_tensor({3, 17, 3, 3, 40}, 23, DType::f32);
  const Tensor dout = ember::testing::random_tensor({3, 17, 3, 40}, 24, DType::f32);
  Results one;
  ember::testing::with_threads(1, [&] { one = run_attention(s, qkv, dout, {}); });
  for (int threads : {2, 3, 4}) {
    Results many;
    ember::testing::with_threads(threads, [&] { many = run_attention(s, qkv, dout, {}); });
    EXPECT_EQ(raw(one.out), raw(many.out)) << threads;
    EXPECT_EQ(raw(one.dqkv), raw(many.dqkv)) << threads;
  }
}

TEST_P(Attention, EmptyBatchesAndSequences) {
  Stream s = stream();
  for (const Shape& shape : {Shape{0, 4, 3, 2, 8}, Shape{2, 0, 3, 2, 8}, Shape{2, 4, 3, 0, 8}}) {
    const Tensor qkv = on(Tensor::zeros(shape));
    const Tensor dout = on(Tensor::zeros({shape[0], shape[1], shape[3], shape[4]}));
    const Results r = run_attention(s, qkv, dout, {});
    EXPECT_EQ(r.out.numel(), 0);
  }
}

TEST_P(Attention, BadOperandsThrow) {
  Stream s = stream();
  const Tensor qkv = on(Tensor::zeros({2, 4, 3, 2, 8}));
  Tensor out = on(Tensor::zeros({2, 4, 2, 8}));
  Tensor lse = on(Tensor::zeros({2, 2, 4}));
  expect_error(
      [&] {
        ops::attention_forward(s, out, lse, on(Tensor::zeros({2, 4, 2, 2, 8})));
      },
      {"ops::attention_forward", "qkv must be [batch, seq, 3, heads, head_dim]",
       "f32[2, 4, 2, 2, 8]"});
  expect_error(
      [&] {
        ops::attention_forward(s, out, lse, on(Tensor::zeros({2, 4, 3, 2, 8}, DType::i32)));
      },
      {"ops::attention_forward", "qkv must be f32, f16 or bf16"});
  Tensor wide_out = on(Tensor::zeros({1, 1, 1, 300}));
  Tensor wide_lse = on(Tensor::zeros({1, 1, 1}));
  expect_error(
      [&] {
        ops::attention_forward(s, wide_out, wide_lse, on(Tensor::zeros({1, 1, 3, 1, 300})));
      },
      {"ops::attention_forward", "head dim must be in [1, 256], not 300"});
  Tensor bf16_out = on(Tensor::zeros({2, 4, 2, 8}, DType::bf16));
  expect_error([&] { ops::attention_forward(s, bf16_out, lse, qkv); },
               {"ops::attention_forward", "out must be f32 [2, 4, 2, 8]", "bf16[2, 4, 2, 8]"});
  Tensor bad_lse = on(Tensor::zeros({2, 4, 2}));
  expect_error([&] { ops::attention_forward(s, out, bad_lse, qkv); },
               {"ops::attention_forward", "lse must be f32 [2, 2, 4]", "f32[2, 4, 2]"});
  expect_error([&] { ops::attention_forward(s, out, lse, qkv, {.scale = kNan}); },
               {"ops::attention_forward", "scale must be finite"});
  const TensorView out_over_qkv{qkv.data(), DType::f32, Shape{2, 4, 2, 8}, qkv.device()};
  expect_error([&] { ops::attention_forward(s, out_over_qkv, lse, qkv); },
               {"ops::attention_forward: out (f32[2, 4, 2, 8]", "shares memory with qkv ("});
  // The shared checks name the operand: a missing lse is lse, not "an operand f32[]".
  expect_error([&] { ops::attention_forward(s, out, TensorView{}, qkv); },
               "ops::attention_forward: lse (f32[]");
  Tensor dqkv = on(Tensor::zeros({2, 4, 3, 2, 8}, DType::f16));
  expect_error([&] { ops::attention_backward(s, dqkv, out, qkv, out, lse); },
               {"ops::attention_backward", "dqkv must match qkv"});
  Tensor good_dqkv = on(Tensor::zeros({2, 4, 3, 2, 8}));
  expect_error(
      [&] {
        ops::attention_backward(s, good_dqkv, on(Tensor::zeros({2, 4, 2, 7})), qkv, out, lse);
      },
      {"ops::attention_backward", "dout must match out"});
  const TensorView dqkv_over_qkv{qkv.data(), DType::f32, qkv.shape(), qkv.device()};
  expect_error([&] { ops::attention_backward(s, dqkv_over_qkv, out, qkv, out, lse); },
               {"ops::attention_backward: dqkv (", "shares memory with qkv ("});
}

// Decoding (ops::attention_decode): the qkv of T positions in a cache of larger capacity whose
// unused rows are nan; the last Tq rows' outputs match the double reference of the whole
// sequence, and nothing past `length` is read.
TEST_P(Attention, DecodeFromACacheMatchesTheReference) {
  Stream s = stream();
  uint32_t seed = 200;
  for (const Dims& d :
       std::vector<Dims>{{1, 1, 1, 1}, {2, 7, 3, 8}, {1, 33, 2, 40}, {2, 9, 2, 64}}) {
    for (bool causal : {true, false}) {
      for (DType dtype : kFloatTypes) {
        const int64_t capacity = d.t + 5;
        const Tensor qkv = ember::testing::random_tensor({d.b, d.t, 3, d.h, d.d}, seed++, dtype,
                                                         Device::cpu(), -1.0f, 1.0f);
        const std::vector<float> x = values(qkv);
        std::vector<float> cache(static_cast<size_t>(d.b * capacity * 3 * d.h * d.d), kNan);
        const size_t row = static_cast<size_t>(3 * d.h * d.d);
        for (int64_t b = 0; b < d.b; ++b) {
          std::copy(x.begin() + b * d.t * row, x.begin() + (b + 1) * d.t * row,
                    cache.begin() + b * capacity * row);
        }
        const Tensor cached =
            on(Tensor::from_vector(cache, Shape{d.b, capacity, 3, d.h, d.d}).to(dtype));
        const Reference want =
            reference(d, x, std::vector<float>(static_cast<size_t>(d.b * d.t * d.h * d.d), 0.0f),
                      causal, 1.0 / std::sqrt(static_cast<double>(d.d)));
        for (int64_t tq : {int64_t{1}, d.t}) {
          Tensor out = on(Tensor::zeros({d.b, tq, d.h, d.d}, dtype));
          ops::attention_decode(s, out, cached, d.t, {.causal = causal});
          std::vector<double> rows;
          for (int64_t b = 0; b < d.b; ++b) {
            const auto* first = want.out.data() + out_at(d, b, d.t - tq, 0, 0);
            rows.insert(rows.end(), first, first + tq * d.h * d.d);
          }
          expect_near_all(values(out), rows, tolerance(dtype),
                          fmt::format("decode B{} T{} H{} D{} Tq{} {} {}", d.b, d.t, d.h, d.d, tq,
                                      causal ? "causal" : "full", dtype_name(dtype)));
        }
      }
    }
  }
}

TEST_P(Attention, DecodeOperandsAreChecked) {
  Stream s = stream();
  const Tensor cache = on(Tensor::zeros({1, 8, 3, 2, 4}));
  Tensor out = on(Tensor::zeros({1, 2, 2, 4}));
  expect_error([&] { ops::attention_decode(s, out, cache, 9); },
               "ops::attention_decode: 2 queries and a length of 9 do not fit: 1 <= queries <= "
               "length <= the cache's capacity 8");
  expect_error([&] { ops::attention_decode(s, out, cache, 1); }, "2 queries and a length of 1");
  Tensor wrong = on(Tensor::zeros({1, 2, 3, 4}));
  expect_error([&] { ops::attention_decode(s, wrong, cache, 4); },
               "out must be f32 [1, queries, 2, 4]");
  expect_error(
      [&] {
        ops::attention_decode(s, out, on(Tensor::zeros({1, 8, 2, 2, 4})), 4);
      },
      "the cache must be [batch, capacity, 3, heads, head_dim]");
}

INSTANTIATE_EMBER_DEVICES(Attention);

}  // namespace
