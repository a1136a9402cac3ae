// ember's tensor-core matmul (kernels/matmul_tensor_core.cuh,
// src/ops/matmul/matmul_tensor_core.cu) run on the SIMT emulator through its launcher, against a
// double-precision host reference of MatmulProblem's definition (ember/kernels/matmul_problem.cuh).
#include "ember/simt/prelude.hpp"
// clang-format off: the kernel header needs the prelude first (for the tile heuristic)
#include "ember/kernels/matmul_tensor_core.cuh"
// clang-format on

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "ember/core/device.hpp"
#include "ember/core/error.hpp"
#include "ember/core/tensor.hpp"
#include "ember/simt/profile.hpp"
#include "ember/simt/shim.hpp"
#include "ops/matmul/matmul_launchers.hpp"
#include "simt/emulated_backend/emulated_test_support.hpp"

namespace {

using ember::Device;
using ember::DType;
using ember::Tensor;
using ember::kernels::EpilogueActivation;
using ember::kernels::MatmulProblem;
using ember::kernels::MatrixRef;

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

// The value `x` becomes when stored as `type` (round to nearest even).
double round_to(DType type, double x) {
  switch (type) {
    case DType::f16:
      return static_cast<float>(ember::half(static_cast<float>(x)));
    case DType::bf16:
      return static_cast<float>(ember::bfloat16(static_cast<float>(x)));
    default:
      return static_cast<float>(x);
  }
}

// Half the spacing of `type`'s values relative to the value: its rounding error bound.
double rounding_of(DType type) {
  switch (type) {
    case DType::f16:
      return std::ldexp(1.0, -11);
    case DType::bf16:
      return std::ldexp(1.0, -8);
    default:
      return std::ldexp(1.0, -24);
  }
}

// A batch of row-major [rows, cols] matrices in one device buffer, `offset` elements after its
// start, with the host copy of every element the kernel may read. Elements of the buffer that
// belong to no matrix (row padding, the offset) hold NaN, so reading one shows in the result.
struct DeviceMatrix {
  int64_t rows = 0, cols = 0, ld = 0, batch_stride = 0, offset = 0;
  DType type = DType::f32;
  std::vector<double> host;  // the whole buffer
  Tensor device;

  double at(int64_t b, int64_t r, int64_t c) const {
    return host[static_cast<size_t>(offset + b * batch_stride + r * ld + c)];
  }
  MatrixRef ref() const {
    auto* base = static_cast<char*>(device.data()) + offset * ember::dtype_size(device.dtype());
    return {base, type, ld, batch_stride};
  }
  std::vector<double> read_back() const {
    const std::vector<float> values = device.to(Device::cpu()).to(DType::f32).to_vector<float>();
    return {values.begin(), values.end()};
  }
};

// Random values in [-1, 1) rounded to `type`, or `fill` everywhere when it is given.
DeviceMatrix make_matrix(std::mt19937& rng, DType type, int64_t rows, int64_t cols, int64_t batch,
                         int64_t ld, bool shared, int64_t offset, double fill = 0.0,
                         bool use_fill = false) {
  DeviceMatrix m;
  m.rows = rows;
  m.cols = cols;
  m.ld = ld;
  m.batch_stride = shared ? 0 : rows * ld;
  m.offset = offset;
  m.type = type;
  const int64_t entries = shared ? 1 : batch;
  const int64_t total = offset + std::max<int64_t>(entries * rows * ld, 1);
  m.host.assign(static_cast<size_t>(total), kNan);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  for (int64_t b = 0; b < entries; ++b) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        m.host[static_cast<size_t>(offset + b * rows * ld + r * ld + c)] =
            use_fill ? fill : round_to(type, uniform(rng));
      }
    }
  }
  const std::vector<float> as_float(m.host.begin(), m.host.end());
  m.device = Tensor::from_vector(as_float, {total}).to(type).to(Device::cuda(0));
  return m;
}

struct Case {
  int64_t m = 1, n = 1, k = 1, batch = 1;
  bool trans_a = false, trans_b = false;
  DType ab = DType::f16;
  DType c = DType::f32;
  DType aux = DType::f32;  // bias, activation_input, pre_activation, residual
  float alpha = 1.0f, beta = 0.0f, output_scale = 1.0f;
  bool bias = false, pre_activation = false, residual = false;
  EpilogueActivation activation = EpilogueActivation::none;
  EpilogueActivation activation_grad = EpilogueActivation::none;
  bool share_a = false, share_b = false;  // batch_stride 0: one matrix for every batch entry
  int64_t lda = 0, ldb = 0;               // 0: the stored row length rounded up to 8
  int64_t offset_a = 0, offset_b = 0;     // elements between the buffer and the matrix
};

double gelu(double x) {
  return x / (1.0 + std::exp(-1.5957691216057308 * x * (1.0 + 0.044715 * x * x)));
}
double gelu_derivative(double x) {
  const double z = 1.5957691216057308 * x * (1.0 + 0.044715 * x * x);
  const double s = 1.0 / (1.0 + std::exp(-z));
  return s + x * 1.5957691216057308 * (1.0 + 3.0 * 0.044715 * x * x) * s * (1.0 - s);
}
double activate(EpilogueActivation a, double t) {
  if (a == EpilogueActivation::relu) return t < 0.0 ? 0.0 : t;
  if (a == EpilogueActivation::gelu) return gelu(t);
  return t;
}
double activate_grad(EpilogueActivation a, double g, double x) {
  if (a == EpilogueActivation::relu) return x > 0.0 ? g : 0.0;
  if (a == EpilogueActivation::gelu) return g * gelu_derivative(x);
  return g;
}

int64_t round_up8(int64_t x) {
  return (x + 7) / 8 * 8;
}

// Runs the case through matmul_tensor_core and checks C (and pre_activation) element-wise.
//
// Tolerances: the inputs are exactly the stored 16-bit values, so the reference (double) sees
// the kernel's inputs and each product a*b is exact in f32; what differs is f32 accumulation
// (at most one rounding of 2^-24 per k16 step on the emulator, per k on hardware: under 1e-5
// of sum |a||b| for K <= 257), the f32 epilogue arithmetic and expf (a few 2^-24 of the
// magnitudes involved), carried through the activation and its derivative (both Lipschitz
// with constant < 1.2 on our inputs), then the final rounding to the output type: half its
// spacing, 2^-11 (f16), 2^-8 (bf16) or 2^-24 (f32) relative, plus f16's subnormal spacing.
void run_case(const Case& cs, uint32_t seed = 1) {
  SCOPED_TRACE(testing::Message() << cs.m << "x" << cs.n << "x" << cs.k << " batch " << cs.batch
                                  << " trans_a " << cs.trans_a << " trans_b " << cs.trans_b);
  std::mt19937 rng(seed);
  const int64_t a_rows = cs.trans_a ? cs.k : cs.m, a_cols = cs.trans_a ? cs.m : cs.k;
  const int64_t b_rows = cs.trans_b ? cs.n : cs.k, b_cols = cs.trans_b ? cs.k : cs.n;
  const DeviceMatrix a = make_matrix(rng, cs.ab, a_rows, a_cols, cs.batch,
                                     cs.lda ? cs.lda : round_up8(a_cols), cs.share_a, cs.offset_a);
  const DeviceMatrix b = make_matrix(rng, cs.ab, b_rows, b_cols, cs.batch,
                                     cs.ldb ? cs.ldb : round_up8(b_cols), cs.share_b, cs.offset_b);
  // beta == 0: C starts as NaN, which the kernel must never read.
  const DeviceMatrix c =
      make_matrix(rng, cs.c, cs.m, cs.n, cs.batch, cs.n, false, 0, kNan, cs.beta == 0.0f);
  const DeviceMatrix bias = make_matrix(rng, cs.aux, 1, cs.n, 1, cs.n, true, 0);
  const DeviceMatrix act_in = make_matrix(rng, cs.aux, cs.m, cs.n, cs.batch, cs.n, false, 0);
  const DeviceMatrix residual = make_matrix(rng, cs.aux, cs.m, cs.n, cs.batch, cs.n, false, 0);
  const DeviceMatrix pre =
      make_matrix(rng, cs.aux, cs.m, cs.n, cs.batch, cs.n, false, 0, kNan, true);

  MatmulProblem p;
  p.m = cs.m;
  p.n = cs.n;
  p.k = cs.k;
  p.batch = cs.batch;
  p.a = a.ref();
  p.b = b.ref();
  p.trans_a = cs.trans_a;
  p.trans_b = cs.trans_b;
  p.c = c.ref();
  p.alpha = cs.alpha;
  p.beta = cs.beta;
  if (cs.bias) p.bias = bias.ref();
  p.activation = cs.activation;
  p.activation_grad = cs.activation_grad;
  if (cs.activation_grad != EpilogueActivation::none) p.activation_input = act_in.ref();
  if (cs.pre_activation) p.pre_activation = pre.ref();
  if (cs.residual) p.residual = residual.ref();
  p.output_scale = cs.output_scale;

  ember::ops::cuda::matmul_tensor_core(p, ember::testing::tensor_stream());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<double> got_c = c.read_back();
  const std::vector<double> got_pre = pre.read_back();

  int64_t bad = 0;
  const auto check = [&](const char* what, double got, double want, double tol, int64_t bi,
                         int64_t i, int64_t j) {
    if (std::abs(got - want) <= tol) return;  // false for NaN
    if (++bad <= 5) {
      ADD_FAILURE() << what << "[" << bi << ", " << i << ", " << j << "] = " << got << ", expected "
                    << want << " (tolerance " << tol << ")";
    }
  };
  for (int64_t bi = 0; bi < cs.batch; ++bi) {
    for (int64_t i = 0; i < cs.m; ++i) {
      for (int64_t j = 0; j < cs.n; ++j) {
        double acc = 0.0, magnitude = 0.0;
        for (int64_t kk = 0; kk < cs.k; ++kk) {
          const double x = cs.trans_a ? a.at(bi, kk, i) : a.at(bi, i, kk);
          const double y = cs.trans_b ? b.at(bi, j, kk) : b.at(bi, kk, j);
          acc += x * y;
          magnitude += std::abs(x * y);
        }
        double t = cs.alpha * acc;
        magnitude *= std::abs(cs.alpha);
        if (cs.beta != 0.0f) {
          t += cs.beta * c.at(bi, i, j);
          magnitude += std::abs(cs.beta * c.at(bi, i, j));
        }
        if (cs.bias) {
          t += bias.at(0, 0, j);
          magnitude += std::abs(bias.at(0, 0, j));
        }
        if (cs.activation_grad != EpilogueActivation::none) {
          t = activate_grad(cs.activation_grad, t, act_in.at(bi, i, j));
          magnitude = 1.2 * magnitude + std::abs(t);
        }
        const double small = cs.aux == DType::f16 ? 1e-7 : 0.0;
        if (cs.pre_activation) {
          check("pre_activation", got_pre[static_cast<size_t>(bi * cs.m * cs.n + i * cs.n + j)], t,
                1e-5 * magnitude + rounding_of(cs.aux) * std::abs(t) + small, bi, i, j);
        }
        double d = cs.output_scale * activate(cs.activation, t);
        magnitude *= 1.2 * std::abs(cs.output_scale);
        if (cs.residual) {
          d += residual.at(bi, i, j);
          magnitude += std::abs(residual.at(bi, i, j));
        }
        const double tol =
            1e-5 * magnitude + rounding_of(cs.c) * std::abs(d) + (cs.c == DType::f16 ? 1e-7 : 0.0);
        check("C", got_c[static_cast<size_t>(bi * cs.m * cs.n + i * cs.n + j)], d, tol, bi, i, j);
      }
    }
  }
  EXPECT_EQ(bad, 0) << "elements outside the tolerance";
}

struct Shape3 {
  int64_t m, n, k;
};

// Edges in every direction (M, N, K tails), K = 1 and K = 0, tall-skinny and short-wide.
constexpr Shape3 kShapes[] = {{1, 1, 1},   {7, 13, 5}, {33, 65, 17},  {127, 129, 257},
                              {40, 50, 1}, {9, 10, 0}, {1000, 3, 40}, {3, 1000, 40}};

void run_shapes_and_layouts(DType ab, DType c) {
  for (const Shape3& s : kShapes) {
    for (int layout = 0; layout < 4; ++layout) {
      Case cs;
      cs.m = s.m;
      cs.n = s.n;
      cs.k = s.k;
      cs.ab = ab;
      cs.c = c;
      cs.trans_a = layout & 1;
      cs.trans_b = layout & 2;
      run_case(cs);
    }
  }
}

TEST(MatmulTensorCore, ShapesAndLayoutsF16) {
  run_shapes_and_layouts(DType::f16, DType::f32);
  EXPECT_NO_THROW(ember::simt::check_guards());
}

TEST(MatmulTensorCore, ShapesAndLayoutsBf16) {
  run_shapes_and_layouts(DType::bf16, DType::bf16);
  EXPECT_NO_THROW(ember::simt::check_guards());
}

TEST(MatmulTensorCore, OutputTypes) {
  for (DType ab : {DType::f16, DType::bf16}) {
    for (DType c : {DType::f32, DType::f16, DType::bf16}) {
      Case cs;
      cs.m = 33;
      cs.n = 65;
      cs.k = 17;
      cs.ab = ab;
      cs.c = c;
      cs.trans_b = true;
      run_case(cs);
    }
  }
  EXPECT_NO_THROW(ember::simt::check_guards());
}

TEST(MatmulTensorCore, AlphaBetaBiasRelu) {
  Case cs;
  cs.m = 70;
  cs.n = 45;
  cs.k = 24;
  cs.alpha = -0.75f;
  cs.beta = 0.5f;
  cs.bias = true;
  cs.activation = EpilogueActivation::relu;
  run_case(cs);
  cs.c = DType::bf16;
  cs.aux = DType::bf16;
  cs.trans_a = true;
  run_case(cs, 2);
  EXPECT_NO_THROW(ember::simt::check_guards());
}

TEST(MatmulTensorCore, BetaZeroIgnoresNanInC) {
  Case cs;  // C holds NaN (run_case fills it so when beta == 0)
  cs.m = 20;
  cs.n = 30;
  cs.k = 40;
  cs.alpha = 2.0f;
  run_case(cs);
  cs.k = 0;  // acc = 0: D = bias only
  cs.bias = true;
  run_case(cs);
  EXPECT_NO_THROW(ember::simt::check_guards());
}

// K = 0 needs no operand memory at all: D = alpha * 0 + beta * C + bias.
TEST(MatmulTensorCore, EmptyKWithNullOperands) {
  std::mt19937 rng(5);
  const DeviceMatrix c = make_matrix(rng, DType::f32, 5, 6, 1, 6, false, 0);
  const DeviceMatrix bias = make_matrix(rng, DType::f32, 1, 6, 1, 6, true, 0);
  MatmulProblem p;
  p.m = 5;
  p.n = 6;
  p.k = 0;
  p.a.type = p.b.type = DType::bf16;  // data stays null
  p.c = c.ref();
  p.beta = 2.0f;
  p.bias = bias.ref();
  ember::ops::cuda::matmul_tensor_core(p, ember::testing::tensor_stream());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<double> got = c.read_back();
  for (int64_t i = 0; i < 5; ++i) {
    for (int64_t j = 0; j < 6; ++j) {
      // f32 throughout: 2 * c + bias rounds once, within 2^-24 of each term's magnitude.
      const double want = 2.0 * c.at(0, i, j) + bias.at(0, 0, j);
      EXPECT_NEAR(got[static_cast<size_t>(i * 6 + j)], want,
                  1e-7 * (2.0 * std::abs(c.at(0, i, j)) + std::abs(bias.at(0, 0, j))));
    }
  }
  EXPECT_NO_THROW(ember::simt::check_guards());
}

// bias_grad = row sums of op(A) (+ bias_grad_beta * bias_grad), next to the GEMM.
TEST(MatmulTensorCore, BiasGradientIsTheRowSumsOfOpA) {
  for (int trans_a = 0; trans_a < 2; ++trans_a) {
    SCOPED_TRACE(testing::Message() << "trans_a " << trans_a);
    std::mt19937 rng(6);
    const int64_t m = 37, n = 11, k = 45;
    const DType type = trans_a ? DType::bf16 : DType::f16;
    const DeviceMatrix a =
        make_matrix(rng, type, trans_a ? k : m, trans_a ? m : k, 1, trans_a ? 40 : 48, false, 0);
    const DeviceMatrix b = make_matrix(rng, type, k, n, 1, 16, false, 0);
    const DeviceMatrix c = make_matrix(rng, DType::f32, m, n, 1, n, false, 0);
    const DeviceMatrix grad = make_matrix(rng, DType::f32, 1, m, 1, m, true, 0);
    MatmulProblem p;
    p.m = m;
    p.n = n;
    p.k = k;
    p.a = a.ref();
    p.b = b.ref();
    p.trans_a = trans_a;
    p.c = c.ref();
    p.bias_grad = grad.ref();
    p.bias_grad_beta = 1.0f;  // accumulate, as across micro-batches
    ember::ops::cuda::matmul_tensor_core(p, ember::testing::tensor_stream());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<double> got = grad.read_back();
    for (int64_t i = 0; i < m; ++i) {
      double want = grad.at(0, 0, i), magnitude = std::abs(want);
      for (int64_t kk = 0; kk < k; ++kk) {
        const double x = trans_a ? a.at(0, kk, i) : a.at(0, i, kk);
        want += x;
        magnitude += std::abs(x);
      }
      // f32 sums of 45 exact terms: well under 1e-5 of the sum of magnitudes.
      EXPECT_NEAR(got[static_cast<size_t>(i)], want, 1e-5 * magnitude) << "row " << i;
    }
  }
  EXPECT_NO_THROW(ember::simt::check_guards());
}

TEST(MatmulTensorCore, GeluSavesPreActivation) {
  Case cs;
  cs.m = 40;
  cs.n = 72;
  cs.k = 48;
  cs.bias = true;
  cs.activation = EpilogueActivation::gelu;
  cs.pre_activation = true;
  run_case(cs);
  cs.aux = DType::f16;
  cs.c = DType::f16;
  cs.trans_a = cs.trans_b = true;
  run_case(cs, 3);
  EXPECT_NO_THROW(ember::simt::check_guards());
}

TEST(MatmulTensorCore, ActivationGradients) {
  for (EpilogueActivation grad : {EpilogueActivation::relu, EpilogueActivation::gelu}) {
    Case cs;
    cs.m = 36;
    cs.n = 20;
    cs.k = 33;
    cs.ab = DType::bf16;
    cs.activation_grad = grad;
    cs.pre_activation = true;
    cs.beta = 1.0f;  // accumulate into an existing gradient
    run_case(cs);
  }
  EXPECT_NO_THROW(ember::simt::check_guards());
}

TEST(MatmulTensorCore, ResidualAndOutputScale) {
  Case cs;
  cs.m = 50;
  cs.n = 66;
  cs.k = 20;
  cs.trans_b = true;
  cs.bias = true;
  cs.activation = EpilogueActivation::gelu;
  cs.output_scale = 0.25f;
  cs.residual = true;
  cs.c = DType::bf16;
  run_case(cs);
  EXPECT_NO_THROW(ember::simt::check_guards());
}

TEST(MatmulTensorCore, Batched) {
  for (int shared = 0; shared < 2; ++shared) {
    Case cs;
    cs.m = 30;
    cs.n = 70;
    cs.k = 37;
    cs.batch = 3;
    cs.share_a = shared == 0;  // one weight matrix for every batch entry
    cs.share_b = shared == 1;
    cs.trans_a = shared == 1;
    cs.beta = 0.5f;
    cs.bias = true;
    cs.residual = true;
    run_case(cs);
  }
  EXPECT_NO_THROW(ember::simt::check_guards());
}

// Leading dimensions and base pointers that rule out 16-byte cp.async: the launcher falls
// back to 8-, 4-byte copies or element loads; each layout reads its operands differently.
TEST(MatmulTensorCore, MisalignedLeadingDimensions) {
  for (int64_t extra : {1, 2, 4}) {  // ld % 8 == 1: element loads; 2: 4-byte copies; 4: 8-byte
    for (int layout = 0; layout < 4; ++layout) {
      Case cs;
      cs.m = 37;
      cs.n = 29;
      cs.k = 43;
      cs.trans_a = layout & 1;
      cs.trans_b = layout & 2;
      cs.ab = layout < 2 ? DType::f16 : DType::bf16;
      cs.lda = round_up8(cs.trans_a ? cs.m : cs.k) + extra;
      cs.ldb = round_up8(cs.trans_b ? cs.k : cs.n) + extra;
      cs.batch = 2;  // batch_stride = rows * ld: misaligned like ld
      run_case(cs);
    }
  }
  EXPECT_NO_THROW(ember::simt::check_guards());
}

TEST(MatmulTensorCore, MisalignedBasePointer) {
  for (int layout = 0; layout < 4; ++layout) {
    Case cs;
    cs.m = 45;
    cs.n = 38;
    cs.k = 27;
    cs.trans_a = layout & 1;
    cs.trans_b = layout & 2;
    cs.offset_b = 1;  // B starts one element (2 bytes) after a 16-byte boundary
    run_case(cs);
    cs.offset_b = 0;
    cs.offset_a = 2;  // 4 bytes: 4-byte copies
    run_case(cs, 2);
  }
  EXPECT_NO_THROW(ember::simt::check_guards());
}

// A device profile with one SM makes the heuristic pick the 128-row tiles for small shapes,
// so the large (8 warps, > 48 KiB of shared memory) and medium configurations run too.
TEST(MatmulTensorCore, LargeAndMediumTiles) {
  const ember::simt::DeviceProfile saved = ember::simt::device_profile();
  ember::simt::DeviceProfile one_sm = saved;
  one_sm.multiprocessor_count = 1;
  ember::simt::set_device_profile(one_sm);
  ASSERT_EQ(ember::kernels::choose_tensor_core_tile(130, 136, 200, 1, 1),
            ember::kernels::TensorCoreTileKind::large);
  ASSERT_EQ(ember::kernels::choose_tensor_core_tile(200, 40, 168, 1, 1),
            ember::kernels::TensorCoreTileKind::medium);
  for (int layout = 0; layout < 4; ++layout) {
    Case cs;
    cs.m = 130;
    cs.n = 136;
    cs.k = 200;  // 7 k-tiles: the 4-stage ring wraps around, with a K tail
    cs.trans_a = layout & 1;
    cs.trans_b = layout & 2;
    cs.ab = layout % 2 ? DType::bf16 : DType::f16;
    cs.bias = true;
    run_case(cs);
    cs.m = 200;
    cs.n = 40;
    cs.k = 168;
    run_case(cs, 2);
  }
  ember::simt::set_device_profile(saved);
  // The large tile opted in to more than 48 KiB of dynamic shared memory before launching.
  const auto large = ember::kernels::matmul_tensor_core_kernel<ember::kernels::TensorCoreTileLarge,
                                                               false, false, false, 8>;
  EXPECT_EQ(ember::simt::max_dynamic_shared(reinterpret_cast<const void*>(large)),
            static_cast<size_t>(ember::kernels::TensorCoreTileLarge::kSharedBytes));
  EXPECT_NO_THROW(ember::simt::check_guards());
}

TEST(MatmulTensorCore, HeuristicFillsTheSms) {
  using ember::kernels::choose_tensor_core_tile;
  using Kind = ember::kernels::TensorCoreTileKind;
  EXPECT_EQ(choose_tensor_core_tile(4096, 4096, 4096, 1, 132), Kind::large);
  EXPECT_EQ(choose_tensor_core_tile(128 * 12, 128 * 11, 256, 1, 132), Kind::large);  // 132
  EXPECT_EQ(choose_tensor_core_tile(128 * 12, 64 * 11, 256, 1, 132), Kind::medium);  // 72 | 132
  EXPECT_EQ(choose_tensor_core_tile(256, 256, 256, 33, 132), Kind::large);    // 4 x 33 blocks
  EXPECT_EQ(choose_tensor_core_tile(512, 512, 512, 1, 132), Kind::small);     // 16 | 32 blocks
  EXPECT_EQ(choose_tensor_core_tile(100000, 3, 40, 1, 132), Kind::small);     // k < 64
  EXPECT_EQ(choose_tensor_core_tile(100000, 3, 64, 1, 132), Kind::medium);    // n <= 64
  EXPECT_EQ(choose_tensor_core_tile(64, 100000, 4096, 1, 132), Kind::small);  // m <= 64
}

// The shared-memory swizzle is a permutation of each row's 16-byte chunks, and both access
// patterns it is for hit 8 different bank groups (16-byte slots of a 128-byte line): 8
// consecutive rows of one chunk column (an ldmatrix 8x8 matrix) and 8 consecutive chunks in
// row-major order (8 threads of a cp.async tile copy).
template <int Cols>
void expect_conflict_free() {
  SCOPED_TRACE(testing::Message() << "tile rows of " << Cols << " elements");
  using ember::kernels::tensor_core_detail::swizzled_index;
  constexpr int kChunks = Cols / 8, kRows = 32;
  const auto bank_group = [](int index) { return (index * 2 / 16) % 8; };
  for (int r = 0; r < kRows; ++r) {
    std::vector<bool> seen(kChunks, false);
    for (int c = 0; c < kChunks; ++c) {
      const int index = swizzled_index<Cols>(r, c);
      ASSERT_EQ(index / Cols, r);
      ASSERT_EQ(index % 8, 0);
      seen[static_cast<size_t>(index % Cols / 8)] = true;
    }
    EXPECT_EQ(std::count(seen.begin(), seen.end(), true), kChunks) << "row " << r;
  }
  for (int r0 = 0; r0 < kRows; r0 += 8) {
    for (int c = 0; c < kChunks; ++c) {
      std::vector<bool> groups(8, false);
      for (int r = r0; r < r0 + 8; ++r) groups[bank_group(swizzled_index<Cols>(r, c))] = true;
      EXPECT_EQ(std::count(groups.begin(), groups.end(), true), 8)
          << "rows " << r0 << "+, chunk " << c;
    }
  }
  for (int first = 0; first < kRows * kChunks; first += 8) {
    std::vector<bool> groups(8, false);
    for (int chunk = first; chunk < first + 8; ++chunk) {
      groups[bank_group(swizzled_index<Cols>(chunk / kChunks, chunk % kChunks))] = true;
    }
    EXPECT_EQ(std::count(groups.begin(), groups.end(), true), 8) << "chunks " << first << "+";
  }
}

TEST(MatmulTensorCore, SwizzleIsConflictFree) {
  expect_conflict_free<32>();   // [rows, BK]
  expect_conflict_free<64>();   // [BK, 64]
  expect_conflict_free<128>();  // [BK, 128]
}

TEST(MatmulTensorCore, RejectsWhatItCannotCompute) {
  std::mt19937 rng(4);
  const DeviceMatrix h = make_matrix(rng, DType::f16, 8, 8, 1, 8, false, 0);
  const DeviceMatrix bf = make_matrix(rng, DType::bf16, 8, 8, 1, 8, false, 0);
  const DeviceMatrix f = make_matrix(rng, DType::f32, 8, 8, 1, 8, false, 0);
  MatmulProblem p;
  p.m = p.n = p.k = 8;
  p.a = h.ref();
  p.b = bf.ref();
  p.c = f.ref();
  EXPECT_THROW(ember::ops::cuda::matmul_tensor_core(p, ember::testing::tensor_stream()),
               ember::Error);  // mixed
  p.a = p.b = f.ref();
  EXPECT_THROW(ember::ops::cuda::matmul_tensor_core(p, ember::testing::tensor_stream()),
               ember::Error);  // f32
  EXPECT_NO_THROW(ember::simt::check_guards());
}

}  // namespace
