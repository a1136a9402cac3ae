// The unfused ops that ops::bias_activation_forward / _backward replace, and the bitwise
// comparison with them, shared by the CPU and the emulated CUDA tests.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"
#include "ember/ops/activation.hpp"
#include "ember/ops/elementwise.hpp"
#include "ops/ops_test_support.hpp"

namespace ember::testing {

// t = bias_add(x, bias) in f32 on the stream's device, y = act(t), pre = t rounded to its dtype.
inline void unfused_forward(Stream& s, const Tensor& y, const Tensor& pre, const Tensor& x,
                            const Tensor& bias, ops::Activation act) {
  const Tensor t = Tensor::zeros(x.shape(), DType::f32, s.device());
  ops::bias_add(s, t, x, bias);
  if (act == ops::Activation::relu) ops::relu_forward(s, y, t);
  if (act == ops::Activation::gelu) ops::gelu_forward(s, y, t);
  if (act == ops::Activation::none) ops::cast(s, y, t);
  ops::cast(s, pre, t);
}

// dx = dy * act'(pre) as the unfused ops compute it.
inline void unfused_grad(Stream& s, const Tensor& dx, const Tensor& dy, const Tensor& pre,
                         ops::Activation act) {
  if (act == ops::Activation::relu) ops::relu_backward(s, dx, dy, pre);
  if (act == ops::Activation::gelu) ops::gelu_backward(s, dx, dy, pre);
  if (act == ops::Activation::none) ops::cast(s, dx, dy);
}

// A tensor of any rank as [rows, last dimension], the layout the bias gradient sums over.
inline TensorView as_rows(const Tensor& t) {
  const int64_t cols = t.shape()[-1];
  return t.view().reshape(Shape{cols == 0 ? 0 : t.numel() / cols, cols});
}

// got == want bit for bit, except that GELU's nan results may differ in sign. On the host (the
// CPU backend, and the emulator's kernels, which are g++ code) which nan operand an SSE/AVX
// multiply passes on depends on the operand order the compiler picks for each loop, and GELU's
// sigmoid negates its input. (A real GPU gives the one canonical nan.) Every other value, inf
// and -0 included, must match.
inline void expect_same(const Tensor& got, const Tensor& want, ops::Activation act,
                        const std::string& what) {
  if (act != ops::Activation::gelu) {
    EXPECT_EQ(raw(got), raw(want)) << what;
    return;
  }
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

}  // namespace ember::testing
