// ember's FP32 SIMT matmul (kernels/matmul_simt.cuh via src/ops/matmul/matmul_simt.cu) and
// the bias_grad row sums (kernels/row_sums.cuh), run on the SIMT emulator and checked
// against a double-precision reference of MatmulProblem's definition written here: shapes with
// edges and K tails, all transposes, every epilogue, output types, batches, misaligned layouts, and
// each tile configuration forced in turn.
#include "ember/simt/prelude.hpp"
// clang-format off: the kernels need the prelude first
#include "ember/kernels/matmul_simt.cuh"
#include "ember/kernels/row_sums.cuh"
#include "ember/simt/runtime.hpp"
// clang-format on

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "ember/core/device.hpp"
#include "ember/core/dtype.hpp"
#include "ember/core/tensor.hpp"
#include "ember/simt/shim.hpp"
#include "ops/common/element_type.hpp"
#include "ops/matmul/matmul_launchers.hpp"
#include "simt/emulated_backend/emulated_test_support.hpp"

namespace {

namespace kn = ember::kernels;
using Act = kn::EpilogueActivation;
using ember::Device;
using ember::DType;
using ember::Tensor;

// Rounding of a stored value, relative (unit roundoff) and absolute (half of f16's subnormal step).
double relative_rounding(DType dtype) {
  return dtype == DType::f16 ? 0x1p-11 : dtype == DType::bf16 ? 0x1p-8 : 0x1p-24;
}
double absolute_rounding(DType dtype) {
  return dtype == DType::f16 ? 0x1p-25 : 0.0;
}

// Values as a dtype stores them (round to nearest even), read back as double.
std::vector<double> rounded(const std::vector<float>& values, DType dtype) {
  const Tensor t = Tensor::from_vector(values, {static_cast<int64_t>(values.size())});
  const std::vector<float> back = t.to(dtype).to(DType::f32).to_vector<float>();
  return {back.begin(), back.end()};
}

// One operand in emulated device memory: `offset` elements of padding before data (a misaligned
// base when 1), rows x cols per batch entry with leading dimension ld. Padding holds NaN, so a
// kernel that reads it poisons its result; `values` is what the memory holds, from data on.
struct Matrix {
  Tensor storage;
  DType dtype = DType::f32;
  int64_t offset = 0, rows = 0, cols = 0, ld = 0, stride = 0, entries = 0;
  std::vector<double> values;

  void* data() const {
    return static_cast<char*>(storage.data()) + offset * ember::dtype_size(dtype);
  }
  kn::MatrixRef ref() const { return {data(), ember::ops::cuda::element_type(dtype), ld, stride}; }
  double at(int64_t batch, int64_t r, int64_t c) const {
    return values[static_cast<size_t>((stride == 0 ? 0 : batch) * stride + r * ld + c)];
  }
  // The memory as it is now, from data on.
  std::vector<double> read_back() const {
    const std::vector<float> all = storage.to(Device::cpu()).to(DType::f32).to_vector<float>();
    return {all.begin() + offset, all.end()};
  }
};

struct MatrixSpec {
  int64_t rows = 0, cols = 0;
  int64_t batch = 1;
  bool shared = false;  // batch_stride 0: one matrix for every batch entry
  int64_t pad = 0;      // ld = cols + pad
  bool misaligned = false;
  DType dtype = DType::f32;
};

Matrix make_matrix(std::mt19937& rng, const MatrixSpec& s, bool nan_values = false) {
  Matrix m;
  m.dtype = s.dtype;
  m.offset = s.misaligned ? 1 : 0;
  m.rows = s.rows;
  m.cols = s.cols;
  m.ld = s.cols + s.pad;
  m.entries = s.shared ? 1 : s.batch;
  m.stride = s.shared ? 0 : s.rows * m.ld;
  const int64_t used = m.entries * s.rows * m.ld;
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> host(static_cast<size_t>(m.offset + std::max<int64_t>(used, 1)),
                          std::numeric_limits<float>::quiet_NaN());
  for (int64_t i = 0; i < used; ++i) {
    if (i % m.ld < s.cols) {
      host[static_cast<size_t>(m.offset + i)] =
          nan_values ? std::numeric_limits<float>::quiet_NaN() : uniform(rng);
    }
  }
  m.storage = Tensor::from_vector(host, {static_cast<int64_t>(host.size())})
                  .to(s.dtype)
                  .to(Device::cuda(0));
  const std::vector<double> all = rounded(host, s.dtype);
  m.values.assign(all.begin() + m.offset, all.end());
  return m;
}

double gelu(double x) {
  return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}
double gelu_derivative(double x) {
  const double u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
  const double th = std::tanh(u);
  const double du = 0.7978845608028654 * (1 + 3 * 0.044715 * x * x);
  return 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * du;
}
double activation(Act act, double x) {
  return act == Act::relu ? (x < 0 ? 0.0 : x) : act == Act::gelu ? gelu(x) : x;
}
double activation_grad(Act act, double g, double x) {
  return act == Act::relu ? (x > 0 ? g : 0.0) : act == Act::gelu ? g * gelu_derivative(x) : g;
}

using Launcher = std::function<void(const kn::MatmulProblem&)>;

void run_default(const kn::MatmulProblem& p) {
  ember::ops::cuda::matmul_simt_f32(p, ember::testing::tensor_stream());
}

struct Case {
  int64_t m = 1, n = 1, k = 1, batch = 1;
  bool trans_a = false, trans_b = false;
  bool shared_a = false, shared_b = false;
  int64_t pad_a = 0, pad_b = 0, pad_c = 0;
  bool misaligned_a = false, misaligned_b = false;
  bool round_ld = false;  // pad A's and B's rows to a multiple of 4: float4 loads up to the edges
  DType c_type = DType::f32;
  DType aux_type = DType::f32;  // bias, activation_input, pre_activation, residual
  float alpha = 1.0f, beta = 0.0f;
  bool nan_c = false;  // C holds NaN (must be ignored when beta == 0)
  bool bias = false, save_pre = false, residual = false;
  Act act = Act::none, act_grad = Act::none;
  float output_scale = 1.0f;
  Launcher launch = run_default;
};

// Runs one case and checks every output element (and C's padding) against the reference.
void check_case(const Case& c, uint32_t seed = 1) {
  SCOPED_TRACE(testing::Message() << "m=" << c.m << " n=" << c.n << " k=" << c.k
                                  << " batch=" << c.batch << " trans_a=" << c.trans_a
                                  << " trans_b=" << c.trans_b);
  std::mt19937 rng(seed);
  const int64_t a_cols = c.trans_a ? c.m : c.k, b_cols = c.trans_b ? c.k : c.n;
  const int64_t pad_a = c.round_ld ? (4 - a_cols % 4) % 4 : c.pad_a;
  const int64_t pad_b = c.round_ld ? (4 - b_cols % 4) % 4 : c.pad_b;
  const Matrix a =
      make_matrix(rng, {c.trans_a ? c.k : c.m, a_cols, c.batch, c.shared_a, pad_a, c.misaligned_a});
  const Matrix b =
      make_matrix(rng, {c.trans_b ? c.n : c.k, b_cols, c.batch, c.shared_b, pad_b, c.misaligned_b});
  const MatrixSpec out_spec{c.m, c.n, c.batch, false, c.pad_c, false, c.c_type};
  const Matrix cmat = make_matrix(rng, out_spec, c.nan_c);
  MatrixSpec aux_spec{c.m, c.n, c.batch, false, c.pad_c, false, c.aux_type};
  const Matrix bias = c.bias ? make_matrix(rng, {1, c.n, 1, true, 0, false, c.aux_type}) : Matrix{};
  const Matrix input = c.act_grad != Act::none ? make_matrix(rng, aux_spec) : Matrix{};
  const Matrix pre = c.save_pre ? make_matrix(rng, aux_spec) : Matrix{};
  const Matrix residual = c.residual ? make_matrix(rng, aux_spec) : Matrix{};

  kn::MatmulProblem p;
  p.m = c.m, p.n = c.n, p.k = c.k, p.batch = c.batch;
  p.a = a.ref(), p.b = b.ref(), p.trans_a = c.trans_a, p.trans_b = c.trans_b;
  p.c = cmat.ref(), p.alpha = c.alpha, p.beta = c.beta;
  if (c.bias) p.bias = bias.ref();
  p.activation = c.act, p.activation_grad = c.act_grad;
  if (c.act_grad != Act::none) p.activation_input = input.ref();
  if (c.save_pre) p.pre_activation = pre.ref();
  if (c.residual) p.residual = residual.ref();
  p.output_scale = c.output_scale;
  c.launch(p);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  const std::vector<double> got = cmat.read_back();
  const std::vector<double> got_pre = c.save_pre ? pre.read_back() : std::vector<double>{};
  // Error bounds. The kernel sums k products with sequential f32 FMAs: at most (k + 1) u
  // sum|a||b| (Higham's gamma_k, u = 2^-24), times |alpha|; the epilogue's few f32 operations
  // add a few u of the magnitudes they combine; gelu and its derivative scale errors by at most
  // 1.13 and their f32 evaluation (expf, a division) adds some 16 u relative; the stored result
  // then rounds once to its type (relative_rounding).
  const double u = 0x1p-24;
  int64_t bad = 0;
  auto expect_near = [&](double value, double want, double tol, const char* what, int64_t e,
                         int64_t i, int64_t j) {
    if (std::abs(value - want) <= tol) return;  // false for NaN
    if (++bad <= 5) {
      ADD_FAILURE() << what << "[" << e << ", " << i << ", " << j << "] = " << value
                    << ", expected " << want << " +- " << tol;
    }
  };
  for (int64_t e = 0; e < c.batch; ++e) {
    for (int64_t i = 0; i < c.m; ++i) {
      for (int64_t j = 0; j < c.n; ++j) {
        double acc = 0, mag = 0;
        for (int64_t q = 0; q < c.k; ++q) {
          const double x = c.trans_a ? a.at(e, q, i) : a.at(e, i, q);
          const double y = c.trans_b ? b.at(e, j, q) : b.at(e, q, j);
          acc += x * y;
          mag += std::abs(x * y);
        }
        const double old = c.beta != 0 ? cmat.at(e, i, j) : 0.0;
        const double bias_v = c.bias ? bias.at(0, 0, j) : 0.0;
        double t = c.alpha * acc + c.beta * old + bias_v;
        double t_err =
            (c.k + 1) * u * std::abs(c.alpha) * mag +
            4 * u * (std::abs(c.alpha * acc) + std::abs(c.beta * old) + std::abs(bias_v));
        if (c.act_grad != Act::none) {
          t = activation_grad(c.act_grad, t, input.at(e, i, j));
          t_err = 1.13 * t_err + 16 * u * std::abs(t);
        }
        if (c.save_pre) {
          const double tol = t_err + relative_rounding(c.aux_type) * (std::abs(t) + t_err) +
                             absolute_rounding(c.aux_type);
          expect_near(got_pre[e * pre.stride + i * pre.ld + j], t, tol, "pre", e, i, j);
        }
        const double act_v = activation(c.act, t);
        const double res_v = c.residual ? residual.at(e, i, j) : 0.0;
        const double d = c.output_scale * act_v + res_v;
        const double d_err = std::abs(c.output_scale) * (1.13 * t_err + 16 * u * std::abs(act_v)) +
                             2 * u * (std::abs(d) + std::abs(res_v));
        const double tol = d_err + relative_rounding(c.c_type) * (std::abs(d) + d_err) +
                           absolute_rounding(c.c_type);
        expect_near(got[e * cmat.stride + i * cmat.ld + j], d, tol, "C", e, i, j);
      }
      for (int64_t j = c.n; j < cmat.ld; ++j) {  // C's padding must stay untouched (NaN)
        if (!std::isnan(got[e * cmat.stride + i * cmat.ld + j]) && ++bad <= 5) {
          ADD_FAILURE() << "C's padding at [" << e << ", " << i << ", " << j << "] was written";
        }
      }
    }
  }
  EXPECT_EQ(bad, 0) << "wrong elements";
}

template <class Tile>
Launcher forced() {
  return [](const kn::MatmulProblem& p) {
    kn::launch_matmul_simt<Tile>(p, ember::testing::tensor_stream());
  };
}

const bool kTransposes[4][2] = {{false, false}, {false, true}, {true, false}, {true, true}};

TEST(EmulatedMatmulSimt, ShapesWithEdgesAndKTailsInAllTransposes) {
  struct Shape {
    int64_t m, n, k;
  };
  const Shape shapes[] = {{1, 1, 1},   {7, 13, 5},    {33, 65, 17},  {127, 129, 257},
                          {20, 36, 1}, {1000, 3, 50}, {3, 1000, 50}, {64, 64, 8}};
  for (const Shape& s : shapes) {
    for (const auto& t : kTransposes) {
      Case c;
      c.m = s.m, c.n = s.n, c.k = s.k, c.trans_a = t[0], c.trans_b = t[1];
      check_case(c);
    }
  }
  EXPECT_NO_THROW(ember::simt::check_guards());
}

TEST(EmulatedMatmulSimt, KZeroGivesTheEpilogueOfZero) {
  for (const auto& t : kTransposes) {
    Case c;
    c.m = 9, c.n = 70, c.k = 0, c.trans_a = t[0], c.trans_b = t[1];
    c.beta = 0.5f, c.bias = true, c.act = Act::gelu;
    check_case(c);
  }
  EXPECT_NO_THROW(ember::simt::check_guards());
}

TEST(EmulatedMatmulSimt, EveryTileConfigurationInAllTransposes) {
  // Rows padded to a multiple of 4 floats with NaN (float4 loads wherever 4 elements are in
  // range, scalar ones at the edges; a float4 reaching into the padding gives NaN), and
  // misaligned layouts (scalar loads throughout).
  const Launcher launchers[] = {forced<kn::SimtTile128x128>(), forced<kn::SimtTile64x64>(),
                                forced<kn::SimtTile128x32>(), forced<kn::SimtTile32x128>()};
  for (const Launcher& launch : launchers) {
    for (const auto& t : kTransposes) {
      for (bool misaligned : {false, true}) {
        Case c;
        c.m = 133, c.n = 150, c.k = 39, c.trans_a = t[0], c.trans_b = t[1];
        c.round_ld = !misaligned, c.misaligned_a = misaligned, c.pad_b = 3, c.launch = launch;
        check_case(c);
      }
    }
  }
  EXPECT_NO_THROW(ember::simt::check_guards());
}

TEST(EmulatedMatmulSimt, OutputTypes) {
  for (DType type : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(ember::dtype_name(type));
    Case c;
    c.m = 45, c.n = 70, c.k = 33, c.trans_b = true, c.c_type = type, c.aux_type = type;
    c.beta = 0.75f, c.bias = true, c.act = Act::gelu, c.save_pre = true, c.residual = true;
    check_case(c);
  }
  EXPECT_NO_THROW(ember::simt::check_guards());
}

TEST(EmulatedMatmulSimt, EveryEpilogue) {
  Case base;
  base.m = 37, base.n = 41, base.k = 29;
  std::vector<Case> cases;
  auto add = [&](auto edit) {
    Case c = base;
    edit(c);
    cases.push_back(c);
  };
  add([](Case& c) { c.bias = true; });
  add([](Case& c) { c.act = Act::relu; });
  add([](Case& c) { c.act = Act::gelu, c.save_pre = true; });
  add([](Case& c) { c.bias = true, c.act = Act::relu, c.save_pre = true; });
  add([](Case& c) { c.act_grad = Act::relu; });
  add([](Case& c) { c.act_grad = Act::gelu, c.save_pre = true; });
  add([](Case& c) { c.residual = true; });
  add([](Case& c) { c.output_scale = -2.5f; });
  add([](Case& c) { c.act = Act::gelu, c.output_scale = 0.5f, c.residual = true, c.bias = true; });
  add([](Case& c) {
    c.aux_type = DType::bf16, c.bias = true, c.save_pre = true, c.residual = true;
  });
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(testing::Message() << "epilogue case " << i);
    check_case(cases[i], static_cast<uint32_t>(i + 7));
  }
  EXPECT_NO_THROW(ember::simt::check_guards());
}

TEST(EmulatedMatmulSimt, AlphaAndBeta) {
  Case c;
  c.m = 50, c.n = 66, c.k = 40, c.alpha = 0.5f, c.beta = -1.5f;
  check_case(c);
  c.alpha = -3.0f, c.beta = 0.0f, c.nan_c = true;  // beta == 0: C's NaNs are never read
  check_case(c);
  c.alpha = 0.0f, c.beta = 1.0f, c.nan_c = false, c.c_type = DType::f16;
  check_case(c);
  EXPECT_NO_THROW(ember::simt::check_guards());
}

TEST(EmulatedMatmulSimt, BatchedWithSharedOperands) {
  for (const auto& t : kTransposes) {
    for (int shared = 0; shared < 3; ++shared) {  // none, A, B
      Case c;
      c.m = 35, c.n = 47, c.k = 21, c.batch = 3, c.trans_a = t[0], c.trans_b = t[1];
      c.shared_a = shared == 1, c.shared_b = shared == 2, c.beta = 1.0f, c.residual = true;
      check_case(c);
    }
  }
  // More batch entries than 128x128 tiles: the batch dimension also goes through the grid.
  Case c;
  c.m = 130, c.n = 20, c.k = 12, c.batch = 5, c.shared_b = true,
  c.launch = forced<kn::SimtTile128x128>();
  check_case(c);
  EXPECT_NO_THROW(ember::simt::check_guards());
}

TEST(EmulatedMatmulSimt, MisalignedLeadingDimensionsAndBases) {
  for (const auto& t : kTransposes) {
    Case c;
    c.m = 70, c.n = 67, c.k = 45, c.trans_a = t[0], c.trans_b = t[1];
    c.pad_a = 1, c.pad_b = 5, c.pad_c = 3;  // ld > cols, and odd where cols is even
    check_case(c);
    c.pad_a = 4, c.pad_b = 0, c.misaligned_a = true, c.misaligned_b = true;  // base + 1 float
    check_case(c);
    c.batch = 2, c.pad_a = 0, c.misaligned_a = false, c.pad_b = 2;  // ld % 4 == 2
    check_case(c);
  }
  EXPECT_NO_THROW(ember::simt::check_guards());
}

// The row sums in the kernels' fixed order, in f32: the contiguous kernel's lanes sum k = lane,
// lane + 32, ... and a shuffle-down tree adds them; the strided kernel's slices sum k = y,
// y + kSliceWarps, ... of each K chunk and are added in order of y, then the chunks in order.
float row_sum_in_kernel_order(const Matrix& a, bool trans_a, int64_t i, int64_t k) {
  auto at = [&](int64_t q) { return static_cast<float>(trans_a ? a.at(0, q, i) : a.at(0, i, q)); };
  if (!trans_a) {
    float lanes[32] = {};
    for (int64_t q = 0; q < k; ++q) lanes[q % 32] += at(q);
    for (int offset = 16; offset > 0; offset /= 2) {
      for (int l = 0; l < offset; ++l) lanes[l] += lanes[l + offset];
    }
    return lanes[0];
  }
  // The strided kernel: K in chunks (row_sums_chunks, from the shape), each summed by slices,
  // the chunks' sums then added in order (one chunk: its sum is the result).
  constexpr int kSlices = kn::row_sums_detail::kSliceWarps;
  const int64_t chunks = kn::row_sums_chunks(a.cols, k, a.ref().type);
  const int64_t chunk = chunks == 1 ? k : (k + chunks - 1) / chunks;
  float result = 0.0f;
  for (int64_t c = 0; c < chunks; ++c) {
    float slices[kSlices] = {};
    for (int64_t q = c * chunk; q < std::min(k, (c + 1) * chunk); ++q) {
      slices[(q - c * chunk) % kSlices] += at(q);
    }
    float total = slices[0];
    for (int s = 1; s < kSlices; ++s) total += slices[s];
    result = chunks == 1 ? total : result + total;
  }
  return result;
}

// Computes bias_grad for op(A) [m, k] of element type a_type and checks it bit for bit against
// the kernels' order; twice, to see the same bits again.
void check_row_sums(int64_t m, int64_t k, bool trans_a, DType a_type, DType out_type, float beta,
                    bool through_matmul, int64_t pad = 3, bool misaligned = false) {
  SCOPED_TRACE(testing::Message() << "m=" << m << " k=" << k << " trans_a=" << trans_a << " A "
                                  << ember::dtype_name(a_type) << " out "
                                  << ember::dtype_name(out_type) << " beta=" << beta
                                  << " pad=" << pad << " misaligned=" << misaligned);
  std::mt19937 rng(5);
  const Matrix a =
      make_matrix(rng, {trans_a ? k : m, trans_a ? m : k, 1, false, pad, misaligned, a_type});
  const Matrix b = make_matrix(rng, {k, 5, 1, false, 0, false});
  const Matrix c = make_matrix(rng, {m, 5, 1, false, 0, false});
  std::vector<double> first;
  for (int run = 0; run < 2; ++run) {
    std::mt19937 out_rng(9);  // the same starting bias_grad both times
    const Matrix out = make_matrix(out_rng, {1, m, 1, true, 0, false, out_type});
    std::vector<float> want(static_cast<size_t>(m));
    for (int64_t i = 0; i < m; ++i) {
      const float sum = row_sum_in_kernel_order(a, trans_a, i, k);
      want[i] = beta != 0 ? std::fma(beta, static_cast<float>(out.at(0, 0, i)), sum) : sum;
    }
    kn::MatmulProblem p;
    p.m = m, p.n = 5, p.k = k, p.a = a.ref(), p.trans_a = trans_a, p.b = b.ref(), p.c = c.ref();
    p.bias_grad = out.ref(), p.bias_grad_beta = beta;
    constexpr const char* kVectorKernel = "row_sums_strided_vector_kernel";
    const uint64_t vector_launches = ember::simt::kernel_launches(kVectorKernel);
    if (through_matmul) {
      ember::ops::cuda::matmul_simt_f32(p, ember::testing::tensor_stream());
    } else {
      kn::launch_row_sums(p, ember::testing::tensor_stream());
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    // 16-byte loads exactly where A is aligned with whole vectors per row.
    const bool vectors =
        trans_a && !misaligned && a.ld % kn::row_sums_detail::vector_elements(a.ref().type) == 0;
    EXPECT_EQ(ember::simt::kernel_launches(kVectorKernel) - vector_launches, vectors ? 1u : 0u);
    const std::vector<double> got = out.read_back();
    const std::vector<double> expected = rounded(want, out_type);
    int64_t bad = 0;
    for (int64_t i = 0; i < m; ++i) {
      if (got[i] != expected[i] && ++bad <= 5) {
        ADD_FAILURE() << "bias_grad[" << i << "] = " << got[i] << ", expected " << expected[i];
      }
    }
    if (run == 0) first = got;
    EXPECT_EQ(got, first) << "a second launch gave other bits";
  }
}

TEST(EmulatedMatmulSimt, BiasGradRowSumsInAFixedOrder) {
  for (bool trans_a : {false, true}) {
    for (int64_t k : {0, 1, 31, 100, 257})
      check_row_sums(45, k, trans_a, DType::f32, DType::f32, 0, true);
    check_row_sums(70, 64, trans_a, DType::f32, DType::f32, 1.0f, true);  // accumulate
    check_row_sums(33, 50, trans_a, DType::f32, DType::bf16, 0.0f, true);
    // The tensor-core backend reuses the kernels with f16 / bf16 operands.
    check_row_sums(40, 77, trans_a, DType::f16, DType::f16, 0.0f, false);
    check_row_sums(40, 77, trans_a, DType::bf16, DType::f32, 1.0f, false);
    // Few rows over a long K (a classifier's bias over the batch): K split over blocks.
    check_row_sums(10, 3001, trans_a, DType::f32, DType::f32, 1.0f, false);
  }
  // The strided layout's 16-byte loads (lda a multiple of the vector, A aligned): whole vectors,
  // a last vector past row m (m = 45 of ld 48), several column blocks and K chunks, and the
  // element kernel where the vectors do not fit (misaligned, lda not a multiple), in one order.
  for (DType t : {DType::bf16, DType::f16, DType::f32}) {
    check_row_sums(520, 3001, true, t, DType::f32, 0.0f, false, 0);
    check_row_sums(45, 700, true, t, DType::f32, 1.0f, false, 3);
    check_row_sums(45, 700, true, t, DType::f32, 1.0f, false, 3, true);
    check_row_sums(64, 5, true, t, DType::bf16, 0.0f, false, 0);
    check_row_sums(100, 130, true, t, DType::f32, 0.0f, false, 1);
  }
  EXPECT_NO_THROW(ember::simt::check_guards());
}

TEST(EmulatedMatmulSimt, TileChoiceHeuristic) {
  using kn::SimtTileChoice;
  constexpr int kSms = 132;
  EXPECT_EQ(kn::choose_simt_tile(4096, 4096, 4096, 1, kSms), SimtTileChoice::t128x128);
  EXPECT_EQ(kn::choose_simt_tile(512, 512, 4096, 1, kSms), SimtTileChoice::t64x64);   // 16 blocks
  EXPECT_EQ(kn::choose_simt_tile(512, 512, 64, 16, kSms), SimtTileChoice::t128x128);  // batch
  EXPECT_EQ(kn::choose_simt_tile(100000, 8, 64, 1, kSms), SimtTileChoice::t128x32);
  EXPECT_EQ(kn::choose_simt_tile(3, 5000, 64, 1, kSms), SimtTileChoice::t32x128);
  EXPECT_EQ(kn::choose_simt_tile(1, 1, 1, 1, kSms), SimtTileChoice::t64x64);
}

}  // namespace
