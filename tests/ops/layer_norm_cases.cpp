// ops::layer_norm_forward / layer_norm_backward on every test device, against a double
// reference, and on a CUDA device against the CPU backend.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "ember/ops/layer_norm.hpp"
#include "ops/device_cases.hpp"
#include "test_support.hpp"

namespace ember::testing {
namespace {

struct Reference {
  std::vector<double> y, mean, rstd, dx, dgamma, dbeta;
};

// LayerNorm and its gradients in double from f32 data.
Reference reference(const std::vector<float>& x, const std::vector<float>& gamma,
                    const std::vector<float>& beta, const std::vector<float>& dy, int64_t rows,
                    int64_t cols, double eps) {
  Reference r;
  r.y.resize(x.size());
  r.dx.resize(x.size());
  r.dgamma.assign(static_cast<size_t>(cols), 0.0);
  r.dbeta.assign(static_cast<size_t>(cols), 0.0);
  for (int64_t i = 0; i < rows; ++i) {
    const float* xr = x.data() + i * cols;
    double mean = 0, var = 0;
    for (int64_t j = 0; j < cols; ++j) mean += xr[j];
    mean /= cols;
    for (int64_t j = 0; j < cols; ++j) var += (xr[j] - mean) * (xr[j] - mean);
    var /= cols;
    const double rstd = 1 / std::sqrt(var + eps);
    r.mean.push_back(mean);
    r.rstd.push_back(rstd);
    double sg = 0, sgx = 0;
    for (int64_t j = 0; j < cols; ++j) {
      const double xh = (xr[j] - mean) * rstd;
      r.y[i * cols + j] = xh * gamma[j] + beta[j];
      const double g = dy[i * cols + j] * gamma[j];
      sg += g;
      sgx += g * xh;
      r.dgamma[j] += dy[i * cols + j] * xh;
      r.dbeta[j] += dy[i * cols + j];
    }
    for (int64_t j = 0; j < cols; ++j) {
      const double xh = (xr[j] - mean) * rstd;
      const double g = dy[i * cols + j] * gamma[j];
      r.dx[i * cols + j] = rstd * (g - sg / cols - xh * sgx / cols);
    }
  }
  return r;
}

std::vector<float> uniform(int64_t n, uint64_t seed, double lo, double hi) {
  return Tensor::empty({n}).uniform_(seed, lo, hi).to_vector<float>();
}

class LayerNormOp : public OnDevice {
 protected:
  struct Result {
    std::vector<float> y, mean, rstd, dx, dgamma, dbeta;
  };
  // Runs forward and backward on `device` with x in `dtype` (y and dx in it too).
  Result run(Device device, const std::vector<float>& x, const std::vector<float>& gamma,
             const std::vector<float>& beta, const std::vector<float>& dy, int64_t rows,
             int64_t cols, DType dtype, float eps = 1e-5f) {
    Stream s = device.is_cpu() ? Stream() : current_stream(device);
    auto put = [&](const std::vector<float>& v, Shape shape, DType t) {
      return Tensor::from_vector(v, shape).to(t).to(s);
    };
    const Tensor xd = put(x, {rows, cols}, dtype), dyd = put(dy, {rows, cols}, dtype);
    const Tensor g = put(gamma, {cols}, DType::f32), b = put(beta, {cols}, DType::f32);
    Tensor y = Tensor::empty({rows, cols}, dtype, s), dx = Tensor::empty({rows, cols}, dtype, s);
    Tensor mean = Tensor::empty({rows}, DType::f32, s), rstd = Tensor::empty({rows}, DType::f32, s);
    Tensor dgamma = Tensor::full({cols}, 0.5, DType::f32, s);  // accumulated into
    Tensor dbeta = Tensor::zeros({cols}, DType::f32, s);
    ops::layer_norm_forward(s, y, mean, rstd, xd, g, b, eps);
    ops::layer_norm_backward(s, dx, dgamma, dbeta, dyd, xd, mean, rstd, g);
    auto host = [](const Tensor& t) {
      return t.to(DType::f32).to(Device::cpu()).to_vector<float>();
    };
    return {host(y), host(mean), host(rstd), host(dx), host(dgamma), host(dbeta)};
  }
};

void expect_close(const std::vector<float>& got, const std::vector<double>& want, double rel,
                  double abs, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], abs + rel * std::fabs(want[i])) << what << " element " << i;
  }
}

TEST_P(LayerNormOp, MatchesTheDoubleReferenceAcrossShapes) {
  // Warp rows (up to 1024 columns) and block rows; row counts not a multiple of 8 or of the
  // 32-row chunks of the parameter sums; more chunks than a tile of the CUDA kernel's finishing
  // sums (64 chunks: 2100 rows), over columns that are not a multiple of its 32.
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1},
                            {3, 7},
                            {37, 64},
                            {70, 1000},
                            {5, 1500},
                            {2, 4099},
                            {2100, 45}}) {
    const int64_t n = rows * cols;
    const auto x = uniform(n, 1 + cols, -3.0, 5.0);
    const auto gamma = uniform(cols, 2, 0.5, 1.5), beta = uniform(cols, 3, -0.5, 0.5);
    const auto dy = uniform(n, 4, -1.0, 1.0);
    const Result r = run(device(), x, gamma, beta, dy, rows, cols, DType::f32);
    Reference ref = reference(x, gamma, beta, dy, rows, cols, 1e-5);
    for (double& v : ref.dgamma) v += 0.5;  // accumulated onto 0.5
    SCOPED_TRACE(::testing::Message() << rows << " x " << cols);
    expect_close(r.y, ref.y, 1e-5, 1e-5, "y");
    expect_close(r.mean, ref.mean, 1e-6, 1e-6, "mean");
    expect_close(r.rstd, ref.rstd, 1e-6, 1e-6, "rstd");
    expect_close(r.dx, ref.dx, 1e-4, 1e-5, "dx");
    expect_close(r.dgamma, ref.dgamma, 1e-5, 1e-5, "dgamma");
    expect_close(r.dbeta, ref.dbeta, 1e-5, 1e-5, "dbeta");
  }
}

TEST_P(LayerNormOp, SixteenBitInputsWithF32Statistics) {
  const int64_t rows = 9, cols = 96;
  const auto x = uniform(rows * cols, 5, -2.0, 2.0);
  const auto gamma = uniform(cols, 6, 0.5, 1.5), beta = uniform(cols, 7, -0.5, 0.5);
  const auto dy = uniform(rows * cols, 8, -1.0, 1.0);
  for (DType dtype : {DType::f16, DType::bf16}) {
    // The reference sees the same rounded inputs.
    auto rounded = [&](const std::vector<float>& v) {
      return Tensor::from_vector(v, {static_cast<int64_t>(v.size())})
          .to(dtype)
          .to(DType::f32)
          .to_vector<float>();
    };
    const Result r = run(device(), x, gamma, beta, dy, rows, cols, dtype);
    Reference ref = reference(rounded(x), gamma, beta, rounded(dy), rows, cols, 1e-5);
    for (double& v : ref.dgamma) v += 0.5;
    const double tol = dtype == DType::f16 ? 2e-3 : 1.6e-2;  // the output's rounding
    expect_close(r.y, ref.y, tol, tol, "y");
    expect_close(r.mean, ref.mean, 1e-6, 1e-6, "mean");
    expect_close(r.dx, ref.dx, tol, tol, "dx");
    expect_close(r.dgamma, ref.dgamma, 1e-5, 1e-5, "dgamma");
  }
}

TEST_P(LayerNormOp, HugeValuesAndNonFiniteInputs) {
  Stream s = stream();
  // Two passes: a row of values near 1e30 with a small spread normalizes exactly.
  const Tensor x = on(Tensor::from_vector<float>({1e30f, 1e30f, -1e30f, -1e30f}, {1, 4}));
  Tensor y = Tensor::empty({1, 4}, DType::f32, s);
  ops::layer_norm_forward(s, y, TensorView{}, TensorView{}, x, TensorView{}, TensorView{});
  expect_close(y.to_vector<float>(), {1, 1, -1, -1}, 1e-6, 1e-6, "y");
  // A nan or inf in a row makes that row nan, and no other.
  const Tensor bad = on(Tensor::from_vector<float>(
      {1.0f, std::numeric_limits<float>::infinity(), 2.0f, 3.0f, 4.0f, 5.0f}, {2, 3}));
  Tensor yb = Tensor::empty({2, 3}, DType::f32, s);
  ops::layer_norm_forward(s, yb, TensorView{}, TensorView{}, bad, TensorView{}, TensorView{});
  const std::vector<float> v = yb.to_vector<float>();
  for (int j = 0; j < 3; ++j) EXPECT_TRUE(std::isnan(v[j])) << j;
  expect_close({v[3], v[4], v[5]}, {-1.2247435, 0, 1.2247435}, 1e-5, 1e-5, "finite row");
}

TEST_P(LayerNormOp, InPlaceEmptyAndOverwrite) {
  Stream s = stream();
  Tensor x = on(Tensor::from_vector<float>({1, 2, 3, 4, 6, 8}, {2, 3}));
  ops::layer_norm_forward(s, x, TensorView{}, TensorView{}, x, TensorView{}, TensorView{});
  expect_close(x.to_vector<float>(), {-1.2247435, 0, 1.2247435, -1.2247435, 0, 1.2247435}, 1e-5,
               1e-5, "in place");
  // No rows: nothing to normalize; dgamma written as 0 when not accumulating.
  const Tensor empty = on(Tensor::empty({0, 4}));
  Tensor mean = on(Tensor::empty({0})), rstd = on(Tensor::empty({0}));
  ops::layer_norm_forward(s, on(Tensor::empty({0, 4})), mean, rstd, empty, TensorView{},
                          TensorView{});
  Tensor dgamma = on(Tensor::full({4}, 7.0));
  ops::layer_norm_backward(s, TensorView{}, dgamma, TensorView{}, empty, empty, mean, rstd,
                           TensorView{}, /*accumulate=*/false);
  EXPECT_EQ(dgamma.to_vector<float>(), std::vector<float>(4, 0.0f));
}

TEST_P(LayerNormOp, BadArgumentsAreErrors) {
  Stream s = stream();
  const Tensor x = on(Tensor::zeros({2, 3}));
  Tensor y = on(Tensor::empty({2, 3}));
  Tensor stats = on(Tensor::empty({2}));
  const TensorView none;
  expect_error([&] { ops::layer_norm_forward(s, y, none, none, x, none, none, -1.0f); },
               "eps must be finite and >= 0");
  expect_error(
      [&] { ops::layer_norm_forward(s, y, none, none, x, on(Tensor::full({4}, 1.0)), none); },
      "gamma must be [3]");
  expect_error(
      [&] {
        ops::layer_norm_forward(s, on(Tensor::empty({3, 2})), none, none, x, none, none);
      },
      "must match x");
  expect_error([&] { ops::layer_norm_forward(s, y, stats, none, x, none, none); },
               "give both mean and rstd");
  expect_error([&] { ops::layer_norm_forward(s, y, on(Tensor::empty({3})), stats, x, none, none); },
               "mean must be [2] (one per row)");
  expect_error(
      [&] {
        ops::layer_norm_backward(s, x, none, none, on(Tensor::zeros({2, 3})), x, stats,
                                 on(Tensor::empty({2})), none);
      },
      "shares memory");
  expect_error(
      [&] {
        ops::layer_norm_forward(s, y, none, none, on(Tensor::zeros({2, 3}, DType::i32)), none,
                                none);
      },
      "x must be f32, f16 or bf16");
}

// On a CUDA device: against the CPU backend. On the CPU: a second run, which must be bitwise the
// same.
TEST_P(LayerNormOp, CudaMatchesTheCpuBackend) {
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{45, 1100}, {2100, 45}}) {
    const auto x = uniform(rows * cols, 11, -4.0, 4.0);
    const auto gamma = uniform(cols, 12, 0.5, 1.5), beta = uniform(cols, 13, -0.5, 0.5);
    const auto dy = uniform(rows * cols, 14, -1.0, 1.0);
    for (DType dtype : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(::testing::Message() << rows << " x " << cols << " " << dtype_name(dtype));
      const Result gpu = run(device(), x, gamma, beta, dy, rows, cols, dtype);
      const Result cpu = run(Device::cpu(), x, gamma, beta, dy, rows, cols, dtype);
      // The statistics' sums are ordered differently (a rounding of mean or rstd at most); the
      // parameter sums are ordered alike: bitwise.
      std::vector<double> y(cpu.y.begin(), cpu.y.end()), dx(cpu.dx.begin(), cpu.dx.end());
      expect_close(gpu.y, y, 1e-6, 1e-6, "y");
      expect_close(gpu.dx, dx, 1e-5, 1e-6, "dx");
      if (gpu.mean == cpu.mean && gpu.rstd == cpu.rstd) {
        EXPECT_EQ(gpu.dgamma, cpu.dgamma);
        EXPECT_EQ(gpu.dbeta, cpu.dbeta);
      }
    }
  }
}

INSTANTIATE_EMBER_DEVICES(LayerNormOp);

}  // namespace
}  // namespace ember::testing
