// ops::bias_activation_forward / _backward on the CPU against the unfused ops they replace
// (bias_add into f32, then relu/gelu forward; relu/gelu backward, then column_sums): the same
// bits for every dtype mix and shape, the saved pre-activation, in-place use and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"
#include "ember/ops/elementwise.hpp"
#include "ember/ops/reduce.hpp"
#include "ops/ops_test_support.hpp"
#include "ops/unfused_bias_activation.hpp"
#include "test_support.hpp"

namespace {
using ember::testing::as_rows;
using ember::testing::expect_error;
using ember::testing::expect_same;
using ember::testing::kInf;
using ember::testing::kNan;
using ember::testing::random_floats;
using ember::testing::raw;
using ember::testing::unfused_forward;
using ember::testing::unfused_grad;
using ember::testing::values;

using ember::DType;
using ember::Shape;
using ember::Stream;
using ember::Tensor;
using ember::TensorView;
namespace ops = ember::ops;
using ops::Activation;

constexpr Activation kActivations[] = {Activation::none, Activation::relu, Activation::gelu};

// [0, 5] empty, [1, 1], odd rows and columns, a wide row past the 2048-element block (and
// 135k elements past the parallel threshold), and rank 3 (bias over the last dimension).
const std::vector<Shape> kShapes = {{0, 5}, {1, 1}, {7, 13}, {33, 4097}, {3, 5, 17}};

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

// Random values in [-4, 4) with special values sprinkled in (nan, +-inf, -0, large) so that
// their propagation is compared too.
Tensor random(const Shape& shape, uint32_t seed, DType dtype) {
  std::vector<float> v = random_floats(shape.numel(), seed);
  const float specials[] = {kNan, kInf, -kInf, -0.0f, 0.0f, 60000.0f, -60000.0f};
  for (size_t i = 0; i < v.size(); i += 37) v[i] = specials[(i / 37) % 7];
  return Tensor::from_vector(v, shape).to(dtype);
}

TEST(BiasActivation, ForwardEqualsUnfusedOpsBitwise) {
  Stream s;
  uint32_t seed = 1;
  for (const Shape& shape : kShapes) {
    for (const Mix& m : kMixes) {
      const Tensor x = random(shape, seed++, m.x);
      const Tensor bias = random(Shape{shape[-1]}, seed++, m.bias);
      for (const Activation act : kActivations) {
        const std::string what = shape.to_string() + " " + name(act);
        Tensor want_y = Tensor::zeros(shape, m.y), want_pre = Tensor::zeros(shape, m.pre);
        unfused_forward(s, want_y, want_pre, x, bias, act);
        // With the pre-activation saved (two outputs) and without (one).
        Tensor y = Tensor::zeros(shape, m.y), pre = Tensor::zeros(shape, m.pre);
        ops::bias_activation_forward(s, y, x, bias, act, pre);
        expect_same(y, want_y, act, what);
        EXPECT_EQ(raw(pre), raw(want_pre)) << what;
        Tensor y_only = Tensor::zeros(shape, m.y);
        ops::bias_activation_forward(s, y_only, x, bias, act);
        expect_same(y_only, want_y, act, what);
      }
    }
  }
}

TEST(BiasActivation, ForwardValuesByHand) {
  Stream s;
  const Tensor x = Tensor::from_vector(std::vector<float>{-1.0f, 2.0f, 0.5f, -3.0f}, Shape{2, 2});
  const Tensor bias = Tensor::from_vector(std::vector<float>{0.5f, -1.0f}, Shape{2});
  Tensor y = Tensor::zeros(Shape{2, 2}), pre = Tensor::zeros(Shape{2, 2}, DType::bf16);
  ops::bias_activation_forward(s, y, x, bias, Activation::relu, pre);
  EXPECT_EQ(values(pre), (std::vector<float>{-0.5f, 1.0f, 1.0f, -4.0f}));  // exact in bf16
  EXPECT_EQ(values(y), (std::vector<float>{0.0f, 1.0f, 1.0f, 0.0f}));
}

TEST(BiasActivation, InPlaceOutputIsTheInput) {
  Stream s;
  const Shape shape{9, 24};
  const Tensor bias = random(Shape{24}, 7, DType::f32);
  for (const Activation act : kActivations) {
    for (const DType dtype : ember::testing::kFloatTypes) {
      const Tensor x = random(shape, 8, dtype);
      Tensor want_y = Tensor::zeros(shape, dtype), want_pre = Tensor::zeros(shape, dtype);
      ops::bias_activation_forward(s, want_y, x, bias, act, want_pre);
      // y is x.
      Tensor y = x.clone();
      ops::bias_activation_forward(s, y, y, bias, act);
      expect_same(y, want_y, act, name(act));
      // pre is x, y separate.
      Tensor pre = x.clone(), y2 = Tensor::zeros(shape, dtype);
      ops::bias_activation_forward(s, y2, pre, bias, act, pre);
      expect_same(y2, want_y, act, name(act));
      EXPECT_EQ(raw(pre), raw(want_pre)) << name(act);
    }
  }
}

TEST(BiasActivation, BackwardEqualsUnfusedOpsBitwise) {
  Stream s;
  uint32_t seed = 100;
  for (const Shape& shape : kShapes) {
    const int64_t n = shape[-1];
    for (const Mix& m : kMixes) {
      const Tensor dy = random(shape, seed++, m.x);
      const Tensor pre = random(shape, seed++, m.pre);
      for (const Activation act : kActivations) {
        for (const bool accumulate : {false, true}) {
          const std::string what = shape.to_string() + " " + name(act);
          Tensor want_dx = Tensor::zeros(shape, m.y);
          unfused_grad(s, want_dx, dy, pre, act);
          const Tensor start = Tensor::from_vector(random_floats(n, seed++), Shape{n});
          Tensor want_db = start.clone();
          ops::column_sums(s, want_db, as_rows(want_dx), {.accumulate = accumulate});

          Tensor dx = Tensor::zeros(shape, m.y), db = start.clone();
          ops::bias_activation_backward(s, dx, db, dy, pre, act, {.accumulate = accumulate});
          EXPECT_EQ(raw(dx), raw(want_dx)) << what;
          EXPECT_EQ(raw(db), raw(want_db)) << what << " accumulate " << accumulate;
        }
      }
    }
  }
}

TEST(BiasActivation, BackwardWithoutBiasGradientOrPreActivation) {
  Stream s;
  const Shape shape{5, 3, 11};
  const Tensor dy = random(shape, 200, DType::bf16), pre = random(shape, 201, DType::f32);
  for (const Activation act : kActivations) {
    Tensor want = Tensor::zeros(shape, DType::f16), dx = Tensor::zeros(shape, DType::f16);
    unfused_grad(s, want, dy, pre, act);
    ops::bias_activation_backward(s, dx, {}, dy, pre, act);
    EXPECT_EQ(raw(dx), raw(want)) << name(act);
  }
  // none needs no pre-activation: dx = dy, and dbias the column sums of dy.
  Tensor dx = Tensor::zeros(shape), db = Tensor::zeros(Shape{11});
  ops::bias_activation_backward(s, dx, db, dy, {}, Activation::none);
  EXPECT_EQ(raw(dx), raw(dy.to(DType::f32)));  // bf16 widens exactly
  Tensor want_db = Tensor::zeros(Shape{11});
  ops::column_sums(s, want_db, as_rows(dx));
  EXPECT_EQ(raw(db), raw(want_db));
}

TEST(BiasActivation, BackwardByHandAndEmpty) {
  Stream s;
  const Tensor dy = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, Shape{3, 2});
  const Tensor pre = Tensor::from_vector(std::vector<float>{1, -1, 0, 2, kNan, 3}, Shape{3, 2});
  Tensor dx = Tensor::zeros(Shape{3, 2}), db = Tensor::full(Shape{2}, 10.0);
  ops::bias_activation_backward(s, dx, db, dy, pre, Activation::relu, {.accumulate = true});
  EXPECT_EQ(values(dx), (std::vector<float>{1, 0, 0, 4, 0, 6}));  // pre > 0 only (not nan, 0)
  EXPECT_EQ(values(db), (std::vector<float>{11, 20}));
  // No rows: dbias is zero (or left as it was when accumulating).
  const Tensor none = Tensor::empty(Shape{0, 2});
  Tensor empty_dx = Tensor::empty(Shape{0, 2});
  ops::bias_activation_backward(s, empty_dx, db, none, none, Activation::gelu);
  EXPECT_EQ(values(db), (std::vector<float>{0, 0}));
  db = Tensor::full(Shape{2}, 3.0);
  ops::bias_activation_backward(s, empty_dx, db, none, none, Activation::gelu,
                                {.accumulate = true});
  EXPECT_EQ(values(db), (std::vector<float>{3, 3}));
}

// ---- errors ----------------------------------------------------------------------------------

TEST(BiasActivation, WrongBiasIsRejected) {
  Stream s;
  const Tensor x = Tensor::zeros(Shape{4, 6});
  Tensor y = Tensor::zeros(Shape{4, 6});
  expect_error(
      [&] { ops::bias_activation_forward(s, y, x, Tensor::zeros(Shape{4}), Activation::relu); },
      {"ops::bias_activation_forward", "f32[4]", "f32[4, 6]"});
  expect_error(
      [&] {
        ops::bias_activation_forward(s, y, x, Tensor::zeros(Shape{1, 6}), Activation::gelu);
      },
      {"ops::bias_activation_forward", "rank 1"});
  expect_error(
      [&] {
        ops::bias_activation_forward(s, y, x, Tensor::zeros(Shape{6}, DType::i32),
                                     Activation::none);
      },
      {"ops::bias_activation_forward", "i32[6]"});
  // pre of the wrong shape.
  expect_error(
      [&] {
        ops::bias_activation_forward(s, y, x, Tensor::zeros(Shape{6}), Activation::relu,
                                     Tensor::zeros(Shape{6, 4}));
      },
      {"ops::bias_activation_forward", "f32[6, 4]"});
}

TEST(BiasActivation, MissingPreActivationIsRejected) {
  Stream s;
  const Tensor dy = Tensor::zeros(Shape{4, 6});
  Tensor dx = Tensor::zeros(Shape{4, 6}), db = Tensor::zeros(Shape{6});
  for (const Activation act : {Activation::relu, Activation::gelu}) {
    expect_error([&] { ops::bias_activation_backward(s, dx, db, dy, {}, act); },
                 {"ops::bias_activation_backward", "needs pre", "absent"});
  }
}

TEST(BiasActivation, WrongBiasGradientIsRejectedBeforeAnyWork) {
  Stream s;
  const Tensor dy = Tensor::full(Shape{4, 6}, 1.0), pre = Tensor::full(Shape{4, 6}, 1.0);
  Tensor dx = Tensor::zeros(Shape{4, 6});
  expect_error(
      [&] {
        ops::bias_activation_backward(s, dx, Tensor::zeros(Shape{4}), dy, pre, Activation::relu);
      },
      {"ops::bias_activation_backward", "dbias must be [6]", "f32[4]"});
  expect_error(
      [&] {
        ops::bias_activation_backward(s, dx, Tensor::zeros(Shape{6}, DType::f16), dy, pre,
                                      Activation::relu);
      },
      {"ops::bias_activation_backward", "dbias", "f16[6]"});
  EXPECT_EQ(values(dx), std::vector<float>(24, 0.0f));  // untouched
}

TEST(BiasActivation, OverlapIsRejected) {
  Stream s;
  Tensor buf = Tensor::zeros(Shape{5, 4});
  const Tensor x = buf.slice(0, 4), shifted = buf.slice(1, 5);
  const Tensor bias = Tensor::zeros(Shape{4});
  Tensor y = Tensor::zeros(Shape{4, 4});
  // Outputs partly over the input.
  expect_error([&] { ops::bias_activation_forward(s, shifted, x, bias, Activation::relu); },
               {"ops::bias_activation_forward", "overlaps"});
  expect_error([&] { ops::bias_activation_forward(s, y, x, bias, Activation::relu, shifted); },
               {"ops::bias_activation_forward", "overlaps"});
  // y and pre the same memory: two outputs never share it.
  expect_error([&] { ops::bias_activation_forward(s, y, x, bias, Activation::gelu, y); },
               {"ops::bias_activation_forward", "separate"});
  // Backward: dx partly over dy or pre; dbias inside dx.
  Tensor other = Tensor::zeros(Shape{4, 4});
  expect_error([&] { ops::bias_activation_backward(s, shifted, {}, x, other, Activation::relu); },
               {"ops::bias_activation_backward", "overlaps"});
  expect_error([&] { ops::bias_activation_backward(s, shifted, {}, other, x, Activation::relu); },
               {"ops::bias_activation_backward", "overlaps"});
  const TensorView row_of_y = y.view().reshape(Shape{16}).slice(0, 4);
  expect_error(
      [&] { ops::bias_activation_backward(s, y, row_of_y, other, other, Activation::relu); },
      {"ops::bias_activation_backward", "separate"});
}

}  // namespace
