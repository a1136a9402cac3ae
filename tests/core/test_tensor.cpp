#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "ember/core/tensor.hpp"
#include "test_support.hpp"

namespace {

using ember::testing::error_message;

using ember::testing::OmpThreads;

using ember::bfloat16;
using ember::DType;
using ember::half;
using ember::Shape;
using ember::Tensor;
using ember::TensorView;

constexpr DType kAllDTypes[] = {DType::f32, DType::f16, DType::bf16,
                                DType::i32, DType::i64, DType::u8};

// The elements of any tensor, as doubles.
std::vector<double> values_of(const Tensor& t) {
  return ember::visit_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    std::vector<double> out;
    for (const T& v : t.to_vector<T>()) {
      if constexpr (std::is_arithmetic_v<T>) {
        out.push_back(static_cast<double>(v));
      } else {
        out.push_back(static_cast<double>(static_cast<float>(v)));
      }
    }
    return out;
  });
}

std::vector<uint32_t> bits_of(const Tensor& t) {
  std::vector<uint32_t> out;
  for (float v : t.to_vector<float>()) out.push_back(std::bit_cast<uint32_t>(v));
  return out;
}

TEST(TensorCreate, EmptyHasShapeDtypeDeviceAndAlignedStorage) {
  const Tensor t = Tensor::empty({2, 3}, DType::f16);
  EXPECT_TRUE(t.defined());
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(t.dtype(), DType::f16);
  EXPECT_EQ(t.device(), ember::Device::cpu());
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t.nbytes(), 12u);
  EXPECT_EQ(t.rank(), 2);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 64, 0u);
  EXPECT_EQ(t.view().describe(), "f16[2, 3] on cpu");
  EXPECT_FALSE(Tensor().defined());
}

TEST(TensorCreate, ZerosAndFullForEveryDtype) {
  for (DType d : kAllDTypes) {
    const Tensor z = Tensor::zeros({4, 2}, d);
    EXPECT_EQ(z.dtype(), d);
    EXPECT_EQ(values_of(z), std::vector<double>(8, 0.0)) << ember::dtype_name(d);
    const Tensor f = Tensor::full({3}, 7.0, d);
    EXPECT_EQ(values_of(f), std::vector<double>(3, 7.0)) << ember::dtype_name(d);
  }
}

TEST(TensorCreate, FromVectorAndToVector) {
  const std::vector<int32_t> values{1, -2, 3, -4, 5, -6};
  const Tensor t = Tensor::from_vector(values, {2, 3});
  EXPECT_EQ(t.dtype(), DType::i32);
  EXPECT_EQ(t.to_vector<int32_t>(), values);
  const std::string message = error_message([&] { Tensor::from_vector(values, {4, 2}); });
  EXPECT_NE(message.find("6 values do not fill shape [4, 2] (8 elements)"), std::string::npos)
      << message;
  const std::string wrong_type = error_message([&] { t.to_vector<float>(); });
  EXPECT_NE(wrong_type.find("tensor holds i32, not f32"), std::string::npos) << wrong_type;
}

TEST(TensorView, AsWithTheWrongTypeThrows) {
  const Tensor t = Tensor::zeros({2}, DType::bf16);
  EXPECT_EQ(t.view().as<bfloat16>(), t.data());
  const std::string message = error_message([&] { (void)t.view().as<half>(); });
  EXPECT_NE(message.find("holds bf16 elements, not f16"), std::string::npos) << message;
  EXPECT_THROW((void)t.data<float>(), ember::Error);
  EXPECT_THROW((void)t.data<uint8_t>(), ember::Error);
}

TEST(TensorView, ViewsOfUserMemory) {
  std::vector<float> mine{1, 2, 3, 4, 5, 6};
  const TensorView v{mine.data(), DType::f32, Shape{3, 2}, ember::Device::cpu()};
  const TensorView rows = v.slice(1, 3);
  EXPECT_EQ(rows.as<float>()[0], 3.0f);
  EXPECT_EQ(rows.shape, (Shape{2, 2}));
  EXPECT_EQ(v.reshape({6}).as<float>(), mine.data());
  Tensor copy = Tensor::empty({3, 2});
  copy.copy_(v);
  EXPECT_EQ(copy.to_vector<float>(), mine);
}

TEST(TensorSlice, SharesStorageWithTheParent) {
  std::vector<float> values(12);
  for (int i = 0; i < 12; ++i) values[static_cast<size_t>(i)] = static_cast<float>(i);
  const Tensor parent = Tensor::from_vector(values, {4, 3});
  Tensor rows = parent.slice(1, 3);
  EXPECT_EQ(rows.shape(), (Shape{2, 3}));
  EXPECT_EQ(rows.to_vector<float>(), (std::vector<float>{3, 4, 5, 6, 7, 8}));
  rows.data<float>()[0] = 100.0f;  // write through the slice...
  rows.slice(1, 2).fill_(-1.0);
  const std::vector<float> seen = parent.to_vector<float>();  // ...and read through the parent
  EXPECT_EQ(seen, (std::vector<float>{0, 1, 2, 100, 4, 5, -1, -1, -1, 9, 10, 11}));
  EXPECT_EQ(parent.slice(4, 4).numel(), 0);
  EXPECT_EQ(parent.slice(0, 4).data(), parent.data());
}

TEST(TensorSlice, OutOfRangeThrows) {
  const Tensor t = Tensor::zeros({4, 3});
  for (auto [begin, end] : {std::pair{-1, 2}, std::pair{3, 2}, std::pair{0, 5}}) {
    const std::string message = error_message([&] { (void)t.slice(begin, end); });
    EXPECT_NE(message.find("out of range for f32[4, 3] on cpu"), std::string::npos) << message;
  }
  EXPECT_NE(error_message([] { (void)Tensor::zeros({}).slice(0, 1); }).find("no first dimension"),
            std::string::npos);
}

TEST(TensorReshape, SharesStorageAndChecksElementCount) {
  const Tensor t = Tensor::full({4, 3}, 1.0);
  Tensor r = t.reshape({2, 6});
  EXPECT_EQ(r.shape(), (Shape{2, 6}));
  EXPECT_EQ(r.data(), t.data());
  r.fill_(2.0);
  EXPECT_EQ(t.to_vector<float>(), std::vector<float>(12, 2.0f));
  const std::string message = error_message([&] { (void)t.reshape({5, 2}); });
  EXPECT_NE(message.find("f32[4, 3] on cpu cannot become [5, 2] (12 vs 10 elements)"),
            std::string::npos)
      << message;
  EXPECT_EQ(Tensor::zeros({1}).reshape({}).item(), 0.0);
}

TEST(TensorClone, IsAnIndependentCopy) {
  const Tensor t = Tensor::from_vector(std::vector<int64_t>{1, 2, 3}, {3});
  Tensor c = t.clone();
  EXPECT_NE(c.data(), t.data());
  EXPECT_EQ(c.to_vector<int64_t>(), t.to_vector<int64_t>());
  c.fill_(9);
  EXPECT_EQ(t.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3}));
}

TEST(TensorCopy, CopiesAndRejectsMismatches) {
  Tensor dst = Tensor::zeros({2, 2});
  dst.copy_(Tensor::full({4}, 3.0));  // same count, any shape
  EXPECT_EQ(dst.to_vector<float>(), std::vector<float>(4, 3.0f));
  const std::string dtype_message = error_message([&] {
    dst.copy_(Tensor::zeros({2, 2}, DType::f16));
  });
  EXPECT_NE(dtype_message.find("cannot copy f16[2, 2] on cpu into f32[2, 2] on cpu"),
            std::string::npos)
      << dtype_message;
  EXPECT_NE(dtype_message.find("dtype and element count must match"), std::string::npos);
  EXPECT_NE(dtype_message.find("to(dtype)"), std::string::npos) << dtype_message;
  EXPECT_THROW(dst.copy_(Tensor::zeros({5})), ember::Error);
  Tensor undefined;
  EXPECT_THROW(undefined.copy_(dst), ember::Error);
}

TEST(TensorFill, EveryDtypeConvertsTheValue) {
  struct Case {
    DType dtype;
    double value;
    double expected;
  };
  const double inf = std::numeric_limits<double>::infinity();
  const Case cases[] = {
      {DType::f32, 2.5, 2.5},
      {DType::f32, 1e40, inf},
      {DType::f16, 2.5, 2.5},
      {DType::f16, 70000, inf},
      {DType::f16, 0.1, 0.0999755859375},
      {DType::bf16, 2.5, 2.5},
      {DType::bf16, 0.1, 0.10009765625},
      {DType::i32, 2.9, 2},
      {DType::i32, -2.9, -2},
      {DType::i32, 1e10, 2147483647},
      {DType::i32, -1e10, -2147483648.0},
      {DType::i32, std::nan(""), 0},
      {DType::i64, -7.5, -7},
      {DType::i64, 1e30, 9223372036854775807.0},
      {DType::u8, 200.7, 200},
      {DType::u8, -3, 0},
      {DType::u8, 300, 255},
  };
  for (const Case& c : cases) {
    Tensor t = Tensor::empty({3}, c.dtype);
    t.fill_(c.value);
    EXPECT_EQ(values_of(t), std::vector<double>(3, c.expected))
        << ember::dtype_name(c.dtype) << " fill_(" << c.value << ")";
  }
  Tensor nan16 = Tensor::empty({1}, DType::f16);
  EXPECT_TRUE(std::isnan(nan16.fill_(std::nan("")).item()));
}

// fill_ takes a double: it must round once to the target, not via float (double rounding).
TEST(TensorFill, RoundsADoubleOnce) {
  Tensor h = Tensor::empty({1}, DType::f16);
  h.fill_(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40));  // just above a half tie
  EXPECT_EQ(h.to_vector<half>()[0].bits, 0x3c01);
  Tensor b = Tensor::empty({1}, DType::bf16);
  b.fill_(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40));  // just above a bf16 tie
  EXPECT_EQ(b.to_vector<bfloat16>()[0].bits, 0x3f81);
  b.fill_(-(1.0 + std::ldexp(1.0, -8) - std::ldexp(1.0, -40)));  // just below it
  EXPECT_EQ(b.to_vector<bfloat16>()[0].bits, 0xbf80);
  b.fill_(1e300);
  EXPECT_EQ(b.to_vector<bfloat16>()[0].bits, 0x7f80);
  h.fill_(1e-300);
  EXPECT_EQ(h.to_vector<half>()[0].bits, 0x0000);
}

TEST(TensorTo, F32ToHalfTypesAndBackEqualsTheirRounding) {
  Tensor x = Tensor::empty({1000});
  x.normal_(3, 0.0, 100.0);
  std::vector<float> values = x.to_vector<float>();
  values.insert(values.end(), {65504.0f, 65520.0f, 1e-8f, -0.0f, 3e38f, 0x1p-25f});
  x = Tensor::from_vector(values, {static_cast<int64_t>(values.size())});
  const std::vector<float> via_half = x.to(DType::f16).to(DType::f32).to_vector<float>();
  const std::vector<float> via_bf16 = x.to(DType::bf16).to(DType::f32).to_vector<float>();
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(std::bit_cast<uint32_t>(via_half[i]),
              std::bit_cast<uint32_t>(static_cast<float>(half(values[i]))))
        << values[i];
    EXPECT_EQ(std::bit_cast<uint32_t>(via_bf16[i]),
              std::bit_cast<uint32_t>(static_cast<float>(bfloat16(values[i]))))
        << values[i];
  }
  // Between the 16-bit types: exact through float, then one rounding.
  const Tensor h = Tensor::from_vector(std::vector<half>{half(1.0f + 0x1p-10f), half(3.0f)}, {2});
  const std::vector<bfloat16> b = h.to(DType::bf16).to_vector<bfloat16>();
  EXPECT_EQ(b[0].bits, 0x3f80);  // 1 + 2^-10 -> 1 in bf16
  EXPECT_EQ(b[1].bits, 0x4040);
}

TEST(TensorTo, FloatToIntegerTruncatesAndSaturates) {
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor x = Tensor::from_vector(
      std::vector<float>{1.9f, -1.9f, 2.5f, -0.5f, 3e9f, -3e9f, std::nanf(""), inf, -inf, 255.5f},
      {10});
  EXPECT_EQ(x.to(DType::i32).to_vector<int32_t>(),
            (std::vector<int32_t>{1, -1, 2, 0, 2147483647, -2147483647 - 1, 0, 2147483647,
                                  -2147483647 - 1, 255}));
  EXPECT_EQ(x.to(DType::u8).to_vector<uint8_t>(),
            (std::vector<uint8_t>{1, 0, 2, 0, 255, 0, 0, 255, 0, 255}));
  EXPECT_EQ(x.to(DType::i64).to_vector<int64_t>()[4], 3000000000);
  const Tensor h =
      Tensor::from_vector(std::vector<half>{half(-7.75f), half::from_bits(0x7e00)}, {2});
  EXPECT_EQ(h.to(DType::i32).to_vector<int32_t>(), (std::vector<int32_t>{-7, 0}));
}

TEST(TensorTo, IntegerConversions) {
  const Tensor i = Tensor::from_vector(std::vector<int64_t>{-5, 300, 1LL << 40, 16777217}, {4});
  EXPECT_EQ(i.to(DType::i32).to_vector<int32_t>(),
            (std::vector<int32_t>{-5, 300, 2147483647, 16777217}));
  EXPECT_EQ(i.to(DType::u8).to_vector<uint8_t>(), (std::vector<uint8_t>{0, 255, 255, 255}));
  EXPECT_EQ(i.to(DType::f32).to_vector<float>(),
            (std::vector<float>{-5, 300, 0x1p40f, 16777216.0f}));  // one rounding, to even
  const Tensor u = Tensor::from_vector(std::vector<uint8_t>{0, 7, 255}, {3});
  EXPECT_EQ(u.to(DType::f16).to(DType::i64).to_vector<int64_t>(),
            (std::vector<int64_t>{0, 7, 255}));
}

// Integers wider than a float's 24 bits must round once to bfloat16, not via float or double.
TEST(TensorTo, WideIntegersRoundOnceToBfloat16) {
  // 2^24 + 2^16 + 1: just above the tie between 2^24 (0x4b80) and 2^24 + 2^17 (0x4b81).
  const Tensor i32 = Tensor::from_vector(std::vector<int32_t>{16842753, -16842753}, {2});
  const std::vector<bfloat16> b32 = i32.to(DType::bf16).to_vector<bfloat16>();
  EXPECT_EQ(b32[0].bits, 0x4b81);
  EXPECT_EQ(b32[1].bits, 0xcb81);
  // 2^60 + 2^52 + 1: above the tie between 2^60 (0x5d80) and 2^60 + 2^53 (0x5d81), and not
  // representable in double either.
  const Tensor i64 =
      Tensor::from_vector(std::vector<int64_t>{(1LL << 60) + (1LL << 52) + 1, INT64_MIN}, {2});
  const std::vector<bfloat16> b64 = i64.to(DType::bf16).to_vector<bfloat16>();
  EXPECT_EQ(b64[0].bits, 0x5d81);
  EXPECT_EQ(b64[1].bits, 0xdf00);                                   // -2^63 exactly
  EXPECT_EQ(i64.to(DType::f16).to_vector<half>()[0].bits, 0x7c00);  // overflow to inf
  const Tensor small = Tensor::from_vector(std::vector<int32_t>{2049, 2051, -65519, 65520}, {4});
  const std::vector<half> h = small.to(DType::f16).to_vector<half>();
  EXPECT_EQ(h[0].bits, 0x6800);  // 2049: tie -> 2048
  EXPECT_EQ(h[1].bits, 0x6802);  // 2051: tie -> 2052
  EXPECT_EQ(h[2].bits, 0xfbff);
  EXPECT_EQ(h[3].bits, 0x7c00);
}

TEST(TensorTo, SameDtypeSharesAndUndefinedThrows) {
  const Tensor t = Tensor::zeros({3});
  EXPECT_EQ(t.to(DType::f32).data(), t.data());
  EXPECT_EQ(t.to(ember::Device::cpu()).data(), t.data());
  EXPECT_THROW((void)Tensor().to(DType::f16), ember::Error);
  Tensor undefined;
  EXPECT_THROW(undefined.fill_(1.0), ember::Error);
  EXPECT_EQ(undefined.numel(), 0);  // not 1, as an empty shape (a scalar) would give
  EXPECT_EQ(undefined.nbytes(), 0u);
  EXPECT_THROW((void)undefined.stream(), ember::Error);
}

TEST(TensorItem, OneElementOnly) {
  EXPECT_EQ(Tensor::full({}, -3.25, DType::f16).item(), -3.25);
  EXPECT_EQ(Tensor::full({1, 1}, 42, DType::u8).item(), 42.0);
  EXPECT_EQ(Tensor::full({1}, -9, DType::i64).item(), -9.0);
  const std::string message = error_message([] { (void)Tensor::zeros({2}).item(); });
  EXPECT_NE(message.find("f32[2] on cpu does not have exactly one element"), std::string::npos)
      << message;
  EXPECT_THROW((void)Tensor::zeros({0}).item(), ember::Error);
}

TEST(TensorZeroElements, EverythingWorks) {
  for (DType d : kAllDTypes) {
    Tensor t = Tensor::zeros({0, 3}, d);
    EXPECT_EQ(t.numel(), 0);
    EXPECT_EQ(t.nbytes(), 0u);
    EXPECT_TRUE(t.defined());
    t.fill_(1.0);
    EXPECT_EQ(t.clone().numel(), 0);
    EXPECT_EQ(t.to(DType::f32).numel(), 0);
    EXPECT_EQ(t.reshape({0}).shape(), (Shape{0}));
    EXPECT_EQ(t.slice(0, 0).numel(), 0);
    t.copy_(Tensor::empty({0}, d));
    EXPECT_TRUE(values_of(t).empty());
  }
  Tensor f = Tensor::empty({0});
  f.uniform_(1, 0, 1).normal_(1, 0, 1);
  EXPECT_TRUE(Tensor::from_vector(std::vector<float>{}, {0}).to_vector<float>().empty());
}

// Random initialization. With n samples the standard error of the sample mean is sigma/sqrt(n)
// and that of the sample variance is sqrt((mu4 - sigma^4) / n); the tests allow 6 standard
// errors, which a correct generator exceeds with probability ~2e-9.
constexpr int64_t kSamples = 1 << 20;

struct Moments {
  double mean = 0, variance = 0, min = INFINITY, max = -INFINITY;
};
Moments moments_of(const std::vector<float>& v) {
  Moments m;
  for (float x : v) {
    m.mean += x;
    m.min = std::min<double>(m.min, x);
    m.max = std::max<double>(m.max, x);
  }
  m.mean /= static_cast<double>(v.size());
  for (float x : v) m.variance += (x - m.mean) * (x - m.mean);
  m.variance /= static_cast<double>(v.size() - 1);
  return m;
}

TEST(TensorRandom, UniformIsDeterministicAndSeedDependent) {
  Tensor a = Tensor::empty({kSamples}), b = Tensor::empty({kSamples}),
         c = Tensor::empty({kSamples});
  a.uniform_(42, -1, 1);
  b.uniform_(42, -1, 1);
  c.uniform_(43, -1, 1);
  EXPECT_EQ(bits_of(a), bits_of(b));
  const std::vector<float> va = a.to_vector<float>(), vc = c.to_vector<float>();
  int64_t same = 0;
  for (size_t i = 0; i < va.size(); ++i) same += va[i] == vc[i];
  EXPECT_LT(same, 100);  // independent streams agree on a float only by rare chance
}

TEST(TensorRandom, UniformRangeAndMoments) {
  const double low = -2, high = 3;
  Tensor t = Tensor::empty({kSamples});
  t.uniform_(7, low, high);
  const Moments m = moments_of(t.to_vector<float>());
  // high itself can appear: a double just below high may round up to it in f32.
  EXPECT_GE(m.min, low);
  EXPECT_LE(m.max, high);
  EXPECT_LT(m.min, low + 0.001);  // the whole range is used
  EXPECT_GT(m.max, high - 0.001);
  const double width = high - low, variance = width * width / 12;
  const double mu4 = std::pow(width, 4) / 80;  // fourth central moment of a uniform
  const double n = static_cast<double>(kSamples);
  EXPECT_NEAR(m.mean, (low + high) / 2, 6 * std::sqrt(variance / n));
  EXPECT_NEAR(m.variance, variance, 6 * std::sqrt((mu4 - variance * variance) / n));
}

TEST(TensorRandom, NormalMomentsAndShape) {
  const double mean = 1.5, stddev = 0.5;
  Tensor t = Tensor::empty({kSamples});
  t.normal_(11, mean, stddev);
  const std::vector<float> v = t.to_vector<float>();
  const Moments m = moments_of(v);
  const double n = static_cast<double>(kSamples), variance = stddev * stddev;
  EXPECT_NEAR(m.mean, mean, 6 * stddev / std::sqrt(n));
  EXPECT_NEAR(m.variance, variance, 6 * variance * std::sqrt(2 / n));  // mu4 = 3 sigma^4
  int64_t within_one = 0;
  for (float x : v) {
    ASSERT_TRUE(std::isfinite(x));
    within_one += std::abs(x - mean) < stddev;
  }
  const double p = 0.682689492137;  // P(|Z| < 1)
  EXPECT_NEAR(static_cast<double>(within_one) / n, p, 6 * std::sqrt(p * (1 - p) / n));
  Tensor c = Tensor::empty({kSamples});
  c.normal_(11, mean, stddev);
  EXPECT_EQ(bits_of(t), bits_of(c));
}

TEST(TensorRandom, IndependentOfThreadCount) {
  Tensor u1 = Tensor::empty({kSamples}), u4 = Tensor::empty({kSamples});
  Tensor n1 = Tensor::empty({kSamples}), n4 = Tensor::empty({kSamples});
  const int before = omp_get_max_threads();
  {
    OmpThreads threads(1);
    u1.uniform_(5, 0, 1);
    n1.normal_(5, 0, 1);
  }
  {
    OmpThreads threads(4);
    u4.uniform_(5, 0, 1);
    n4.normal_(5, 0, 1);
  }
  EXPECT_EQ(omp_get_max_threads(), before);
  EXPECT_EQ(bits_of(u1), bits_of(u4));
  EXPECT_EQ(bits_of(n1), bits_of(n4));
}

TEST(TensorRandom, HalfTypesMatchRoundedF32AndIntegersAreRejected) {
  Tensor f = Tensor::empty({4096}), h = Tensor::empty({4096}, DType::f16);
  f.uniform_(9, -1, 1);
  h.uniform_(9, -1, 1);
  const std::vector<half> expected = f.to(DType::f16).to_vector<half>();
  const std::vector<half> got = h.to_vector<half>();
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i].bits, expected[i].bits) << i;
  Tensor i = Tensor::empty({4}, DType::i32);
  EXPECT_NE(error_message([&] { i.uniform_(1, 0, 1); }).find("needs a floating dtype, not i32"),
            std::string::npos);
  EXPECT_THROW(i.normal_(1, 0, 1), ember::Error);
  EXPECT_NE(error_message([&] { f.uniform_(1, 2, 1); }).find("low 2 is above high 1"),
            std::string::npos);
  EXPECT_NE(error_message([&] { f.normal_(1, 0, -1); }).find("stddev -1 is negative"),
            std::string::npos);
}

}  // namespace

namespace {
TEST(TensorUndefined, OperationsThrowInsteadOfCrashing) {
  const ember::Tensor t;
  EXPECT_FALSE(t.defined());
  EXPECT_THROW(t.clone(), ember::Error);
  EXPECT_THROW(t.item(), ember::Error);
  EXPECT_THROW(t.to_vector<float>(), ember::Error);
  EXPECT_THROW(t.to(ember::DType::f16), ember::Error);
  ember::Tensor dst = ember::Tensor::zeros({1});
  EXPECT_THROW(dst.copy_(t.view()), ember::Error);
}

TEST(ShapeOverflow, ElementCountOverflowIsRejected) {
  EXPECT_THROW(ember::Shape({int64_t{1} << 40, int64_t{1} << 40}), ember::Error);
  EXPECT_EQ(ember::Shape({0, int64_t{1} << 62, 8}).numel(), 0);
}
}  // namespace
