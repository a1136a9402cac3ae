// ops::sum cases that hold on every device (device_cases.hpp): accumulate, the empty sum, and
// inf and nan propagation.
#include <cmath>
#include <vector>

#include "ember/ops/reduce.hpp"
#include "ops/device_cases.hpp"
#include "ops/ops_test_support.hpp"

namespace {

using ember::DType;
using ember::Shape;
using ember::Tensor;
using ember::testing::kInf;
using ember::testing::kNan;
namespace ops = ember::ops;

class Sum : public ember::testing::OnDevice {};

TEST_P(Sum, AccumulatesAndTheEmptySumIsZero) {
  ember::Stream s = stream();
  const Tensor x = on(Tensor::from_vector<float>({1.0f, 2.0f, 3.5f}, {3}).to(DType::bf16));
  Tensor out = on(Tensor::full(Shape{1, 1}, 10.0));
  ops::sum(s, out, x, {.accumulate = true});
  EXPECT_EQ(out.item(), 16.5);
  ops::sum(s, out, x);
  EXPECT_EQ(out.item(), 6.5);
  const Tensor empty = on(Tensor::empty(Shape{0, 4}, DType::f16));
  ops::sum(s, out, empty);
  EXPECT_EQ(out.item(), 0.0);
  Tensor negative_zero = on(Tensor::full(Shape{1}, -0.0));
  ops::sum(s, negative_zero, empty, {.accumulate = true});
  EXPECT_TRUE(std::signbit(negative_zero.item())) << "accumulating nothing changed out";
  out.fill_(3.25);
  ops::sum(s, out, empty, {.accumulate = true});
  EXPECT_EQ(out.item(), 3.25);
}

TEST_P(Sum, PropagatesInfAndNan) {
  ember::Stream s = stream();
  Tensor out = on(Tensor::zeros(Shape{1}));
  ops::sum(s, out, on(Tensor::from_vector<float>({1.0f, kInf, 2.0f}, {3})));
  EXPECT_EQ(out.item(), kInf);
  ops::sum(s, out, on(Tensor::from_vector<float>({1.0f, kInf, -kInf}, {3})));
  EXPECT_TRUE(std::isnan(out.item()));
  ops::sum(s, out, on(Tensor::from_vector<float>({1.0f, kNan, 2.0f}, {3}).to(DType::f16)));
  EXPECT_TRUE(std::isnan(out.item()));
}

INSTANTIATE_EMBER_DEVICES(Sum);

}  // namespace
