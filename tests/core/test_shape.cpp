#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ember/core/error.hpp"
#include "ember/core/shape.hpp"
#include "test_support.hpp"

namespace {

using ember::testing::error_message;

using ember::Shape;

TEST(Shape, ScalarHasRankZeroAndOneElement) {
  const Shape s;
  EXPECT_EQ(s.rank(), 0);
  EXPECT_EQ(s.numel(), 1);
  EXPECT_EQ(s.row_numel(), 1);
  EXPECT_TRUE(s.dims().empty());
  EXPECT_EQ(s.to_string(), "[]");
  EXPECT_EQ(s, Shape({}));
}

TEST(Shape, DimsNumelAndAxes) {
  const Shape s{2, 3, 4};
  EXPECT_EQ(s.rank(), 3);
  EXPECT_EQ(s.numel(), 24);
  EXPECT_EQ(s.row_numel(), 12);
  EXPECT_EQ(s[0], 2);
  EXPECT_EQ(s[2], 4);
  EXPECT_EQ(s[-1], 4);
  EXPECT_EQ(s[-3], 2);
  EXPECT_EQ(s.to_string(), "[2, 3, 4]");
  EXPECT_EQ(Shape{7}.to_string(), "[7]");
  EXPECT_EQ(std::vector<int64_t>(s.dims().begin(), s.dims().end()),
            (std::vector<int64_t>{2, 3, 4}));
}

TEST(Shape, ZeroExtentsHaveNoElements) {
  EXPECT_EQ((Shape{0}).numel(), 0);
  EXPECT_EQ((Shape{5, 0, 3}).numel(), 0);
  EXPECT_EQ((Shape{0, 3}).row_numel(), 3);
}

TEST(Shape, SpanConstructorAndEquality) {
  const std::vector<int64_t> dims{4, 1, 2};
  EXPECT_EQ(Shape(std::span<const int64_t>(dims)), (Shape{4, 1, 2}));
  EXPECT_FALSE((Shape{4, 1, 2}) == (Shape{4, 2, 1}));
  EXPECT_FALSE((Shape{4}) == (Shape{4, 1}));
  const std::vector<int64_t> six(6, 2);
  EXPECT_EQ(Shape(std::span<const int64_t>(six)).numel(), 64);
}

TEST(Shape, RejectsNegativeDims) {
  const std::string message = error_message([] { Shape s{2, -1}; });
  EXPECT_NE(message.find("dimension 1 is negative (-1)"), std::string::npos) << message;
  EXPECT_THROW((Shape{-3}), ember::Error);
}

TEST(Shape, RejectsTooManyDims) {
  const std::vector<int64_t> seven(7, 1);
  const std::string message = error_message([&] { Shape s{std::span<const int64_t>(seven)}; });
  EXPECT_NE(message.find("rank 7 exceeds the maximum of 6"), std::string::npos) << message;
}

TEST(Shape, AxisOutOfRange) {
  const Shape s{2, 3};
  for (int axis : {2, 3, -3, -100}) {
    const std::string message = error_message([&] { (void)s[axis]; });
    EXPECT_NE(message.find("axis " + std::to_string(axis) + " is out of range"), std::string::npos)
        << message;
    EXPECT_NE(message.find("[2, 3]"), std::string::npos) << message;
  }
  EXPECT_THROW((void)Shape()[0], ember::Error);
}

TEST(Shape, WithDim0) {
  EXPECT_EQ((Shape{4, 5}).with_dim0(9), (Shape{9, 5}));
  EXPECT_EQ((Shape{4}).with_dim0(0), (Shape{0}));
  EXPECT_THROW((void)Shape().with_dim0(1), ember::Error);
  EXPECT_THROW((void)(Shape{4}).with_dim0(-1), ember::Error);
}

}  // namespace
