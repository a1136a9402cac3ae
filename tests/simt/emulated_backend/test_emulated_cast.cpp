// ops::cast on an (emulated) CUDA device against the CPU backend, bit for bit: every pair of
// the six dtypes (src/ops/elementwise/cast.cuh whenever i32 or i64 is involved or the dtypes are equal,
// ops::map otherwise), edge values (nan, infinities, signed zeros, subnormals, integer limits
// and their neighbours, rounding ties, values that double rounding would get wrong), every f16,
// bf16 and u8 bit pattern, tail sizes, misaligned views, in-place casts where the element size
// allows them and the CPU's error where it does not. A few results are also checked by hand, so
// that the CPU being wrong in the same way would not go unnoticed.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"
#include "ember/ops/elementwise.hpp"
#include "emulated_test_support.hpp"
#include "ops/ops_test_support.hpp"
#include "test_support.hpp"

namespace {

using ember::Device;
using ember::DType;
using ember::Stream;
using ember::Tensor;
using ember::TensorView;
using ember::testing::raw;
namespace ops = ember::ops;

const Device kGpu = Device::cuda(0);
constexpr DType kAll[] = {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8};
constexpr int64_t kTails[] = {0, 1, 7, 4097};

constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min();
constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kI32Min = std::numeric_limits<int32_t>::min();
constexpr int64_t kI32Max = std::numeric_limits<int32_t>::max();
constexpr int64_t kP24 = int64_t{1} << 24, kP31 = int64_t{1} << 31, kP53 = int64_t{1} << 53;

std::string pair_name(DType from, DType to) {
  return std::string(ember::dtype_name(from)) + " -> " + std::string(ember::dtype_name(to));
}

// f32 values at the edges of every destination: limits of i32 / i64 / u8 and the floats beside
// them, f16's largest finite value and its overflow threshold, bf16 and f16 rounding ties,
// subnormals of f32 and of f16.
std::vector<float> f32_specials() {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float p31 = 2147483648.0f, p63 = 9223372036854775808.0f;
  return {0.0f,
          -0.0f,
          nan,
          -nan,
          inf,
          -inf,
          p31,
          -p31,
          std::nextafter(p31, 0.0f),
          std::nextafter(-p31, -inf),
          p63,
          -p63,
          std::nextafter(p63, 0.0f),
          std::nextafter(-p63, -inf),
          4294967296.0f,
          16777216.0f,
          16777218.0f,
          -16777218.0f,
          255.5f,
          255.0f,
          256.0f,
          std::nextafter(255.0f, 0.0f),
          254.5f,
          -0.5f,
          -1.0f,
          std::nextafter(-1.0f, 0.0f),
          0.5f,
          1.5f,
          2.5f,
          -2.5f,
          1e-45f,
          -1e-45f,
          1e-40f,
          std::numeric_limits<float>::min(),
          std::nextafter(std::numeric_limits<float>::min(), 0.0f),
          std::numeric_limits<float>::max(),
          -std::numeric_limits<float>::max(),
          65504.0f,
          65519.996f,
          65520.0f,
          -65520.0f,
          5.9604645e-8f,
          2.9802322e-8f,
          1.00390625f,
          1.01171875f,
          1e10f,
          -1e10f,
          1e20f,
          -1e20f};
}

// Integers at the same edges, and ones that rounding to f32 first would round wrongly to f16 or
// bf16 (2^30 + 2^22 + 1 lies just above a bf16 tie that its nearest f32 sits on).
std::vector<int64_t> integer_specials() {
  return {0,
          1,
          -1,
          255,
          256,
          -255,
          257,
          259,
          65504,
          65519,
          65520,
          65535,
          -65520,
          kP24 + 1,
          kP24 + 3,
          -(kP24 + 1),
          kP24 - 1,
          kI32Max,
          kI32Max - 1,
          kI32Min,
          kI32Min + 1,
          kI32Max - 63,
          kI32Max - 64,
          kI32Max - 65,
          (int64_t{1} << 30) + (int64_t{1} << 22) + 1,
          -((int64_t{1} << 30) + (int64_t{1} << 22) + 1),
          (int64_t{1} << 30) + (int64_t{1} << 22),
          kP31,
          -kP31 - 1,
          int64_t{1} << 32,
          kP53 + 1,
          kP53 - 1,
          -(kP53 + 1),
          kP53 + 3,
          kI64Max,
          kI64Max - 1,
          kI64Min,
          kI64Min + 1,
          kI64Max - (int64_t{1} << 38),
          kI64Max - (int64_t{1} << 38) + 2,
          (int64_t{1} << 40) + (int64_t{1} << 32) + 1};
}

// Every value of `dtype` worth casting: the specials above and random values of every
// magnitude (integers), random bit patterns (f32: every class, nan payloads included) or every
// bit pattern there is (f16, bf16, u8).
Tensor pool(DType dtype) {
  std::mt19937_64 gen(1234);
  auto make = [](const auto& v, DType d) {
    Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, d);
    std::memcpy(t.data(), v.data(), t.nbytes());
    return t;
  };
  switch (dtype) {
    case DType::f32: {
      std::vector<float> v = f32_specials();
      for (int i = 0; i < 4000; ++i) {
        v.push_back(std::bit_cast<float>(static_cast<uint32_t>(gen())));
        // Magnitudes 2^-30 .. 2^70 with either sign: truncation and saturation everywhere.
        const double m = std::ldexp(1.0 + static_cast<double>(gen() % 4096) / 4096.0,
                                    static_cast<int>(gen() % 101) - 30);
        v.push_back(static_cast<float>(gen() % 2 ? -m : m));
      }
      return make(v, dtype);
    }
    case DType::f16:
    case DType::bf16: {
      std::vector<uint16_t> v(65536);
      for (uint32_t i = 0; i < 65536; ++i) v[i] = static_cast<uint16_t>(i);
      return make(v, dtype);
    }
    case DType::u8: {
      std::vector<uint8_t> v(256);
      for (uint32_t i = 0; i < 256; ++i) v[i] = static_cast<uint8_t>(i);
      return make(v, dtype);
    }
    default: {  // i32, i64: random bit widths, so that every rounding position is exercised
      std::vector<int64_t> w = integer_specials();
      for (int i = 0; i < 8000; ++i) {
        const int64_t x = static_cast<int64_t>(gen() >> (gen() % 64));
        w.push_back(gen() % 2 ? x : -x);
      }
      if (dtype == DType::i64) return make(w, dtype);
      std::vector<int32_t> v;  // i32: the specials that fit, then the low 32 bits of the rest
      for (const int64_t x : w) {
        if (x >= kI32Min && x <= kI32Max) v.push_back(static_cast<int32_t>(x));
      }
      for (const int64_t x : w) v.push_back(static_cast<int32_t>(static_cast<uint64_t>(x)));
      return make(v, dtype);
    }
  }
}

// The first n elements of the pool (repeated when it is shorter), on the host.
Tensor take(const Tensor& from, int64_t n) {
  Tensor t = Tensor::empty({n}, from.dtype());
  const size_t size = ember::dtype_size(from.dtype());
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(static_cast<char*>(t.data()) + i * size,
                static_cast<const char*>(from.data()) + (i % from.numel()) * size, size);
  }
  return t;
}

// Little-endian bytes as one hexadecimal number.
std::string hex(const uint8_t* p, size_t size) {
  std::string s = "0x";
  for (size_t i = size; i-- > 0;) {
    s += "0123456789abcdef"[p[i] >> 4];
    s += "0123456789abcdef"[p[i] & 15];
  }
  return s;
}

// f16 -> f32 is ops::map's (ember/kernels/map.cuh): its device decode (__half2float) quiets a
// signaling nan where the CPU keeps the bits (0x7c01 -> 0x7fc02000 against 0x7f802000), a
// difference of map's, not of the cast kernel's. There both results need only be nan.
bool quieted_nan(const Tensor& in, DType to, size_t i, const uint8_t* want, const uint8_t* got) {
  if (in.dtype() != DType::f16 || to != DType::f32) return false;
  uint16_t h;
  std::memcpy(&h, static_cast<const uint8_t*>(in.data()) + 2 * i, 2);
  float w, g;
  std::memcpy(&w, want, 4);
  std::memcpy(&g, got, 4);
  return (h & 0x7fffu) > 0x7c00u && (h & 0x0200u) == 0 && std::isnan(w) && std::isnan(g);
}

// The cast of `in` (host) to `to` on the CPU and on the device, compared byte for byte.
void expect_same_cast(const Tensor& in, DType to, const std::string& what) {
  Stream gpu = ember::current_stream(kGpu), cpu;
  Tensor want = Tensor::zeros(in.shape(), to), got = Tensor::zeros(in.shape(), to, kGpu);
  ops::cast(cpu, want, in);
  ops::cast(gpu, got, in.to(kGpu));
  const std::vector<uint8_t> w = raw(want), g = raw(got);
  ASSERT_EQ(w.size(), g.size()) << what;
  const size_t size = ember::dtype_size(to), in_size = ember::dtype_size(in.dtype());
  int shown = 0;
  for (size_t i = 0; i < w.size() && shown < 5; i += size) {
    if (std::memcmp(&w[i], &g[i], size) != 0 && !quieted_nan(in, to, i / size, &w[i], &g[i])) {
      ++shown;
      ADD_FAILURE() << what << ": element " << i / size << " is " << hex(&g[i], size)
                    << " on the device, " << hex(&w[i], size) << " on the CPU (input "
                    << hex(static_cast<const uint8_t*>(in.data()) + i / size * in_size, in_size)
                    << ")";
    }
  }
}

TEST(EmulatedCast, EveryPairMatchesTheCpuBitwise) {
  for (const DType from : kAll) {
    const Tensor values = pool(from);
    for (const DType to : kAll) expect_same_cast(values, to, pair_name(from, to));
  }
}

TEST(EmulatedCast, TailSizesMatchTheCpuBitwise) {
  for (const DType from : kAll) {
    const Tensor values = pool(from);
    for (const DType to : kAll) {
      for (const int64_t n : kTails) {
        expect_same_cast(take(values, n), to, pair_name(from, to) + " n=" + std::to_string(n));
      }
    }
  }
}

TEST(EmulatedCast, MisalignedViewsMatchTheCpuBitwise) {
  Stream gpu = ember::current_stream(kGpu), cpu;
  const int64_t n = 4097;
  for (const DType from : {DType::i64, DType::f32}) {
    for (const DType to : {DType::bf16, DType::i32, DType::u8}) {
      const Tensor in = take(pool(from), n + 1), in_gpu = in.to(kGpu);
      Tensor want = Tensor::zeros({n + 1}, to), got = Tensor::zeros({n + 1}, to, kGpu);
      ops::cast(cpu, ember::testing::offset_by_one(want, n), ember::testing::offset_by_one(in, n));
      ops::cast(gpu, ember::testing::offset_by_one(got, n),
                ember::testing::offset_by_one(in_gpu, n));
      EXPECT_EQ(raw(got), raw(want)) << pair_name(from, to);
    }
  }
}

// A view of `dtype` over the first n elements' worth of t's memory.
TensorView view_as(const Tensor& t, DType dtype, int64_t n) {
  return TensorView{t.data(), dtype, {n}, t.device()};
}

TEST(EmulatedCast, InPlaceWhereTheElementSizeAllowsItAsOnTheCpu) {
  Stream gpu = ember::current_stream(kGpu), cpu;
  const int64_t n = 4097;
  for (const DType from : kAll) {
    const Tensor values = take(pool(from), n);
    for (const DType to : kAll) {
      // A buffer big enough for either dtype, so that a refused cast touches nothing outside it.
      Tensor host = Tensor::zeros({8 * n}, DType::u8),
             dev = Tensor::zeros({8 * n}, DType::u8, kGpu);
      std::memcpy(host.data(), values.data(), values.nbytes());
      ember::copy_bytes(dev.data(), kGpu, values.data(), Device::cpu(), values.nbytes(),
                        dev.stream());
      const auto cast_in_place = [&](Stream& s, const Tensor& buffer) {
        ops::cast(s, view_as(buffer, to, n), view_as(buffer, from, n));
      };
      if (ember::dtype_size(from) != ember::dtype_size(to)) {
        ember::testing::expect_error([&] { cast_in_place(cpu, host); }, "partly overlaps");
        ember::testing::expect_error([&] { cast_in_place(gpu, dev); }, "partly overlaps");
        EXPECT_EQ(raw(dev), raw(host)) << pair_name(from, to) << ": a refused cast wrote";
        continue;
      }
      cast_in_place(cpu, host);
      cast_in_place(gpu, dev);
      EXPECT_EQ(raw(dev), raw(host)) << pair_name(from, to);
    }
  }
}

// Results worked out by hand, on the device (and the CPU agreeing with them).
template <class To, class From>
void expect_cast(From in, To want) {
  Stream gpu = ember::current_stream(kGpu), cpu;
  const Tensor x = Tensor::from_vector(std::vector<From>{in}, {1});
  Tensor got = Tensor::zeros({1}, ember::dtype_of<To>, kGpu),
         cpu_got = Tensor::zeros({1}, ember::dtype_of<To>);
  ops::cast(gpu, got, x.to(kGpu));
  ops::cast(cpu, cpu_got, x);
  EXPECT_EQ(got.to_vector<To>()[0], want) << in;
  EXPECT_EQ(cpu_got.to_vector<To>()[0], want) << in;
}

// A 16-bit float result as f32 (exact).
template <class From>
float via(From in, DType to) {
  Stream gpu = ember::current_stream(kGpu);
  Tensor got = Tensor::zeros({1}, to, kGpu);
  ops::cast(gpu, got, Tensor::from_vector(std::vector<From>{in}, {1}).to(kGpu));
  return ember::testing::host_f32(got)[0];
}

TEST(EmulatedCast, KnownResults) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  // Integers to f32: to nearest, ties to even, in one rounding.
  expect_cast<float>(kI64Max, 9223372036854775808.0f);
  expect_cast<float>(kP53 + 1, 9007199254740992.0f);
  expect_cast<float>(int32_t{16777217}, 16777216.0f);
  expect_cast<float>(int32_t{16777219}, 16777220.0f);
  // Floats to integers: truncated toward zero, saturated, nan giving 0.
  expect_cast<int32_t>(3e9f, static_cast<int32_t>(kI32Max));
  expect_cast<int32_t>(-3e9f, static_cast<int32_t>(kI32Min));
  expect_cast<int32_t>(nan, 0);
  expect_cast<int32_t>(-2.9f, -2);
  expect_cast<int64_t>(1e19f, kI64Max);
  expect_cast<int64_t>(-inf, kI64Min);
  expect_cast<int64_t>(4611686018427387904.0f, int64_t{1} << 62);
  expect_cast<uint8_t>(255.5f, uint8_t{255});
  expect_cast<uint8_t>(-0.5f, uint8_t{0});
  // Integers to integers: saturated.
  expect_cast<uint8_t>(int64_t{-1}, uint8_t{0});
  expect_cast<uint8_t>(int32_t{300}, uint8_t{255});
  expect_cast<int32_t>(kI64Min, static_cast<int32_t>(kI32Min));
  expect_cast<int64_t>(uint8_t{200}, int64_t{200});
  // Integers to f16 / bf16: one correct rounding (f32 first would round 2^30 + 2^22 + 1 to the
  // bf16 tie 2^30 + 2^22 and then down to 2^30).
  EXPECT_EQ(via((int64_t{1} << 30) + (int64_t{1} << 22) + 1, DType::bf16), 1082130432.0f);
  EXPECT_EQ(via(kP53 + 1, DType::f16), inf);
  EXPECT_EQ(via(int32_t{65519}, DType::f16), 65504.0f);
  EXPECT_EQ(via(int32_t{65520}, DType::f16), inf);
  EXPECT_EQ(via(int32_t{257}, DType::bf16), 256.0f);
  EXPECT_EQ(via(int32_t{259}, DType::bf16), 260.0f);
}

}  // namespace
