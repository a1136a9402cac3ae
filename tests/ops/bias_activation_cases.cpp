// ops::bias_activation_forward / _backward on every test device (device_cases.hpp): bit for bit
// the unfused ops they replace on the same device (bias_add into f32, then relu/gelu forward;
// relu/gelu backward, then column_sums), and against host references: none and relu bit for
// bit, GELU within a few ulps of double math, the bias gradient within an ulp of a double sum.
// Every dtype mix, empty, tails and rows not a multiple of the 128-bit width, rank 3, misaligned
// views, nan/inf, in place, and bad arguments.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"
#include "ember/ops/activation.hpp"
#include "ember/ops/elementwise.hpp"
#include "ember/ops/reduce.hpp"
#include "ops/device_cases.hpp"
#include "ops/matmul_reference.hpp"
#include "ops/ops_test_support.hpp"
#include "test_support.hpp"

namespace ember::testing {
namespace {

using ops::Activation;

constexpr Activation kActivations[] = {Activation::none, Activation::relu, Activation::gelu};

// [0, 5] empty, [1, 1], rows of 13 (the scalar path) and of 40 (a multiple of 8: the 128-bit
// path), a wide row past the 2048-element block, several chunks and grid-stride steps (and 135k
// elements past the CPU's parallel threshold), and rank 3 (bias over the last dimension).
// {300, 70}: two chunks of rows in the CPU's column sums.
const std::vector<Shape> kShapes = {{0, 5},     {1, 1},     {7, 13},  {33, 4097},
                                    {3, 5, 17}, {2, 3, 40}, {300, 70}};

struct Mix {
  DType x, bias, y, pre;
};
constexpr Mix kMixes[] = {{DType::f32, DType::f32, DType::f32, DType::f32},
                          {DType::f16, DType::bf16, DType::f32, DType::f16},
                          {DType::bf16, DType::f32, DType::f16, DType::bf16},
                          {DType::f32, DType::f16, DType::bf16, DType::f32}};

std::string name(Activation act) {
  return act == Activation::relu ? "relu" : act == Activation::gelu ? "gelu" : "none";
}

// Random values in [-4, 4) on the host; with `specials`, nan, +-inf, -0, 0 and +-60000 every
// 37th element, so that their propagation is compared too.
Tensor random(const Shape& shape, uint32_t seed, DType dtype, bool specials = true) {
  std::vector<float> v = random_floats(shape.numel(), seed);
  const float special[] = {kNan, kInf, -kInf, -0.0f, 0.0f, 60000.0f, -60000.0f};
  for (size_t i = 0; specials && i < v.size(); i += 37) v[i] = special[(i / 37) % 7];
  return Tensor::from_vector(v, shape).to(dtype);
}

// ---- the unfused ops, on the stream's device -------------------------------------------------

// t = bias_add(x, bias) in f32, y = act(t), pre = t rounded to its dtype.
void unfused_forward(Stream& s, const Tensor& y, const Tensor& pre, const Tensor& x,
                     const Tensor& bias, Activation act) {
  const Tensor t = Tensor::zeros(x.shape(), DType::f32, s.device());
  ops::bias_add(s, t, x, bias);
  if (act == Activation::relu) ops::relu_forward(s, y, t);
  if (act == Activation::gelu) ops::gelu_forward(s, y, t);
  if (act == Activation::none) ops::cast(s, y, t);
  ops::cast(s, pre, t);
}

// dx = dy * act'(pre) as the unfused ops compute it.
void unfused_grad(Stream& s, const Tensor& dx, const Tensor& dy, const Tensor& pre,
                  Activation act) {
  if (act == Activation::relu) ops::relu_backward(s, dx, dy, pre);
  if (act == Activation::gelu) ops::gelu_backward(s, dx, dy, pre);
  if (act == Activation::none) ops::cast(s, dx, dy);
}

// A tensor of any rank as [rows, last dimension], the layout the bias gradient sums over.
TensorView as_rows(const Tensor& t) {
  const int64_t cols = t.shape()[-1];
  return t.view().reshape(Shape{cols == 0 ? 0 : t.numel() / cols, cols});
}

// got == want bit for bit, except that a nan may be any nan: ember keeps nan a nan, not its
// payload or sign (docs/ops.md). On the host (the CPU backend, and the emulator's kernels, which
// are g++ code) which nan operand an SSE/AVX multiply passes on depends on the operand order the
// compiler picks for each loop, and a real GPU gives its one canonical nan (0x7fffffff). Every
// other value, inf and -0 included, must match.
void expect_same(const Tensor& got, const Tensor& want, Activation act, const std::string& what) {
  (void)act;
  ASSERT_EQ(got.dtype(), want.dtype());
  const std::vector<float> g = values(got.to(Device::cpu())), w = values(want.to(Device::cpu()));
  ASSERT_EQ(g.size(), w.size());
  int failures = 0;
  for (size_t i = 0; i < g.size() && failures < 5; ++i) {
    if (std::isnan(g[i]) && std::isnan(w[i])) continue;
    if (std::memcmp(&g[i], &w[i], sizeof(float)) != 0) {
      ++failures;
      ADD_FAILURE() << what << " element " << i << ": " << g[i] << " vs " << w[i];
    }
  }
}

// ---- host references -------------------------------------------------------------------------

// t = x + bias[j] in f32, as the op adds (x and bias widened exactly).
std::vector<float> host_bias_add(const Tensor& x, const Tensor& bias) {
  const std::vector<float> xv = host_f32(x), bv = host_f32(bias);
  std::vector<float> t(xv.size());
  for (size_t i = 0; i < t.size(); ++i) t[i] = xv[i] + bv[i % bv.size()];
  return t;
}

// GELU and its derivative in double, with the op's values at +-inf (GELU(-inf) = -0, where the
// tanh form's -inf * 0 would be nan; the derivative 0 and 1 there).
double gelu_ref(double t) {
  return std::isinf(t) ? (t > 0 ? t : -0.0) : reference_gelu(t);
}
double gelu_derivative_ref(double t) {
  return std::isinf(t) ? (t > 0 ? 1.0 : 0.0) : reference_gelu_derivative(t);
}

// GELU results against the double reference `want`, rounded to got's dtype: in f32 within
// `max_ulps` (each exp is within 1 ulp on either device, the sigmoid and products add a few: 8
// for the value, 16 for the derivative times dy, as in the map tests) or `floor` (near the zero
// crossings cancellation makes that more ulps of a tiny result); in 16 bits one ulp of the
// dtype (a few f32 ulps may flip its rounding). inf must agree exactly, nan up to its sign.
void expect_gelu_close(const Tensor& got, const std::vector<double>& want, int64_t max_ulps,
                       float floor, const std::string& what) {
  const std::vector<float> g = host_f32(got);
  std::vector<float> wf(want.begin(), want.end());
  const std::vector<float> w = values(host_tensor(wf, got.shape(), got.dtype()));
  ASSERT_EQ(g.size(), w.size());
  const double rel = got.dtype() == DType::f16    ? std::ldexp(1.0, -10)
                     : got.dtype() == DType::bf16 ? std::ldexp(1.0, -7)
                                                  : 0.0;
  int failures = 0;
  for (size_t i = 0; i < g.size() && failures < 5; ++i) {
    bool ok;
    if (!std::isfinite(w[i])) {
      ok = std::isnan(w[i]) ? std::isnan(g[i]) : g[i] == w[i];
    } else if (got.dtype() == DType::f32) {
      ok = std::abs(g[i] - w[i]) <= floor || ulps(g[i], w[i]) <= max_ulps;
    } else {
      ok = std::abs(g[i] - w[i]) <= floor + rel * std::abs(w[i]);
    }
    if (!ok) {
      ++failures;
      ADD_FAILURE() << what << " element " << i << ": " << g[i] << " vs " << w[i] << " (" << want[i]
                    << ")";
    }
  }
}

// dbias against the column sums of dx as stored (plus start with accumulate), summed here in
// double: the op also sums in double and rounds once, only the order of the double additions
// differs, so the f32 results are at most one ulp apart (beyond an absolute floor where the sum
// cancels).
// nan and inf must agree.
void expect_column_sums(const Tensor& dbias, const Tensor& dx, const Tensor& start, bool accumulate,
                        const std::string& what) {
  const std::vector<float> got = host_f32(dbias), d = host_f32(dx), s = values(start);
  const size_t n = got.size();
  ASSERT_EQ(s.size(), n);
  std::vector<double> sum(n, 0.0), magnitude(n, 0.0);
  for (size_t j = 0; j < n; ++j) {
    if (accumulate) sum[j] = s[j], magnitude[j] = std::abs(s[j]);
  }
  for (size_t i = 0; i < d.size(); ++i) {
    sum[i % n] += d[i];
    magnitude[i % n] += std::abs(d[i]);
  }
  int failures = 0;
  for (size_t j = 0; j < n && failures < 5; ++j) {
    const float want = static_cast<float>(sum[j]);
    const bool ok = std::isnan(want)   ? std::isnan(got[j])
                    : std::isinf(want) ? got[j] == want
                                       : ulps(got[j], want) <= 1 ||
                                             std::abs(got[j] - sum[j]) <= 1e-12 * magnitude[j];
    if (!ok) {
      ++failures;
      ADD_FAILURE() << what << " column " << j << ": " << got[j] << " vs " << sum[j];
    }
  }
}

class BiasActivation : public OnDevice {};

// ---- forward ---------------------------------------------------------------------------------

TEST_P(BiasActivation, ForwardEqualsUnfusedOpsAndTheReference) {
  Stream s = stream();
  uint32_t seed = 1;
  for (const Shape& shape : kShapes) {
    for (const Mix& m : kMixes) {
      const Tensor x = random(shape, seed++, m.x), bias = random({shape[-1]}, seed++, m.bias);
      const Tensor xd = on(x), biasd = on(bias);
      const std::vector<float> t = host_bias_add(x, bias);
      for (const Activation act : kActivations) {
        const std::string what = shape.to_string() + " " + name(act);
        // With the pre-activation saved (two outputs) and without (one).
        Tensor y = on(Tensor::zeros(shape, m.y)), pre = on(Tensor::zeros(shape, m.pre));
        ops::bias_activation_forward(s, y, xd, biasd, act, pre);
        Tensor y_only = on(Tensor::zeros(shape, m.y));
        ops::bias_activation_forward(s, y_only, xd, biasd, act);
        Tensor uy = on(Tensor::zeros(shape, m.y)), upre = on(Tensor::zeros(shape, m.pre));
        unfused_forward(s, uy, upre, xd, biasd, act);
        expect_same(y, uy, act, what);
        expect_same(y_only, uy, act, what);
        expect_same(pre, upre, act, what);

        // The add is exact f32 math on every device; so are none and relu.
        expect_same(pre, host_tensor(t, shape, m.pre), act, what);
        if (act == Activation::gelu) {
          std::vector<double> want(t.size());
          for (size_t i = 0; i < t.size(); ++i) want[i] = gelu_ref(t[i]);
          expect_gelu_close(y, want, 8, 1e-7f, what);
        } else {
          std::vector<float> want = t;
          if (act == Activation::relu) {
            for (float& v : want) v = v < 0 ? 0.0f : v;  // nan and -0 kept
          }
          expect_same(y, host_tensor(want, shape, m.y), act, what);
        }
      }
    }
  }
}

TEST_P(BiasActivation, ForwardValuesByHand) {
  Stream s = stream();
  const Tensor x = on(Tensor::from_vector(std::vector<float>{-1.0f, 2.0f, 0.5f, -3.0f}, {2, 2}));
  const Tensor bias = on(Tensor::from_vector(std::vector<float>{0.5f, -1.0f}, {2}));
  Tensor y = on(Tensor::zeros({2, 2})), pre = on(Tensor::zeros({2, 2}, DType::bf16));
  ops::bias_activation_forward(s, y, x, bias, Activation::relu, pre);
  EXPECT_EQ(host_f32(pre), (std::vector<float>{-0.5f, 1.0f, 1.0f, -4.0f}));  // exact in bf16
  EXPECT_EQ(host_f32(y), (std::vector<float>{0.0f, 1.0f, 1.0f, 0.0f}));
}

// Views one element past an aligned start: on CUDA the scalar path instead of the 128-bit one
// (offset 0 takes that); the same bits either way.
TEST_P(BiasActivation, MisalignedViews) {
  Stream s = stream();
  const int64_t rows = 6, cols = 64;
  const Tensor xbuf = random({rows * cols + 1}, 50, DType::f16);
  const Tensor bias = random({cols}, 51, DType::f32);
  const Tensor xd = on(xbuf), biasd = on(bias);
  const std::vector<float> xv = values(xbuf), bv = values(bias);
  for (const int64_t offset : {0, 1}) {
    const auto view = [&](const Tensor& t) {
      return TensorView{static_cast<char*>(t.data()) + offset * dtype_size(t.dtype()), t.dtype(),
                        Shape{rows, cols}, t.device()};
    };
    Tensor ybuf = on(Tensor::zeros({rows * cols + 1}, DType::bf16));
    Tensor prebuf = on(Tensor::zeros({rows * cols + 1}, DType::f32));
    ops::bias_activation_forward(s, view(ybuf), view(xd), biasd, Activation::relu, view(prebuf));
    std::vector<float> want_pre(rows * cols + 1, 0.0f), want_y(rows * cols + 1, 0.0f);
    for (int64_t i = 0; i < rows * cols; ++i) {
      const float t = xv[offset + i] + bv[i % cols];
      want_pre[offset + i] = t;
      want_y[offset + i] = t < 0 ? 0.0f : t;
    }
    // The host's NaN payloads exactly; a GPU's canonical NaN as any NaN.
    const auto bytes = [&](const Tensor& t) { return host_math() ? raw(t) : raw_nans_alike(t); };
    EXPECT_EQ(bytes(prebuf), bytes(host_tensor(want_pre, {rows * cols + 1}, DType::f32))) << offset;
    EXPECT_EQ(bytes(ybuf), bytes(host_tensor(want_y, {rows * cols + 1}, DType::bf16))) << offset;
  }
}

TEST_P(BiasActivation, InPlaceOutputIsTheInput) {
  Stream s = stream();
  const Shape shape{9, 24};
  const Tensor bias = on(random({24}, 7, DType::f32));
  for (const Activation act : kActivations) {
    for (const DType dtype : kFloatTypes) {
      const Tensor x = on(random(shape, 8, dtype));
      Tensor want_y = on(Tensor::zeros(shape, dtype)), want_pre = on(Tensor::zeros(shape, dtype));
      ops::bias_activation_forward(s, want_y, x, bias, act, want_pre);
      // y is x.
      Tensor y = x.clone();
      ops::bias_activation_forward(s, y, y, bias, act);
      expect_same(y, want_y, act, name(act));
      // pre is x, y separate.
      Tensor pre = x.clone(), y2 = on(Tensor::zeros(shape, dtype));
      ops::bias_activation_forward(s, y2, pre, bias, act, pre);
      expect_same(y2, want_y, act, name(act));
      EXPECT_EQ(raw(pre), raw(want_pre)) << name(act);
    }
  }
}

// ---- backward --------------------------------------------------------------------------------

TEST_P(BiasActivation, BackwardEqualsUnfusedOpsAndTheReference) {
  Stream s = stream();
  uint32_t seed = 100;
  for (const Shape& shape : kShapes) {
    const int64_t n = shape[-1];
    for (const Mix& m : kMixes) {
      const Tensor dy = random(shape, seed++, m.x), pre = random(shape, seed++, m.pre);
      const Tensor dyd = on(dy), pred = on(pre);
      const std::vector<float> dyv = values(dy), prev = values(pre);
      for (const Activation act : kActivations) {
        for (const bool accumulate : {false, true}) {
          const std::string what =
              shape.to_string() + " " + name(act) + " accumulate " + std::to_string(accumulate);
          const Tensor start = Tensor::from_vector(random_floats(n, seed++), Shape{n});
          Tensor dx = on(Tensor::zeros(shape, m.y)), db = on(start.clone());
          ops::bias_activation_backward(s, dx, db, dyd, pred, act, {.accumulate = accumulate});

          Tensor udx = on(Tensor::zeros(shape, m.y)), udb = on(start.clone());
          unfused_grad(s, udx, dyd, pred, act);
          ops::column_sums(s, udb, as_rows(udx), {.accumulate = accumulate});
          expect_same(dx, udx, act, what);
          EXPECT_EQ(raw(db), raw(udb)) << what;

          if (act == Activation::gelu) {
            std::vector<double> want(dyv.size());
            for (size_t i = 0; i < want.size(); ++i) {
              want[i] = double{dyv[i]} * gelu_derivative_ref(prev[i]);
            }
            expect_gelu_close(dx, want, 16, 1e-6f, what);
          } else {
            std::vector<float> want = dyv;
            if (act == Activation::relu) {
              for (size_t i = 0; i < want.size(); ++i) want[i] = prev[i] > 0 ? dyv[i] : 0.0f;
            }
            expect_same(dx, host_tensor(want, shape, m.y), act, what);
          }
          expect_column_sums(db, dx, start, accumulate, what);
        }
      }
    }
  }
}

TEST_P(BiasActivation, BackwardWithoutBiasGradientOrPreActivation) {
  Stream s = stream();
  const Shape shape{5, 3, 11};
  const Tensor dy = on(random(shape, 200, DType::bf16)), pre = on(random(shape, 201, DType::f32));
  for (const Activation act : kActivations) {
    Tensor want = on(Tensor::zeros(shape, DType::f16)), dx = on(Tensor::zeros(shape, DType::f16));
    unfused_grad(s, want, dy, pre, act);
    ops::bias_activation_backward(s, dx, {}, dy, pre, act);
    EXPECT_EQ(raw(dx), raw(want)) << name(act);
  }
  // none needs no pre-activation: dx = dy, and dbias the column sums of dy.
  Tensor dx = on(Tensor::zeros(shape)), db = on(Tensor::zeros({11}));
  ops::bias_activation_backward(s, dx, db, dy, {}, Activation::none);
  EXPECT_EQ(raw(dx), raw(dy.to(Device::cpu()).to(DType::f32)));  // bf16 widens exactly
  Tensor want_db = on(Tensor::zeros({11}));
  ops::column_sums(s, want_db, as_rows(dx));
  EXPECT_EQ(raw(db), raw(want_db));
  expect_column_sums(db, dx, Tensor::zeros({11}), false, "none");
}

TEST_P(BiasActivation, BackwardByHandAndEmpty) {
  Stream s = stream();
  const Tensor dy = on(Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {3, 2}));
  const Tensor pre = on(Tensor::from_vector(std::vector<float>{1, -1, 0, 2, kNan, 3}, {3, 2}));
  Tensor dx = on(Tensor::zeros({3, 2})), db = on(Tensor::full({2}, 10.0));
  ops::bias_activation_backward(s, dx, db, dy, pre, Activation::relu, {.accumulate = true});
  EXPECT_EQ(host_f32(dx), (std::vector<float>{1, 0, 0, 4, 0, 6}));  // pre > 0 only (not nan, 0)
  EXPECT_EQ(host_f32(db), (std::vector<float>{11, 20}));
  // No rows: dbias is zero (or left as it was when accumulating).
  const Tensor none = on(Tensor::empty({0, 2}));
  Tensor empty_dx = on(Tensor::empty({0, 2}));
  ops::bias_activation_backward(s, empty_dx, db, none, none, Activation::gelu);
  EXPECT_EQ(host_f32(db), (std::vector<float>{0, 0}));
  db = on(Tensor::full({2}, 3.0));
  ops::bias_activation_backward(s, empty_dx, db, none, none, Activation::gelu,
                                {.accumulate = true});
  EXPECT_EQ(host_f32(db), (std::vector<float>{3, 3}));
}

// ---- errors ----------------------------------------------------------------------------------

TEST_P(BiasActivation, WrongBiasIsRejected) {
  Stream s = stream();
  const Tensor x = on(Tensor::zeros({4, 6}));
  Tensor y = on(Tensor::zeros({4, 6}));
  expect_error(
      [&] { ops::bias_activation_forward(s, y, x, on(Tensor::zeros({4})), Activation::relu); },
      {"ops::bias_activation_forward", "f32[4]", "f32[4, 6]"});
  expect_error(
      [&] {
        ops::bias_activation_forward(s, y, x, on(Tensor::zeros({1, 6})), Activation::gelu);
      },
      {"ops::bias_activation_forward", "rank 1"});
  expect_error(
      [&] {
        ops::bias_activation_forward(s, y, x, on(Tensor::zeros({6}, DType::i32)), Activation::none);
      },
      {"ops::bias_activation_forward", "i32[6]"});
  // pre of the wrong shape.
  expect_error(
      [&] {
        ops::bias_activation_forward(s, y, x, on(Tensor::zeros({6})), Activation::relu,
                                     on(Tensor::zeros({6, 4})));
      },
      {"ops::bias_activation_forward", "f32[6, 4]"});
}

TEST_P(BiasActivation, MissingPreActivationIsRejected) {
  Stream s = stream();
  const Tensor dy = on(Tensor::zeros({4, 6}));
  Tensor dx = on(Tensor::zeros({4, 6})), db = on(Tensor::zeros({6}));
  for (const Activation act : {Activation::relu, Activation::gelu}) {
    expect_error([&] { ops::bias_activation_backward(s, dx, db, dy, {}, act); },
                 {"ops::bias_activation_backward", "needs pre", "absent"});
  }
}

TEST_P(BiasActivation, WrongBiasGradientIsRejectedBeforeAnyWork) {
  Stream s = stream();
  const Tensor dy = on(Tensor::full({4, 6}, 1.0)), pre = on(Tensor::full({4, 6}, 1.0));
  Tensor dx = on(Tensor::zeros({4, 6}));
  expect_error(
      [&] {
        ops::bias_activation_backward(s, dx, on(Tensor::zeros({4})), dy, pre, Activation::relu);
      },
      {"ops::bias_activation_backward", "dbias must be [6]", "f32[4]"});
  expect_error(
      [&] {
        ops::bias_activation_backward(s, dx, on(Tensor::zeros({6}, DType::f16)), dy, pre,
                                      Activation::relu);
      },
      {"ops::bias_activation_backward", "dbias", "f16[6]"});
  EXPECT_EQ(host_f32(dx), std::vector<float>(24, 0.0f));  // untouched
}

TEST_P(BiasActivation, OverlapIsRejected) {
  Stream s = stream();
  Tensor buf = on(Tensor::zeros({5, 4}));
  const Tensor x = buf.slice(0, 4), shifted = buf.slice(1, 5);
  const Tensor bias = on(Tensor::zeros({4}));
  Tensor y = on(Tensor::zeros({4, 4}));
  // Outputs partly over the input.
  expect_error([&] { ops::bias_activation_forward(s, shifted, x, bias, Activation::relu); },
               {"ops::bias_activation_forward", "overlaps"});
  expect_error([&] { ops::bias_activation_forward(s, y, x, bias, Activation::relu, shifted); },
               {"ops::bias_activation_forward", "overlaps"});
  // y and pre the same memory: two outputs never share it.
  expect_error([&] { ops::bias_activation_forward(s, y, x, bias, Activation::gelu, y); },
               {"ops::bias_activation_forward", "separate"});
  // Backward: dx partly over dy or pre; dbias inside dx.
  Tensor other = on(Tensor::zeros({4, 4}));
  expect_error([&] { ops::bias_activation_backward(s, shifted, {}, x, other, Activation::relu); },
               {"ops::bias_activation_backward", "overlaps"});
  expect_error([&] { ops::bias_activation_backward(s, shifted, {}, other, x, Activation::relu); },
               {"ops::bias_activation_backward", "overlaps"});
  const TensorView row_of_y = y.view().reshape(Shape{16}).slice(0, 4);
  expect_error(
      [&] { ops::bias_activation_backward(s, y, row_of_y, other, other, Activation::relu); },
      {"ops::bias_activation_backward", "separate"});
}

INSTANTIATE_EMBER_DEVICES(BiasActivation);

}  // namespace
}  // namespace ember::testing
