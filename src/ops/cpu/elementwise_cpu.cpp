// CPU pointwise ops. Every op is an f32 kernel over one block of elements; map_unary/map_binary
// feed it blocks in parallel, pointing straight at f32 operands and converting 16-bit ones
// through stack buffers. Blocks are independent, so results do not depend on the thread count.
#include <algorithm>
#include <vector>

#include "cpu_ops.hpp"

namespace ember::ops::cpu {
namespace {

// kernel(out, x, n): out[i] = f(x[i]) for i < n; out may be x.
template <class Kernel>
void map_unary(const TensorView& out, const TensorView& x, Kernel kernel) {
  const int64_t n = out.numel();
  const int64_t blocks = ceil_div(n, kBlock);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t block = 0; block < blocks; ++block) {
    const int64_t begin = block * kBlock;
    const int64_t count = std::min(kBlock, n - begin);
    float x_buffer[kBlock], out_buffer[kBlock];
    const float* px = load_f32(x.data, x.dtype, begin, count, x_buffer);
    float* po = result_f32(out.data, out.dtype, begin, out_buffer);
    kernel(po, px, count);
    store_f32(out.data, out.dtype, begin, count, po);
  }
}

// kernel(out, a, b, n): out[i] = f(a[i], b[i]) for i < n; out may be a or b.
template <class Kernel>
void map_binary(const TensorView& out, const TensorView& a, const TensorView& b, Kernel kernel) {
  const int64_t n = out.numel();
  const int64_t blocks = ceil_div(n, kBlock);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t block = 0; block < blocks; ++block) {
    const int64_t begin = block * kBlock;
    const int64_t count = std::min(kBlock, n - begin);
    float a_buffer[kBlock], b_buffer[kBlock], out_buffer[kBlock];
    const float* pa = load_f32(a.data, a.dtype, begin, count, a_buffer);
    const float* pb = load_f32(b.data, b.dtype, begin, count, b_buffer);
    float* po = result_f32(out.data, out.dtype, begin, out_buffer);
    kernel(po, pa, pb, count);
    store_f32(out.data, out.dtype, begin, count, po);
  }
}

// The kernels use `omp simd` rather than __restrict: out may be exactly an input, which is fine
// for lock-step SIMD lanes (each reads element i before writing element i) but would break a
// no-alias promise.

constexpr float kGeluC = 0.044715f;
constexpr float kGeluTwoK = 1.5957691216057308f;  // 2 sqrt(2 / pi)

// GELU(x) = 0.5 x (1 + tanh(u)) with u = k (x + c x^3). Since 1 + tanh(u) = 2 sigmoid(2u), this
// is x * s with s = 1 / (1 + e^-z), z = 2u: the same function without the cancellation in
// 1 + tanh(u) for negative x, and one exp instead of tanh (exp_f32 vectorizes).
EMBER_CPU_CLONES void gelu_kernel(float* o, const float* v, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float xi = v[i];
    const float z = kGeluTwoK * xi * (1.0f + kGeluC * xi * xi);
    const float s = 1.0f / (1.0f + exp_f32(-z));
    // s == 0 only for z far below 0, where GELU is -0; this also gives GELU(-inf) = -0 instead
    // of -inf * 0 = nan.
    o[i] = select(s == 0.0f, -0.0f, xi * s);
  }
}

// d/dx [x s(z)] = s + x s (1 - s) dz/dx, with s (1 - s) = e s^2 (e = e^-z, accurate for z of
// either sign) and dz/dx = 2k (1 + 3c x^2).
EMBER_CPU_CLONES void gelu_grad_kernel(float* o, const float* g, const float* v, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float xi = v[i];
    const float x2 = xi * xi;
    const float z = kGeluTwoK * xi * (1.0f + kGeluC * x2);
    const float e = exp_f32(-z);
    const float s = 1.0f / (1.0f + e);
    const float dz = kGeluTwoK * (1.0f + 3.0f * kGeluC * x2);
    // Saturated (e == 0: s = 1; s == 0: e = inf): the second term is 0, but computing it could
    // give inf * 0. (e * s) = 1 - s <= 1 comes first: x * e alone overflows when s is subnormal.
    const bool saturated = (e == 0.0f) | (s == 0.0f);
    o[i] = g[i] * select(saturated, s, s + xi * dz * ((e * s) * s));
  }
}

}  // namespace

EMBER_CPU_CLONES void f16_to_f32(const half* in, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = half_to_f32(in[i]);
}

EMBER_CPU_CLONES void bf16_to_f32(const bfloat16* in, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(in[i]);
}

EMBER_CPU_CLONES void f32_to_f16(const float* in, int64_t n, half* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_half(in[i]);
}

EMBER_CPU_CLONES void f32_to_bf16(const float* in, int64_t n, bfloat16* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = bfloat16(in[i]);
}

void add(const TensorView& out, const TensorView& a, const TensorView& b) {
  map_binary(out, a, b, [](float* o, const float* x, const float* y, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
  });
}

void mul(const TensorView& out, const TensorView& a, const TensorView& b) {
  map_binary(out, a, b, [](float* o, const float* x, const float* y, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) o[i] = x[i] * y[i];
  });
}

void scale(const TensorView& out, const TensorView& x, float alpha) {
  map_unary(out, x, [alpha](float* o, const float* v, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) o[i] = alpha * v[i];
  });
}

void bias_add(const TensorView& out, const TensorView& x, const TensorView& bias) {
  const int64_t cols = bias.numel();
  if (cols == 0 || x.numel() == 0) return;
  const int64_t rows = x.numel() / cols;
  std::vector<float> bias_buffer(bias.dtype == DType::f32 ? 0 : static_cast<size_t>(cols));
  const float* pbias = load_f32(bias.data, bias.dtype, 0, cols, bias_buffer.data());
  // Parallel over (row, column block) pairs, so both tall and wide matrices spread over threads.
  const int64_t col_blocks = ceil_div(cols, kBlock);
  const int64_t items = rows * col_blocks;
#pragma omp parallel for schedule(static) if (x.numel() >= kParallelMin)
  for (int64_t item = 0; item < items; ++item) {
    const int64_t c0 = (item % col_blocks) * kBlock;
    const int64_t count = std::min(kBlock, cols - c0);
    const int64_t begin = (item / col_blocks) * cols + c0;
    float x_buffer[kBlock], out_buffer[kBlock];
    const float* px = load_f32(x.data, x.dtype, begin, count, x_buffer);
    float* po = result_f32(out.data, out.dtype, begin, out_buffer);
    const float* pb = pbias + c0;
#pragma omp simd
    for (int64_t j = 0; j < count; ++j) po[j] = px[j] + pb[j];
    store_f32(out.data, out.dtype, begin, count, po);
  }
}

void relu_forward(const TensorView& y, const TensorView& x) {
  map_unary(y, x, [](float* o, const float* v, int64_t n) {
  // `v < 0 ? 0 : v` rather than `v > 0 ? v : 0`: nan propagates (as in PyTorch).
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) o[i] = v[i] < 0.0f ? 0.0f : v[i];
  });
}

void relu_backward(const TensorView& dx, const TensorView& dy, const TensorView& x) {
  map_binary(dx, dy, x, [](float* o, const float* g, const float* v, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) o[i] = select(v[i] > 0.0f, g[i], 0.0f);
  });
}

void gelu_forward(const TensorView& y, const TensorView& x) {
  map_unary(y, x, gelu_kernel);
}

void gelu_backward(const TensorView& dx, const TensorView& dy, const TensorView& x) {
  map_binary(dx, dy, x, gelu_grad_kernel);
}

void cast(const TensorView& out, const TensorView& in) {
  const int64_t n = in.numel();
  if (n == 0) return;
  if (out.data == in.data && out.dtype != in.dtype) {
    // In-place between dtypes of one size (f32 <-> i32, f16 <-> bf16): convert through a copy,
    // since convert_host reads and writes through pointers of different types.
    std::vector<unsigned char> copy(in.nbytes());
    copy_bytes(copy.data(), Device::cpu(), in.data, Device::cpu(), in.nbytes());
    convert_host(out.data, out.dtype, copy.data(), in.dtype, n);
    return;
  }
  convert_host(out.data, out.dtype, in.data, in.dtype, n);
}

}  // namespace ember::ops::cpu
