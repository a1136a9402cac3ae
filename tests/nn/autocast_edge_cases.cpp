// Autocast edge cases found by outside testing (on every test device): odd shapes, empty
// batches, f16 inputs under bf16, more ways of writing a weight, wrong devices.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "ember/amp/grad_scaler.hpp"
#include "ember/nn/activation.hpp"
#include "ember/nn/layer_norm.hpp"
#include "ember/nn/linear.hpp"
#include "ember/nn/loss.hpp"
#include "ember/ops/elementwise.hpp"
#include "ember/ops/matmul.hpp"
#include "ember/train/adamw.hpp"
#include "ember/train/sgd.hpp"
#include "ops/device_cases.hpp"
#include "test_support.hpp"

namespace ember::testing {
namespace {

class AutocastEdges : public OnDevice {
 protected:
  // Reference: x, W and b rounded to dtype, f32 accumulation + bias, rounded once to dtype.
  std::vector<float> reference(nn::Linear& layer, const Tensor& x, DType dtype,
                               ops::Activation act = ops::Activation::none) {
    Stream s = stream();
    Tensor xc = x.to(dtype), w = layer.weight().value.to(dtype), b = layer.bias().value.to(dtype);
    Tensor y = Tensor::empty({x.shape()[0], layer.out_features()}, dtype, s);
    ops::MatmulOptions o;
    o.transpose_b = true;
    o.bias = b;
    o.activation = act;
    ops::matmul(s, y, xc, w, o);
    return y.to(DType::f32).to_vector<float>();
  }
  std::vector<float> fwd(nn::Linear& layer, const Tensor& x, nn::Precision p) {
    Stream s = stream();
    nn::Context ctx{s, false, p};
    return layer.forward(ctx, x).to(DType::f32).to_vector<float>();
  }
};

TEST_P(AutocastEdges, OddShapesMatchTheReference) {
  for (nn::Precision p : {nn::Precision::bf16, nn::Precision::f16}) {
    const DType dt = nn::compute_dtype(p);
    for (auto [m, k, n] : std::vector<std::array<int64_t, 3>>{
             {1, 1, 1}, {3, 5, 7}, {13, 37, 19}, {17, 64, 33}, {9, 130, 3}, {65, 8, 16}}) {
      nn::Linear layer(k, n, {.seed = 3, .device = device()});
      const Tensor x = on(Tensor::empty({m, k}).uniform_(5, -2.0, 2.0));
      EXPECT_EQ(fwd(layer, x, p), reference(layer, x, dt))
          << nn::precision_name(p) << " " << m << "x" << k << "x" << n;
    }
  }
}

TEST_P(AutocastEdges, EmptyBatch) {
  for (nn::Precision p : {nn::Precision::bf16, nn::Precision::f16, nn::Precision::f32}) {
    nn::Linear layer(4, 3, {.seed = 3, .device = device()});
    Stream s = stream();
    nn::Context ctx{s, true, p};
    const Tensor x = on(Tensor::zeros({0, 4}));
    try {
      const Tensor y = layer.forward(ctx, x);
      EXPECT_EQ(y.shape(), Shape({0, 3}));
      const Tensor dx = layer.backward(ctx, Tensor::zeros({0, 3}, DType::f32, s));
      EXPECT_EQ(dx.shape(), Shape({0, 4}));
      EXPECT_EQ(dx.dtype(), DType::f32);
      for (float v : layer.weight().grad.to_vector<float>()) EXPECT_EQ(v, 0.0f);
      for (float v : layer.bias().grad.to_vector<float>()) EXPECT_EQ(v, 0.0f);
    } catch (const Error& e) {
      ADD_FAILURE() << nn::precision_name(p) << " empty batch: " << e.message();
    }
  }
}

TEST_P(AutocastEdges, F16InputUnderBf16AndDtypes) {
  nn::Linear layer(5, 3, {.seed = 3, .device = device()});
  Stream s = stream();
  nn::Context ctx{s, true, nn::Precision::bf16};
  const Tensor x32 = on(Tensor::empty({4, 5}).uniform_(5, -2.0, 2.0));
  const Tensor x = x32.to(DType::f16);
  const Tensor y = layer.forward(ctx, x);
  EXPECT_EQ(y.dtype(), DType::bf16);
  EXPECT_EQ(y.to(DType::f32).to_vector<float>(), reference(layer, x.to(DType::f32), DType::bf16));
  const Tensor dx = layer.backward(ctx, Tensor::full({4, 3}, 1.0, DType::f16, s));
  EXPECT_EQ(dx.dtype(), DType::f16);
  // Integer input under autocast: an Error.
  expect_error([&] { layer.forward(ctx, on(Tensor::zeros({4, 5}, DType::i32))); }, "input");
  // Integer dy.
  layer.forward(ctx, x32);
  expect_error([&] { layer.backward(ctx, Tensor::zeros({4, 3}, DType::i32, s)); }, "float");
  layer.drop_saved();
}

// More ways to write the master weight.
TEST_P(AutocastEdges, MoreWritersNeverLeaveAStaleCopy) {
  nn::Linear layer(4, 2, {.seed = 9, .device = device()});
  nn::Parameter& w = layer.weight();
  const Tensor x = on(Tensor::from_vector<float>({1.0f, 2.0f, -1.0f, 0.5f}, {1, 4}));
  Stream s = stream();
  Tensor src = on(Tensor::full({2, 4}, 0.375, DType::f32));
  train::AdamW adamw(layer.parameters(), {.lr = 0.5f});
  amp::GradScaler scaler(device());
  const std::vector<std::pair<std::string, std::function<void()>>> writers{
      {"matmul into it",
       [&] {
         Tensor a = on(Tensor::full({2, 3}, 0.5, DType::f32));
         Tensor b = on(Tensor::full({3, 4}, 0.25, DType::f32));
         ops::matmul(s, w.value, a, b);
       }},
      {"cast into it", [&] { ops::cast(s, w.value, src.to(DType::bf16)); }},
      {"copy_ from a TensorView", [&] { w.value.copy_(src.view()); }},
      {"write through to(device) alias",
       [&] {
         Tensor alias = w.value.to(device());
         alias.fill_(-1.25);
       }},
      {"write through a reshape", [&] { w.value.reshape({8}).fill_(0.125); }},
      {"write through a view's slice",
       [&] { ops::scale(s, w.value.view().slice(0, 1), w.value.view().slice(0, 1), 4.0f); }},
      {"a value replaced by another tensor",
       [&] {
         w.value = on(Tensor::full({2, 4}, 1.5, DType::f32));
       }},
      {"a value replaced by another tensor, same version source",
       [&] {
         w.value = w.value.clone();
         ops::scale(s, w.value, w.value, 2.0f);
       }},
      {"AdamW step via scaler (finite)",
       [&] {
         w.grad.fill_(65536.0);
         layer.bias().grad.fill_(0.0);
         scaler.step(s, adamw);
         scaler.update(s);
       }},
      {"AdamW step via scaler (inf: skipped)",
       [&] {
         w.grad.fill_(INFINITY);
         scaler.step(s, adamw);
         scaler.update(s);
       }},
      {"residual_add", [&] { ops::residual_add(s, w.value, w.value, src, 1.0f); }},
      {"load_state_dict from device",
       [&] {
         StateDict st;
         st.insert("weight", on(Tensor::full({2, 4}, -0.75, DType::f32)));
         st.insert("bias", on(Tensor::full({2}, 0.5, DType::f32)));
         layer.load_state_dict(st);
       }},
  };
  for (nn::Precision p : {nn::Precision::bf16, nn::Precision::f16}) {
    for (const auto& [what, write] : writers) {
      fwd(layer, x, p);
      write();
      EXPECT_EQ(fwd(layer, x, p), reference(layer, x, nn::compute_dtype(p)))
          << "stale working copy after " << what << " (" << nn::precision_name(p) << ")";
    }
  }
}

// Switching precision back and forth and training: gradients of f16 and bf16 are f32.
TEST_P(AutocastEdges, ActivationLinearUnderAutocastBackward) {
  for (auto act : {ops::Activation::relu, ops::Activation::gelu}) {
    for (nn::Precision p : {nn::Precision::bf16, nn::Precision::f16}) {
      nn::Linear layer(6, 5, {.seed = 2, .device = device(), .activation = act});
      nn::Linear ref(6, 5, {.seed = 2, .device = device(), .activation = act});
      Stream s = stream();
      const Tensor x = on(Tensor::empty({7, 6}).uniform_(1, -1.0, 1.0));
      nn::Context c16{s, true, p};
      nn::Context c32{s, true, nn::Precision::f32};
      const Tensor y = layer.forward(c16, x);
      EXPECT_EQ(y.dtype(), nn::compute_dtype(p));
      EXPECT_EQ(y.to(DType::f32).to_vector<float>(),
                reference(layer, x, nn::compute_dtype(p), act));
      ref.forward(c32, x);
      const Tensor dy = on(Tensor::empty({7, 5}).uniform_(2, -1.0, 1.0));
      const Tensor dx = layer.backward(c16, dy);
      const Tensor dx32 = ref.backward(c32, dy);
      EXPECT_EQ(dx.dtype(), DType::f32);
      const auto g = layer.weight().grad.to_vector<float>();
      const auto g32 = ref.weight().grad.to_vector<float>();
      for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], g32[i], 0.05) << i;
      const auto gb = layer.bias().grad.to_vector<float>();
      const auto gb32 = ref.bias().grad.to_vector<float>();
      for (size_t i = 0; i < gb.size(); ++i) EXPECT_NEAR(gb[i], gb32[i], 0.05) << i;
    }
  }
}

// A LayerNorm with compute_dtype_output feeding a Linear (a pre-norm block's pair): under bf16
// and f16 its output is in the compute dtype, and the Linear's output, every gradient and the
// input gradient are bitwise those of a LayerNorm writing f32 that the Linear casts; under f32
// the option changes nothing.
TEST_P(AutocastEdges, LayerNormComputeDtypeOutputGivesTheSameNumbers) {
  const Tensor x = on(Tensor::empty({13, 40}).uniform_(61, -2.0, 2.0));
  const Tensor dy = on(Tensor::empty({13, 24}).uniform_(62, -1.0, 1.0));
  struct Run {
    DType norm_dtype;
    std::vector<float> y, dx, grads;
  };
  const auto run = [&](nn::Precision p, bool option) {
    nn::LayerNorm norm(40, {.device = device(), .compute_dtype_output = option});
    nn::Linear layer(40, 24, {.seed = 7, .device = device()});
    norm.weight().value.uniform_(63, 0.5, 1.5);
    norm.bias().value.uniform_(64, -0.5, 0.5);
    Stream s = stream();
    nn::Context ctx{s, true, p};
    const Tensor h = norm.forward(ctx, x);
    const Tensor y = layer.forward(ctx, h);
    const Tensor dx = norm.backward(ctx, layer.backward(ctx, dy.to(y.dtype())));
    Run r{h.dtype(), y.to(DType::f32).to_vector<float>(), dx.to(DType::f32).to_vector<float>(), {}};
    EXPECT_EQ(dx.dtype(), DType::f32);
    for (nn::Parameter* q : {&norm.weight(), &norm.bias(), &layer.weight(), &layer.bias()}) {
      const std::vector<float> g = q->grad.to_vector<float>();
      r.grads.insert(r.grads.end(), g.begin(), g.end());
    }
    return r;
  };
  for (nn::Precision p : {nn::Precision::bf16, nn::Precision::f16, nn::Precision::f32}) {
    SCOPED_TRACE(nn::precision_name(p));
    const Run with = run(p, true), without = run(p, false);
    EXPECT_EQ(with.norm_dtype, nn::compute_dtype(p));
    EXPECT_EQ(without.norm_dtype, DType::f32);
    EXPECT_TRUE(same_bits(with.y, without.y));
    EXPECT_TRUE(same_bits(with.dx, without.dx));
    EXPECT_TRUE(same_bits(with.grads, without.grads));
  }
}

INSTANTIATE_EMBER_DEVICES(AutocastEdges);

}  // namespace
}  // namespace ember::testing
