#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "ember/data/dataset.hpp"
#include "test_support.hpp"

namespace {

using ember::testing::error_message;

using ember::DType;
using ember::Tensor;
using ember::data::Dataset;
using ember::data::gather;
using ember::data::permutation;
using ember::data::split;

// n rows of 3 features; row i holds {i, 10 i, 100 i} and label i % classes, so every row of a
// gathered or split set can be traced back to where it came from.
Dataset numbered(int64_t n, int64_t classes = 4) {
  std::vector<float> x;
  std::vector<int32_t> y;
  for (int64_t i = 0; i < n; ++i) {
    x.insert(x.end(), {static_cast<float>(i), 10.0f * static_cast<float>(i),
                       100.0f * static_cast<float>(i)});
    y.push_back(static_cast<int32_t>(i % classes));
  }
  Dataset d;
  d.inputs = Tensor::from_vector(x, {n, 3});
  d.labels = Tensor::from_vector(y, {n});
  d.num_classes = classes;
  return d;
}

// The original row index of every row of a `numbered` dataset, checking the row is intact.
std::vector<int64_t> origins(const Dataset& d) {
  const std::vector<float> x = d.inputs.to_vector<float>();
  const std::vector<int32_t> y = d.labels.to_vector<int32_t>();
  std::vector<int64_t> out;
  for (size_t r = 0; r < y.size(); ++r) {
    const int64_t i = static_cast<int64_t>(x[3 * r]);
    EXPECT_EQ(x[3 * r + 1], 10.0f * static_cast<float>(i));
    EXPECT_EQ(x[3 * r + 2], 100.0f * static_cast<float>(i));
    EXPECT_EQ(y[r], i % d.num_classes);
    out.push_back(i);
  }
  return out;
}

bool is_permutation_of_range(std::vector<int64_t> p) {
  std::sort(p.begin(), p.end());
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

TEST(DatasetPermutation, IsAPermutation) {
  for (int64_t n : {0, 1, 2, 3, 10, 1000, 100003}) {
    const std::vector<int64_t> p = permutation(n, 42, 0);
    ASSERT_EQ(static_cast<int64_t>(p.size()), n);
    EXPECT_TRUE(is_permutation_of_range(p)) << n;
  }
}

TEST(DatasetPermutation, DependsOnlyOnSeedAndEpoch) {
  const std::vector<int64_t> a = permutation(5000, 7, 3);
  EXPECT_EQ(permutation(5000, 7, 3), a);
  EXPECT_NE(permutation(5000, 8, 3), a);
  EXPECT_NE(permutation(5000, 7, 4), a);
  std::vector<int64_t> identity(5000);
  std::iota(identity.begin(), identity.end(), int64_t{0});
  EXPECT_NE(a, identity);
  const int before = omp_get_max_threads();
  omp_set_num_threads(1);
  const std::vector<int64_t> one = permutation(5000, 7, 3);
  omp_set_num_threads(before);
  EXPECT_EQ(one, a);
  EXPECT_THROW(permutation(-1, 0, 0), ember::Error);
}

// Every element should land in every position with probability 1/n. With n = 4 and 24000
// shuffles each of the 16 (element, position) counts is Binomial(24000, 1/4): mean 6000,
// standard deviation 67; allow 6 of them.
TEST(DatasetPermutation, PositionsAreUniform) {
  constexpr int64_t kN = 4, kTrials = 24000;
  int64_t counts[kN][kN] = {};
  for (int64_t epoch = 0; epoch < kTrials; ++epoch) {
    const std::vector<int64_t> p = permutation(kN, 99, static_cast<uint64_t>(epoch));
    for (int64_t pos = 0; pos < kN; ++pos) ++counts[p[static_cast<size_t>(pos)]][pos];
  }
  const double mean = static_cast<double>(kTrials) / kN;
  const double sd = std::sqrt(kTrials * (1.0 / kN) * (1 - 1.0 / kN));
  for (const auto& row : counts) {
    for (int64_t c : row) EXPECT_NEAR(static_cast<double>(c), mean, 6 * sd);
  }
}

TEST(DatasetSplit, SizesDisjointnessAndCoverage) {
  const Dataset all = numbered(1000);
  const auto [train, validation] = split(all, 0.2, 5);
  EXPECT_EQ(train.size(), 800);
  EXPECT_EQ(validation.size(), 200);
  EXPECT_EQ(train.num_classes, 4);
  EXPECT_EQ(validation.num_classes, 4);
  EXPECT_EQ(train.inputs.shape(), (ember::Shape{800, 3}));
  EXPECT_EQ(validation.labels.shape(), (ember::Shape{200}));
  const std::vector<int64_t> t = origins(train), v = origins(validation);
  std::set<int64_t> seen(t.begin(), t.end());
  for (int64_t i : v) EXPECT_TRUE(seen.insert(i).second) << "row " << i << " is in both sets";
  EXPECT_EQ(seen.size(), 1000u);
  // The split is a shuffle: validation is not simply the last rows.
  EXPECT_LT(*std::min_element(v.begin(), v.end()), 800);
  // The split copies: the original is untouched and independent.
  EXPECT_NE(train.inputs.data(), all.inputs.data());
}

TEST(DatasetSplit, DeterministicForASeed) {
  const Dataset all = numbered(300);
  const auto [a_train, a_val] = split(all, 0.3, 1);
  const auto [b_train, b_val] = split(all, 0.3, 1);
  const auto [c_train, c_val] = split(all, 0.3, 2);
  EXPECT_EQ(origins(a_train), origins(b_train));
  EXPECT_EQ(origins(a_val), origins(b_val));
  EXPECT_NE(origins(a_val), origins(c_val));
}

TEST(DatasetSplit, RoundsAndKeepsTrainingNonEmpty) {
  EXPECT_EQ(split(numbered(10), 0.25, 1).second.size(), 3);  // round(2.5) = 3
  EXPECT_EQ(split(numbered(10), 0.0, 1).second.size(), 0);
  EXPECT_EQ(split(numbered(10), 0.0, 1).first.size(), 10);
  EXPECT_EQ(split(numbered(10), 0.99, 1).first.size(), 1);  // at most N - 1 for validation
  EXPECT_EQ(split(numbered(1), 0.5, 1).first.size(), 1);
  const auto [train, validation] = split(numbered(0), 0.5, 1);
  EXPECT_EQ(train.size(), 0);
  EXPECT_EQ(validation.size(), 0);
  EXPECT_EQ(train.inputs.shape(), (ember::Shape{0, 3}));
}

TEST(DatasetSplit, RejectsBadFractionsAndData) {
  const Dataset all = numbered(10);
  for (double f : {-0.1, 1.0, 1.5, static_cast<double>(NAN)}) {
    const std::string message = error_message([&] { split(all, f, 1); });
    EXPECT_NE(message.find("validation_fraction"), std::string::npos) << message;
    EXPECT_NE(message.find("outside [0, 1)"), std::string::npos) << message;
  }
  Dataset bad_label = numbered(10);
  bad_label.labels.data<int32_t>()[7] = 4;
  EXPECT_NE(error_message([&] {
              split(bad_label, 0.1, 1);
            }).find("split: label 4 of row 7 is outside [0, 4)"),
            std::string::npos);
  bad_label.labels.data<int32_t>()[7] = -1;
  EXPECT_THROW(split(bad_label, 0.1, 1), ember::Error);
  Dataset bad_dtype = numbered(10);
  bad_dtype.inputs = bad_dtype.inputs.to(DType::f16);
  EXPECT_NE(error_message([&] {
              split(bad_dtype, 0.1, 1);
            }).find("inputs must be f32 [N, D] on the cpu, not f16[10, 3] on cpu"),
            std::string::npos);
  Dataset short_labels = numbered(10);
  short_labels.labels = short_labels.labels.slice(0, 9);
  EXPECT_NE(error_message([&] { split(short_labels, 0.1, 1); }).find("10 input rows but 9 labels"),
            std::string::npos);
  Dataset no_classes = numbered(10);
  no_classes.num_classes = 0;
  EXPECT_NE(error_message([&] { split(no_classes, 0.1, 1); }).find("num_classes is 0"),
            std::string::npos);
  EXPECT_NE(error_message([&] { split(Dataset{}, 0.1, 1); }).find("no inputs or labels"),
            std::string::npos);
}

TEST(DatasetGather, CopiesTheRequestedRows) {
  const Dataset d = numbered(50, 7);
  const std::vector<int64_t> rows{49, 0, 13, 13, 2};
  Tensor x = Tensor::full({5, 3}, -1.0), y = Tensor::full({5}, -1.0, DType::i32);
  gather(d, rows, x, y);
  Dataset out;
  out.inputs = x;
  out.labels = y;
  out.num_classes = 7;
  EXPECT_EQ(origins(out), rows);
  // Views of user memory work too, as do empty batches.
  std::vector<float> xs(6);
  std::vector<int32_t> ys(2);
  gather(d, std::vector<int64_t>{3, 4},
         ember::TensorView{xs.data(), DType::f32, ember::Shape{2, 3}, ember::Device::cpu()},
         ember::TensorView{ys.data(), DType::i32, ember::Shape{2}, ember::Device::cpu()});
  EXPECT_EQ(xs, (std::vector<float>{3, 30, 300, 4, 40, 400}));
  EXPECT_EQ(ys, (std::vector<int32_t>{3, 4}));
  gather(d, {}, Tensor::empty({0, 3}), Tensor::empty({0}, DType::i32));
}

TEST(DatasetGather, LargeBatchesMatchAtAnyThreadCount) {
  const Dataset d = numbered(200000);
  const std::vector<int64_t> rows = permutation(200000, 3, 0);
  Tensor x1 = Tensor::empty({200000, 3}), y1 = Tensor::empty({200000}, DType::i32);
  Tensor x4 = Tensor::empty({200000, 3}), y4 = Tensor::empty({200000}, DType::i32);
  const int before = omp_get_max_threads();
  omp_set_num_threads(1);
  gather(d, rows, x1, y1);
  omp_set_num_threads(4);
  gather(d, rows, x4, y4);
  omp_set_num_threads(before);
  EXPECT_EQ(x1.to_vector<float>(), x4.to_vector<float>());
  EXPECT_EQ(y1.to_vector<int32_t>(), y4.to_vector<int32_t>());
  EXPECT_EQ(x1.to_vector<float>()[3], static_cast<float>(rows[1]));
}

TEST(DatasetGather, RejectsBadRowsAndOutputs) {
  const Dataset d = numbered(10);
  Tensor x = Tensor::empty({2, 3}), y = Tensor::empty({2}, DType::i32);
  for (int64_t bad : {int64_t{10}, int64_t{-1}, int64_t{1} << 40}) {
    const std::vector<int64_t> rows{0, bad};
    const std::string message = error_message([&] { gather(d, rows, x, y); });
    EXPECT_NE(message.find("row index " + std::to_string(bad) + " (at position 1)"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("[0, 10)"), std::string::npos) << message;
  }
  const std::vector<int64_t> rows{0, 1};
  EXPECT_NE(error_message([&] {
              gather(d, rows, Tensor::empty({3, 3}), y);
            }).find("x must be f32[2, 3] on cpu for 2 rows of 3 features, not f32[3, 3] on cpu"),
            std::string::npos);
  EXPECT_THROW(gather(d, rows, Tensor::empty({2, 4}), y), ember::Error);
  EXPECT_THROW(gather(d, rows, Tensor::empty({2, 3}, DType::f16), y), ember::Error);
  EXPECT_THROW(gather(d, rows, Tensor::empty({6}), y), ember::Error);
  EXPECT_NE(error_message([&] {
              gather(d, rows, x, Tensor::empty({2}));
            }).find("y must be i32[2] on cpu, not f32[2] on cpu"),
            std::string::npos);
  EXPECT_THROW(gather(d, rows, x, Tensor::empty({3}, DType::i32)), ember::Error);
  EXPECT_THROW(gather(d, rows, ember::TensorView{nullptr, DType::f32, ember::Shape{2, 3}, {}}, y),
               ember::Error);
  Dataset labels_on_rows = d;
  labels_on_rows.labels = Tensor::empty({10, 1}, DType::i32);
  EXPECT_NE(error_message([&] {
              gather(labels_on_rows, rows, x, y);
            }).find("labels must be i32 [N] on the cpu, not i32[10, 1] on cpu"),
            std::string::npos);
}

TEST(DatasetSize, CountsRows) {
  EXPECT_EQ(Dataset{}.size(), 0);
  EXPECT_EQ(numbered(17).size(), 17);
}

}  // namespace
