// ops::cast on every test device (device_cases.hpp), between all six dtypes, against a reference
// written here: edge values (nan, infinities, signed zeros, subnormals, integer limits and their
// neighbours, rounding ties, values that double rounding would get wrong), every f16, bf16 and u8
// bit pattern, tail sizes, misaligned views, in place where the element size allows it and the
// error where it does not; on a CUDA device also bit for bit against the CPU backend (a nan for
// a nan, whatever its payload).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ember/core/half.hpp"
#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"
#include "ember/ops/elementwise.hpp"
#include "ops/device_cases.hpp"
#include "ops/ops_test_support.hpp"
#include "test_support.hpp"

namespace {

using ember::DType;
using ember::Shape;
using ember::Stream;
using ember::Tensor;
using ember::TensorView;
using ember::testing::expect_error;
using ember::testing::host_f32;
using ember::testing::host_tensor;
using ember::testing::kInf;
using ember::testing::kNan;
using ember::testing::offset_by_one;
using ember::testing::random_floats;
using ember::testing::raw;
namespace ops = ember::ops;

// 0, 1, odd, around the CPU's 2048-element block, and past its 32768-element parallel threshold.
constexpr int64_t kSizes[] = {0, 1, 7, 2048, 4097, 70001};

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

// Every value of `dtype` worth casting, on the host: the specials above and random values of
// every magnitude (integers), random bit patterns (f32: every class, nan payloads included) or
// every bit pattern there is (f16, bf16, u8).
Tensor pool(DType dtype) {
  std::mt19937_64 gen(1234);
  auto make_raw = [](const auto& v, DType d) {
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
      return make_raw(v, dtype);
    }
    case DType::f16:
    case DType::bf16: {
      std::vector<uint16_t> v(65536);
      for (uint32_t i = 0; i < 65536; ++i) v[i] = static_cast<uint16_t>(i);
      return make_raw(v, dtype);
    }
    case DType::u8: {
      std::vector<uint8_t> v(256);
      for (uint32_t i = 0; i < 256; ++i) v[i] = static_cast<uint8_t>(i);
      return make_raw(v, dtype);
    }
    default: {  // i32, i64: random bit widths, so that every rounding position is exercised
      std::vector<int64_t> w = integer_specials();
      for (int i = 0; i < 8000; ++i) {
        const int64_t x = static_cast<int64_t>(gen() >> (gen() % 64));
        w.push_back(gen() % 2 ? x : -x);
      }
      if (dtype == DType::i64) return make_raw(w, dtype);
      std::vector<int32_t> v;  // i32: the specials that fit, then the low 32 bits of the rest
      for (const int64_t x : w) {
        if (x >= kI32Min && x <= kI32Max) v.push_back(static_cast<int32_t>(x));
      }
      for (const int64_t x : w) v.push_back(static_cast<int32_t>(static_cast<uint64_t>(x)));
      return make_raw(v, dtype);
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

// The exact value an element holds: an integer, or a float (f32, f16 and bf16 values are all
// doubles; nan, the infinities and -0 included).
struct Value {
  bool integer;
  int64_t i;
  double f;
};

bool is_integer(DType dtype) {
  return dtype == DType::i32 || dtype == DType::i64 || dtype == DType::u8;
}

Value decode(const uint8_t* p, DType dtype) {
  switch (dtype) {
    case DType::f32: {
      float f;
      std::memcpy(&f, p, 4);
      return {false, 0, f};
    }
    case DType::bf16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return {false, 0, std::bit_cast<float>(static_cast<uint32_t>(h) << 16)};
    }
    case DType::f16: {  // sign, 5 exponent bits (bias 15), 10 mantissa bits
      uint16_t h;
      std::memcpy(&h, p, 2);
      const int e = (h >> 10) & 31, m = h & 1023;
      const double v = e == 31  ? (m != 0 ? std::numeric_limits<double>::quiet_NaN() : HUGE_VAL)
                       : e == 0 ? std::ldexp(m, -24)
                                : std::ldexp(m + 1024, e - 25);
      return {false, 0, (h & 0x8000) != 0 ? -v : v};
    }
    case DType::u8:
      return {true, p[0], 0.0};
    case DType::i32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return {true, v, 0.0};
    }
    default: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return {true, v, 0.0};
    }
  }
}

// x (finite, nonzero, of at most 24 significant bits) rounded to nearest even to `digits`
// significant bits with no exponent below `emin` (subnormals); beyond `max` an infinity.
double round_float(double x, int digits, int emin, double max) {
  int e;
  std::frexp(x, &e);  // |x| = m 2^e, m in [0.5, 1)
  const double quantum = std::ldexp(1.0, std::max(e - 1, emin) - (digits - 1));
  const double r = std::nearbyint(x / quantum) * quantum;  // x / quantum is exact
  return std::abs(r) > max ? std::copysign(HUGE_VAL, x) : r;
}

// An integer's magnitude rounded to nearest even to `digits` significant bits, in one rounding
// (exact in double).
double round_integer(uint64_t u, int digits) {
  const int width = std::bit_width(u);
  if (width <= digits) return static_cast<double>(u);
  const int shift = width - digits;
  uint64_t q = u >> shift;
  const uint64_t rest = u & ((uint64_t{1} << shift) - 1), half = uint64_t{1} << (shift - 1);
  if (rest > half || (rest == half && (q & 1) != 0)) ++q;
  return std::ldexp(static_cast<double>(q), shift);
}

// ops::cast's contract (elementwise.hpp) for one element: floats round to nearest even once,
// also from integers; floats to integers truncate toward zero and saturate, nan giving 0;
// integers saturate.
Value expected(const Value& v, DType to) {
  if (is_integer(to)) {
    const int64_t lo = to == DType::u8 ? 0 : to == DType::i32 ? kI32Min : kI64Min;
    const int64_t hi = to == DType::u8 ? 255 : to == DType::i32 ? kI32Max : kI64Max;
    if (v.integer) return {true, std::clamp(v.i, lo, hi), 0.0};
    if (std::isnan(v.f)) return {true, 0, 0.0};
    const double t = std::trunc(v.f);
    if (t <= static_cast<double>(lo)) return {true, lo, 0.0};
    if (t >= static_cast<double>(hi)) return {true, hi, 0.0};  // i64: 2^63 and beyond
    return {true, static_cast<int64_t>(t), 0.0};
  }
  const int digits = to == DType::f32 ? 24 : to == DType::f16 ? 11 : 8;
  const int emin = to == DType::f16 ? -14 : -126;
  const double max = to == DType::f32 ? FLT_MAX : to == DType::f16 ? 65504.0 : 0x1.fep127;
  if (v.integer) {
    if (v.i == 0) return {false, 0, 0.0};
    const uint64_t u = v.i < 0 ? 0 - static_cast<uint64_t>(v.i) : static_cast<uint64_t>(v.i);
    const double r = round_integer(u, digits);
    const double m = r > max ? HUGE_VAL : r;
    return {false, 0, v.i < 0 ? -m : m};
  }
  if (std::isnan(v.f) || std::isinf(v.f) || v.f == 0.0) return v;
  return {false, 0, round_float(v.f, digits, emin, max)};
}

bool same(const Value& got, const Value& want) {
  if (want.integer) return got.i == want.i;
  if (std::isnan(want.f)) return std::isnan(got.f);  // any nan
  return got.f == want.f && std::signbit(got.f) == std::signbit(want.f);
}

// Elements [first, first + n) of `out` (bytes of dtype `to`) against the cast of the same
// elements of `in` (a host tensor).
void expect_cast_of(const Tensor& in, const std::vector<uint8_t>& out, DType to, int64_t first,
                    int64_t n, const std::string& what) {
  const auto* src = static_cast<const uint8_t*>(in.data());
  const size_t in_size = ember::dtype_size(in.dtype()), size = ember::dtype_size(to);
  ASSERT_GE(out.size(), (first + n) * size) << what;
  int shown = 0;
  for (int64_t i = first; i < first + n && shown < 5; ++i) {
    const Value want = expected(decode(src + i * in_size, in.dtype()), to);
    if (!same(decode(&out[i * size], to), want)) {
      ++shown;
      ADD_FAILURE() << what << ": element " << i << " is " << hex(&out[i * size], size)
                    << " (input " << hex(src + i * in_size, in_size) << "), expected "
                    << (want.integer ? std::to_string(want.i) : std::to_string(want.f));
    }
  }
}

// ember keeps nan a nan through every cast, not its payload or sign (docs/ops.md): a GPU's
// conversions canonicalize (f32 -> f16 gives 0x7fff, __half2float quiets a signaling nan) where the
// CPU keeps the payload. So two nans of dtype `to` are the same result.
bool both_nan(DType to, const uint8_t* want, const uint8_t* got) {
  const auto is_nan = [to](const uint8_t* p) {
    if (to == DType::f32) {
      float f;
      std::memcpy(&f, p, 4);
      return std::isnan(f);
    }
    if (to != DType::f16 && to != DType::bf16) return false;
    uint16_t h;
    std::memcpy(&h, p, 2);
    return to == DType::f16 ? (h & 0x7fffu) > 0x7c00u : (h & 0x7fffu) > 0x7f80u;
  };
  return is_nan(want) && is_nan(got);
}

// On a CUDA device: `got` (bytes of dtype `to`) against the CPU backend's `want` byte for byte
// (any nan for a nan), `in` the host input they were cast from.
void expect_same_bytes(const Tensor& in, DType to, const std::vector<uint8_t>& want,
                       const std::vector<uint8_t>& got, const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  const size_t size = ember::dtype_size(to), in_size = ember::dtype_size(in.dtype());
  int shown = 0;
  for (size_t i = 0; i < want.size() && shown < 5; i += size) {
    if (std::memcmp(&want[i], &got[i], size) != 0 && !both_nan(to, &want[i], &got[i])) {
      ++shown;
      ADD_FAILURE() << what << ": element " << i / size << " is " << hex(&got[i], size)
                    << " on the device, " << hex(&want[i], size) << " on the CPU (input "
                    << hex(static_cast<const uint8_t*>(in.data()) + i / size * in_size, in_size)
                    << ")";
    }
  }
}

// A view of `dtype` over the first n elements' worth of t's memory.
TensorView view_as(const Tensor& t, DType dtype, int64_t n) {
  return TensorView{t.data(), dtype, {n}, t.device()};
}

class ElementwiseCast : public ember::testing::OnDevice {
 protected:
  // Casts `in` (on the host) to `to` on the test device: every element as expected(), and on a
  // CUDA device the CPU backend's bytes.
  void check(const Tensor& in, DType to, const std::string& what) {
    Stream s = stream();
    Tensor out = Tensor::zeros(in.shape(), to, device());
    ops::cast(s, out, on(in));
    const std::vector<uint8_t> got = raw(out);
    expect_cast_of(in, got, to, 0, in.numel(), what);
    if (!device().is_cpu()) {
      Stream cpu;
      Tensor want = Tensor::zeros(in.shape(), to);
      ops::cast(cpu, want, in);
      expect_same_bytes(in, to, raw(want), got, what + " (against the CPU)");
    }
  }

  // A one-element cast on the device, as To.
  template <class To, class From>
  To cast_one(From in) {
    Stream s = stream();
    Tensor got = Tensor::zeros({1}, ember::dtype_of<To>, device());
    ops::cast(s, got, on(Tensor::from_vector(std::vector<From>{in}, {1})));
    return got.to_vector<To>()[0];
  }
  // A one-element cast to a 16-bit float, as f32 (exact).
  template <class From>
  float cast_to(From in, DType to) {
    Stream s = stream();
    Tensor got = Tensor::zeros({1}, to, device());
    ops::cast(s, got, on(Tensor::from_vector(std::vector<From>{in}, {1})));
    return host_f32(got)[0];
  }
};

TEST_P(ElementwiseCast, FloatToFloatRoundsToNearestEven) {
  Stream s = stream();
  for (int64_t n : kSizes) {
    const std::vector<float> v = random_floats(n, 13, -70000.0f, 70000.0f);
    const Tensor x = on(host_tensor(v, DType::f32));
    Tensor h = Tensor::empty(Shape{n}, DType::f16, device()),
           b = Tensor::empty(Shape{n}, DType::bf16, device());
    ops::cast(s, h, x);
    ops::cast(s, b, x);
    const std::vector<ember::half> vh = h.to_vector<ember::half>();
    const std::vector<ember::bfloat16> vb = b.to_vector<ember::bfloat16>();
    for (size_t i = 0; i < v.size(); ++i) {
      ASSERT_EQ(vh[i].bits, ember::half(v[i]).bits) << v[i];
      ASSERT_EQ(vb[i].bits, ember::bfloat16(v[i]).bits) << v[i];
    }
    Tensor back = Tensor::empty(Shape{n}, DType::f32, device());
    ops::cast(s, back, h);
    const std::vector<float> vback = back.to_vector<float>();
    for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(vback[i], static_cast<float>(vh[i]));
  }
}

TEST_P(ElementwiseCast, FloatToIntegerTruncatesAndSaturates) {
  Stream s = stream();
  const Tensor x =
      on(host_tensor({1.9f, -1.9f, 3e9f, -3e9f, kNan, kInf, 255.5f, -0.5f}, DType::f32));
  Tensor i32 = Tensor::empty(Shape{8}, DType::i32, device());
  ops::cast(s, i32, x);
  EXPECT_EQ(i32.to_vector<int32_t>(),
            (std::vector<int32_t>{1, -1, INT32_MAX, INT32_MIN, 0, INT32_MAX, 255, 0}));
  Tensor u8 = Tensor::empty(Shape{8}, DType::u8, device());
  ops::cast(s, u8, x);
  EXPECT_EQ(u8.to_vector<uint8_t>(), (std::vector<uint8_t>{1, 0, 255, 0, 0, 255, 255, 0}));
  const Tensor big = on(Tensor::from_vector<int64_t>({int64_t{1} << 40, -7}, Shape{2}));
  Tensor f = Tensor::empty(Shape{2}, DType::f32, device());
  ops::cast(s, f, big);
  EXPECT_EQ(f.to_vector<float>(), (std::vector<float>{1099511627776.0f, -7.0f}));
}

TEST_P(ElementwiseCast, KnownResults) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  // Integers to f32: to nearest, ties to even, in one rounding.
  EXPECT_EQ(cast_one<float>(kI64Max), 9223372036854775808.0f);
  EXPECT_EQ(cast_one<float>(kP53 + 1), 9007199254740992.0f);
  EXPECT_EQ(cast_one<float>(int32_t{16777217}), 16777216.0f);
  EXPECT_EQ(cast_one<float>(int32_t{16777219}), 16777220.0f);
  // Floats to integers: truncated toward zero, saturated, nan giving 0.
  EXPECT_EQ(cast_one<int32_t>(3e9f), static_cast<int32_t>(kI32Max));
  EXPECT_EQ(cast_one<int32_t>(-3e9f), static_cast<int32_t>(kI32Min));
  EXPECT_EQ(cast_one<int32_t>(nan), 0);
  EXPECT_EQ(cast_one<int32_t>(-2.9f), -2);
  EXPECT_EQ(cast_one<int64_t>(1e19f), kI64Max);
  EXPECT_EQ(cast_one<int64_t>(-inf), kI64Min);
  EXPECT_EQ(cast_one<int64_t>(4611686018427387904.0f), int64_t{1} << 62);
  EXPECT_EQ(cast_one<uint8_t>(255.5f), uint8_t{255});
  EXPECT_EQ(cast_one<uint8_t>(-0.5f), uint8_t{0});
  // Integers to integers: saturated.
  EXPECT_EQ(cast_one<uint8_t>(int64_t{-1}), uint8_t{0});
  EXPECT_EQ(cast_one<uint8_t>(int32_t{300}), uint8_t{255});
  EXPECT_EQ(cast_one<int32_t>(kI64Min), static_cast<int32_t>(kI32Min));
  EXPECT_EQ(cast_one<int64_t>(uint8_t{200}), int64_t{200});
  // Integers to f16 / bf16: one correct rounding (f32 first would round 2^30 + 2^22 + 1 to the
  // bf16 tie 2^30 + 2^22 and then down to 2^30).
  EXPECT_EQ(cast_to((int64_t{1} << 30) + (int64_t{1} << 22) + 1, DType::bf16), 1082130432.0f);
  EXPECT_EQ(cast_to(kP53 + 1, DType::f16), inf);
  EXPECT_EQ(cast_to(int32_t{65519}, DType::f16), 65504.0f);
  EXPECT_EQ(cast_to(int32_t{65520}, DType::f16), inf);
  EXPECT_EQ(cast_to(int32_t{257}, DType::bf16), 256.0f);
  EXPECT_EQ(cast_to(int32_t{259}, DType::bf16), 260.0f);
}

TEST_P(ElementwiseCast, EveryPairMatchesTheReference) {
  for (const DType from : kAll) {
    const Tensor values = pool(from);
    for (const DType to : kAll) check(values, to, pair_name(from, to));
  }
}

TEST_P(ElementwiseCast, TailSizesMatchTheReference) {
  for (const DType from : kAll) {
    const Tensor values = pool(from);
    for (const DType to : kAll) {
      for (const int64_t n : kTails) {
        check(take(values, n), to, pair_name(from, to) + " n=" + std::to_string(n));
      }
    }
  }
}

TEST_P(ElementwiseCast, MisalignedViewsMatchTheReference) {
  // Views starting one element in: no 128-bit access fits.
  Stream s = stream();
  const int64_t n = 4097;
  for (const DType from : {DType::i64, DType::f32}) {
    const Tensor in = take(pool(from), n + 1);
    const Tensor in_d = on(in);
    for (const DType to : {DType::bf16, DType::i32, DType::u8}) {
      Tensor out = Tensor::zeros({n + 1}, to, device());
      ops::cast(s, offset_by_one(out, n), offset_by_one(in_d, n));
      const std::vector<uint8_t> got = raw(out);
      const size_t size = ember::dtype_size(to);
      EXPECT_EQ(std::vector<uint8_t>(got.begin(), got.begin() + size),
                std::vector<uint8_t>(size, 0))
          << pair_name(from, to) << ": wrote before the view";
      expect_cast_of(in, got, to, 1, n, pair_name(from, to));
      if (!device().is_cpu()) {
        Stream cpu;
        Tensor want = Tensor::zeros({n + 1}, to);
        ops::cast(cpu, offset_by_one(want, n), offset_by_one(in, n));
        expect_same_bytes(in, to, raw(want), got, pair_name(from, to) + " (against the CPU)");
      }
    }
  }
}

TEST_P(ElementwiseCast, InPlaceBetweenTypesOfOneSize) {
  Stream s = stream();
  Tensor t = on(host_tensor({1.5f, -2.5f, 7.0f, 1e10f}, DType::f32));
  TensorView as_int = t.view();
  as_int.dtype = DType::i32;
  ops::cast(s, as_int, t);  // the same 16 bytes, reinterpreted
  const std::vector<uint8_t> bytes = raw(t);
  std::vector<int32_t> got(4);
  std::memcpy(got.data(), bytes.data(), 16);
  EXPECT_EQ(got, (std::vector<int32_t>{1, -2, 7, INT32_MAX}));
}

TEST_P(ElementwiseCast, InPlaceWhereTheElementSizeAllowsIt) {
  // Every pair in place: the reference where the element sizes match, the error (and nothing
  // written) where they do not.
  Stream s = stream();
  const int64_t n = 4097;
  for (const DType from : kAll) {
    const Tensor values = take(pool(from), n);
    for (const DType to : kAll) {
      // A buffer big enough for either dtype, so that a refused cast touches nothing outside it.
      Tensor host = Tensor::zeros({8 * n}, DType::u8);
      std::memcpy(host.data(), values.data(), values.nbytes());
      const std::vector<uint8_t> before = raw(host);
      Tensor buffer = on(host).clone();
      const auto cast_in_place = [&](Stream& stream, const Tensor& b) {
        ops::cast(stream, view_as(b, to, n), view_as(b, from, n));
      };
      if (ember::dtype_size(from) != ember::dtype_size(to)) {
        expect_error([&] { cast_in_place(s, buffer); }, "partly overlaps");
        EXPECT_EQ(raw(buffer), before) << pair_name(from, to) << ": a refused cast wrote";
        continue;
      }
      cast_in_place(s, buffer);
      const std::vector<uint8_t> got = raw(buffer);
      const int64_t end = n * static_cast<int64_t>(ember::dtype_size(to));
      expect_cast_of(values, got, to, 0, n, pair_name(from, to) + " in place");
      EXPECT_TRUE(std::equal(got.begin() + end, got.end(), before.begin() + end))
          << pair_name(from, to) << ": wrote past the view";
      if (!device().is_cpu()) {
        Stream cpu;
        cast_in_place(cpu, host);
        const std::vector<uint8_t> want = raw(host);
        expect_same_bytes(values, to, {want.begin(), want.begin() + end},
                          {got.begin(), got.begin() + end},
                          pair_name(from, to) + " (against the CPU)");
      }
    }
  }
}

TEST_P(ElementwiseCast, EmptyAndShapeMismatch) {
  Stream s = stream();
  Tensor empty_out = Tensor::empty(Shape{0, 3}, DType::f16, device());
  const Tensor empty_in = Tensor::empty(Shape{0, 3}, DType::f32, device());
  EXPECT_NO_THROW(ops::cast(s, empty_out, empty_in));
  EXPECT_NO_THROW(s.synchronize());  // nothing was queued that fails on the device
  Tensor out = Tensor::empty(Shape{3}, DType::f16, device());
  const Tensor in = Tensor::empty(Shape{4}, DType::f32, device());
  expect_error([&] { ops::cast(s, out, in); }, {"ops::cast", "f16[3]", "f32[4]"});
}

INSTANTIATE_EMBER_DEVICES(ElementwiseCast);

}  // namespace
