// ops::embedding_forward / embedding_backward on every device (device_cases.hpp): the forward
// against the table's rows, the backward bit for bit against f32 sums in position order (the
// contract on every device, so the CPU and a GPU agree) and within rounding of a double
// reference; T = 1, widths that are not a multiple of a block, every float dtype for the table
// and the rows, i32 and i64 ids, one id repeated everywhere, empty ids, misaligned views, inf
// and nan, bad ids (named with their row and value) and bad operands.
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "ember/ops/embedding.hpp"
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
using ember::testing::kFloatTypes;
using ember::testing::kInf;
using ember::testing::kNan;
using ember::testing::random_labels;
using ember::testing::raw;
using ember::testing::rounded;
using ember::testing::values;
namespace ops = ember::ops;

class Embedding : public ember::testing::OnDevice {};

Tensor make_ids(const std::vector<int64_t>& v, const Shape& shape, DType dtype) {
  if (dtype == DType::i64) return Tensor::from_vector(v, shape);
  return Tensor::from_vector(std::vector<int32_t>(v.begin(), v.end()), shape);
}

Shape rows_shape(const Shape& ids, int64_t dim) {
  std::vector<int64_t> dims(ids.dims().begin(), ids.dims().end());
  dims.push_back(dim);
  return Shape(dims);
}

struct Case {
  Shape ids;
  int64_t vocab, dim;
};

// T = 1, rows of one column, widths around a 256-thread block, more ids than table rows.
const std::vector<Case> kCases = {{{1}, 1, 1},
                                  {{1, 1}, 50, 7},
                                  {{2, 3}, 5, 64},
                                  {{3, 17}, 70, 130},
                                  {{4, 65}, 9, 257},
                                  {{2, 2, 5}, 300, 3},
                                  // a table of more rows than a tile of the CUDA bucket scan (8192)
                                  {{3, 40}, 17000, 5}};

TEST_P(Embedding, ForwardCopiesTheRowsOfTheIds) {
  Stream s = stream();
  uint32_t seed = 1;
  for (const Case& c : kCases) {
    const int64_t n = c.ids.numel();
    const std::vector<int64_t> ids = random_labels(n, c.vocab, seed++);
    for (DType table_type : kFloatTypes) {
      const Tensor table = ember::testing::random_tensor({c.vocab, c.dim}, seed++, table_type);
      const std::vector<float> t = values(table);
      for (DType out_type : kFloatTypes) {
        for (DType id_type : {DType::i32, DType::i64}) {
          Tensor out = on(Tensor::zeros(rows_shape(c.ids, c.dim), out_type));
          ops::embedding_forward(s, out, on(table), on(make_ids(ids, c.ids, id_type)));
          const std::vector<float> got = values(out);
          for (int64_t r = 0; r < n; ++r) {
            for (int64_t j = 0; j < c.dim; ++j) {
              ASSERT_EQ(got[r * c.dim + j], rounded(t[ids[r] * c.dim + j], out_type))
                  << "row " << r << " column " << j << " ids " << c.ids.to_string() << " "
                  << dtype_name(table_type) << " -> " << dtype_name(out_type);
            }
          }
        }
      }
    }
  }
}

TEST_P(Embedding, ForwardKeepsInfAndNanAndReadsMisalignedViews) {
  Stream s = stream();
  const int64_t vocab = 3, dim = 5;
  std::vector<float> t = ember::testing::random_floats(vocab * dim + 1, 4);
  t[1 + 1 * dim + 0] = kInf;
  t[1 + 1 * dim + 1] = -kInf;
  t[1 + 2 * dim + 4] = kNan;
  for (DType dtype : kFloatTypes) {
    // The table starts one element into its allocation: no vector access fits it.
    const Tensor storage = on(Tensor::from_vector(t, Shape{vocab * dim + 1}).to(dtype));
    const TensorView table{static_cast<char*>(storage.data()) + dtype_size(dtype), dtype,
                           Shape{vocab, dim}, storage.device()};
    const std::vector<int64_t> ids = {2, 1, 1, 0, 2};
    Tensor out = on(Tensor::zeros({5, dim}, dtype));
    ops::embedding_forward(s, out, table, on(make_ids(ids, Shape{5}, DType::i64)));
    const std::vector<float> got = values(out);
    for (int64_t r = 0; r < 5; ++r) {
      for (int64_t j = 0; j < dim; ++j) {
        const float want = rounded(t[1 + ids[r] * dim + j], dtype);
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(got[r * dim + j])) << r << " " << j;
        } else {
          EXPECT_EQ(got[r * dim + j], want) << r << " " << j;
        }
      }
    }
  }
}

// The contract: row v = (accumulate ? old : 0) + dout rows of id v in position order, in f32.
// Rows whose `used` entry is false are left out (bad ids on a device).
std::vector<float> backward_reference(const std::vector<float>& old, const std::vector<float>& dout,
                                      const std::vector<int64_t>& ids, int64_t vocab, int64_t dim,
                                      bool accumulate, DType dtable_type,
                                      const std::vector<bool>& used = {}) {
  std::vector<float> total(static_cast<size_t>(vocab * dim), 0.0f);
  std::vector<bool> named(static_cast<size_t>(vocab), false);
  for (int64_t v = 0; v < vocab; ++v) {
    for (int64_t j = 0; j < dim; ++j) total[v * dim + j] = accumulate ? old[v * dim + j] : 0.0f;
  }
  for (size_t r = 0; r < ids.size(); ++r) {
    if (!used.empty() && !used[r]) continue;
    named[ids[r]] = true;
    for (int64_t j = 0; j < dim; ++j) total[ids[r] * dim + j] += dout[r * dim + j];
  }
  for (int64_t v = 0; v < vocab; ++v) {
    for (int64_t j = 0; j < dim; ++j) {
      float& x = total[v * dim + j];
      x = accumulate && !named[v] ? old[v * dim + j] : rounded(x, dtable_type);
    }
  }
  return total;
}

TEST_P(Embedding, BackwardAddsEachRowsGradientsInPositionOrder) {
  Stream s = stream();
  uint32_t seed = 100;
  std::vector<Case> cases = kCases;
  cases.push_back({{300}, 4, 33});  // a few ids, each repeated ~75 times
  for (const Case& c : cases) {
    const int64_t n = c.ids.numel();
    std::vector<int64_t> ids = random_labels(n, c.vocab, seed++);
    for (DType dtable_type : kFloatTypes) {
      for (DType dout_type : kFloatTypes) {
        for (bool accumulate : {false, true}) {
          const Tensor old = ember::testing::random_tensor({c.vocab, c.dim}, seed++, dtable_type);
          const Tensor dout =
              ember::testing::random_tensor(rows_shape(c.ids, c.dim), seed++, dout_type);
          Tensor dtable = on(old.clone());
          const DType id_type = seed % 2 == 0 ? DType::i32 : DType::i64;
          ops::embedding_backward(s, dtable, on(dout), on(make_ids(ids, c.ids, id_type)),
                                  accumulate);
          const std::vector<float> want = backward_reference(
              values(old), values(dout), ids, c.vocab, c.dim, accumulate, dtable_type);
          const std::vector<float> got = values(dtable);
          for (size_t i = 0; i < want.size(); ++i) {
            ASSERT_EQ(ember::testing::bits(got[i]), ember::testing::bits(want[i]))
                << "element " << i << " (" << got[i] << " vs " << want[i] << ") ids "
                << c.ids.to_string() << " dtable " << dtype_name(dtable_type) << " dout "
                << dtype_name(dout_type) << " accumulate " << accumulate;
          }
          // Within f32 summation rounding of the exact (double) sums.
          if (dtable_type == DType::f32) {
            const std::vector<float> o = values(old), d = values(dout);
            std::vector<double> exact(want.size(), 0.0), magnitude(want.size(), 0.0);
            for (size_t i = 0; i < want.size(); ++i) {
              exact[i] = accumulate ? o[i] : 0.0;
              magnitude[i] = std::abs(exact[i]);
            }
            for (int64_t r = 0; r < n; ++r) {
              for (int64_t j = 0; j < c.dim; ++j) {
                exact[ids[r] * c.dim + j] += d[r * c.dim + j];
                magnitude[ids[r] * c.dim + j] += std::abs(d[r * c.dim + j]);
              }
            }
            for (size_t i = 0; i < want.size(); ++i) {
              ASSERT_NEAR(got[i], exact[i], magnitude[i] * n * 6e-8 + 1e-30) << i;
            }
          }
        }
      }
    }
  }
}

TEST_P(Embedding, BackwardOfOneRepeatedIdIsTheSameEveryRun) {
  Stream s = stream();
  const int64_t n = 1000, vocab = 6, dim = 19;
  const std::vector<int64_t> ids(n, 4);
  const Tensor dout = ember::testing::random_tensor({n, dim}, 7, DType::f32, device());
  const Tensor id_tensor = on(make_ids(ids, Shape{n}, DType::i32));
  Tensor first = on(Tensor::zeros({vocab, dim}));
  ops::embedding_backward(s, first, dout, id_tensor, false);
  const std::vector<float> want = backward_reference(
      std::vector<float>(vocab * dim, 0.0f), values(dout), ids, vocab, dim, false, DType::f32);
  EXPECT_EQ(values(first), want);
  for (int run = 0; run < 3; ++run) {
    Tensor again = on(Tensor::full({vocab, dim}, 5.0f));
    ops::embedding_backward(s, again, dout, id_tensor, false);
    EXPECT_EQ(raw(again), raw(first));
  }
}

TEST_P(Embedding, EmptyIds) {
  Stream s = stream();
  const Tensor table = ember::testing::random_tensor({4, 3}, 3, DType::f32, device());
  Tensor out = on(Tensor::zeros({0, 3}));
  ops::embedding_forward(s, out, table, on(Tensor::zeros({0}, DType::i32)));
  EXPECT_EQ(out.numel(), 0);
  // Nothing to add: accumulating leaves the table, writing zeroes it.
  Tensor dtable = on(table.clone());
  ops::embedding_backward(s, dtable, on(Tensor::zeros({2, 0, 3})),
                          on(Tensor::zeros({2, 0}, DType::i64)), true);
  EXPECT_EQ(raw(dtable), raw(table));
  ops::embedding_backward(s, dtable, on(Tensor::zeros({0, 3})), on(Tensor::zeros({0}, DType::i64)),
                          false);
  EXPECT_EQ(values(dtable), std::vector<float>(12, 0.0f));
}

TEST_P(Embedding, BackwardCarriesInfAndNan) {
  Stream s = stream();
  const std::vector<float> d = {1.0f, kInf, kNan, 2.0f, 3.0f, -kInf};
  Tensor dtable = on(Tensor::zeros({3, 2}));
  ops::embedding_backward(s, dtable, on(Tensor::from_vector(d, Shape{3, 2})),
                          on(make_ids({0, 2, 0}, Shape{3}, DType::i32)), false);
  const std::vector<float> got = values(dtable);
  EXPECT_EQ(got[0], 4.0f);
  EXPECT_TRUE(std::isnan(got[1]));  // inf + -inf
  EXPECT_EQ(got[2], 0.0f);
  EXPECT_EQ(got[3], 0.0f);
  EXPECT_TRUE(std::isnan(got[4]));
  EXPECT_EQ(got[5], 2.0f);
}

// A bad id is found on the device without a host wait: the Error comes from the stream's next
// synchronize, which each call here makes.
TEST_P(Embedding, BadIdsNameTheirRowAndValue) {
  Stream s = stream();
  const Tensor table = ember::testing::random_tensor({5, 4}, 3, DType::f32, device());
  for (DType id_type : {DType::i32, DType::i64}) {
    const Tensor ids = on(make_ids({0, 4, 2, 5, -1, 1}, Shape{2, 3}, id_type));
    Tensor out = on(Tensor::zeros({2, 3, 4}));
    expect_error(
        [&] {
          ops::embedding_forward(s, out, table, ids);
          s.synchronize();
        },
        {"ops::embedding_forward", "id 5 in row 3 is out of range [0, 5)", "ids "});
    // Freed memory full of huge values first: the backward's scratch must not read any of it as
    // a position (a bad id holds no slot).
    { const Tensor junk = on(Tensor::full({4096}, 1e30, DType::f32)); }
    const Tensor dout = ember::testing::random_tensor({2, 3, 4}, 9, DType::f32, device());
    Tensor dtable = on(Tensor::zeros({5, 4}));
    expect_error(
        [&] {
          ops::embedding_backward(s, dtable, dout, ids, false);
          s.synchronize();
        },
        {"ops::embedding_backward", "id 5 in row 3 is out of range [0, 5)"});
    if (!device().is_cpu()) {  // the CPU writes nothing; a device skips the bad rows only
      EXPECT_EQ(values(dtable), backward_reference(std::vector<float>(20, 0.0f), values(dout),
                                                   {0, 4, 2, 0, 0, 1}, 5, 4, false, DType::f32,
                                                   {true, true, true, false, false, true}));
    }
    const Tensor negative = on(make_ids({-7}, Shape{1}, id_type));
    Tensor one = on(Tensor::zeros({1, 4}));
    expect_error(
        [&] {
          ops::embedding_forward(s, one, table, negative);
          s.synchronize();
        },
        "id -7 in row 0 is out of range [0, 5)");
  }
  // After the errors, the stream works.
  Tensor out = on(Tensor::zeros({1, 4}));
  ops::embedding_forward(s, out, table, on(make_ids({3}, Shape{1}, DType::i32)));
  const std::vector<float> t = values(table);
  EXPECT_EQ(values(out), std::vector<float>(t.begin() + 12, t.begin() + 16));
}

TEST_P(Embedding, BadOperandsThrow) {
  Stream s = stream();
  const Tensor table = on(Tensor::zeros({5, 4}));
  const Tensor ids = on(make_ids({0, 1, 2}, Shape{3}, DType::i32));
  Tensor out = on(Tensor::zeros({3, 4}));
  expect_error([&] { ops::embedding_forward(s, out, table, on(Tensor::zeros({3}))); },
               {"ops::embedding_forward", "ids must be i32 or i64", "f32[3]"});
  Tensor wrong = on(Tensor::zeros({3, 5}));
  expect_error([&] { ops::embedding_forward(s, wrong, table, ids); },
               {"ops::embedding_forward", "out must be [3, 4]", "f32[3, 5]"});
  expect_error([&] { ops::embedding_forward(s, out, on(Tensor::zeros({20})), ids); },
               {"ops::embedding_forward", "table must be [vocab, dim]", "f32[20]"});
  Tensor int_out = on(Tensor::zeros({3, 4}, DType::i32));
  expect_error([&] { ops::embedding_forward(s, int_out, table, ids); },
               {"ops::embedding_forward", "out must be f32, f16 or bf16"});
  // out over the table's memory.
  const TensorView aliased{table.data(), DType::f32, Shape{3, 4}, table.device()};
  expect_error([&] { ops::embedding_forward(s, aliased, table, ids); },
               {"ops::embedding_forward", "shares memory"});
  Tensor dtable = on(Tensor::zeros({5, 4}));
  expect_error(
      [&] {
        ops::embedding_backward(s, dtable, on(Tensor::zeros({3, 5})), ids);
      },
      {"ops::embedding_backward", "dout must be [3, 4]"});
  const TensorView dtable_over_dout{out.data(), DType::f32, Shape{3, 4}, out.device()};
  expect_error([&] { ops::embedding_backward(s, dtable_over_dout, out, ids); },
               {"ops::embedding_backward", "shares memory"});
}

INSTANTIATE_EMBER_DEVICES(Embedding);

}  // namespace
