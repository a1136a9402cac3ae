#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <string>
#include <vector>

#include "ember/data/dataset.hpp"
#include "ember/data/spirals.hpp"
#include "test_support.hpp"

namespace {

using ember::testing::error_message;

using ember::data::Dataset;
using ember::data::make_spirals;
using ember::data::SpiralsOptions;

// Options with the given fields.
SpiralsOptions spirals(int64_t classes, int64_t points_per_class, uint64_t seed = 1,
                       double noise = SpiralsOptions{}.noise) {
  SpiralsOptions o;
  o.classes = classes;
  o.points_per_class = points_per_class;
  o.seed = seed;
  o.noise = noise;
  return o;
}

std::vector<uint32_t> input_bits(const Dataset& d) {
  std::vector<uint32_t> out;
  for (float v : d.inputs.to_vector<float>()) out.push_back(std::bit_cast<uint32_t>(v));
  return out;
}

// Least-squares linear classifier: fit one-hot targets with [x, y, 1] by the normal equations
// (3x3, solved by Gaussian elimination), predict the arg-max; returns accuracy on `test`.
double least_squares_accuracy(const Dataset& train, const Dataset& test) {
  const int64_t classes = train.num_classes;
  const std::vector<float> x = train.inputs.to_vector<float>();
  const std::vector<int32_t> y = train.labels.to_vector<int32_t>();
  // Augmented system [A | B] with A = F^T F (3x3) and B = F^T Y (3 x classes).
  std::vector<std::vector<double>> m(3, std::vector<double>(static_cast<size_t>(3 + classes)));
  for (size_t i = 0; i < y.size(); ++i) {
    const std::array<double, 3> f{x[2 * i], x[2 * i + 1], 1.0};
    for (size_t r = 0; r < 3; ++r) {
      for (size_t c = 0; c < 3; ++c) m[r][c] += f[r] * f[c];
      m[r][3 + static_cast<size_t>(y[i])] += f[r];
    }
  }
  for (size_t p = 0; p < 3; ++p) {
    for (size_t r = 0; r < 3; ++r) {
      if (r == p) continue;
      const double factor = m[r][p] / m[p][p];
      for (size_t c = 0; c < m[r].size(); ++c) m[r][c] -= factor * m[p][c];
    }
  }
  const std::vector<float> tx = test.inputs.to_vector<float>();
  const std::vector<int32_t> ty = test.labels.to_vector<int32_t>();
  int64_t correct = 0;
  for (size_t i = 0; i < ty.size(); ++i) {
    const std::array<double, 3> f{tx[2 * i], tx[2 * i + 1], 1.0};
    int64_t best = 0;
    double best_score = -INFINITY;
    for (int64_t k = 0; k < classes; ++k) {
      double score = 0;
      for (size_t r = 0; r < 3; ++r) score += f[r] * m[r][3 + static_cast<size_t>(k)] / m[r][r];
      if (score > best_score) best_score = score, best = k;
    }
    correct += best == ty[i];
  }
  return static_cast<double>(correct) / static_cast<double>(ty.size());
}

// Nearest class mean: another linear rule.
double nearest_mean_accuracy(const Dataset& train, const Dataset& test) {
  const size_t classes = static_cast<size_t>(train.num_classes);
  const std::vector<float> x = train.inputs.to_vector<float>();
  const std::vector<int32_t> y = train.labels.to_vector<int32_t>();
  std::vector<double> sx(classes), sy(classes), count(classes);
  for (size_t i = 0; i < y.size(); ++i) {
    const size_t k = static_cast<size_t>(y[i]);
    sx[k] += x[2 * i], sy[k] += x[2 * i + 1], count[k] += 1;
  }
  const std::vector<float> tx = test.inputs.to_vector<float>();
  const std::vector<int32_t> ty = test.labels.to_vector<int32_t>();
  int64_t correct = 0;
  for (size_t i = 0; i < ty.size(); ++i) {
    size_t best = 0;
    double best_distance = INFINITY;
    for (size_t k = 0; k < classes; ++k) {
      const double dx = tx[2 * i] - sx[k] / count[k], dy = tx[2 * i + 1] - sy[k] / count[k];
      if (dx * dx + dy * dy < best_distance) best_distance = dx * dx + dy * dy, best = k;
    }
    correct += static_cast<int32_t>(best) == ty[i];
  }
  return static_cast<double>(correct) / static_cast<double>(ty.size());
}

// 5-nearest-neighbour vote: a non-linear rule that shows the classes are separable.
double knn_accuracy(const Dataset& train, const Dataset& test) {
  constexpr size_t kNeighbours = 5;
  const std::vector<float> x = train.inputs.to_vector<float>();
  const std::vector<int32_t> y = train.labels.to_vector<int32_t>();
  const std::vector<float> tx = test.inputs.to_vector<float>();
  const std::vector<int32_t> ty = test.labels.to_vector<int32_t>();
  int64_t correct = 0;
#pragma omp parallel for reduction(+ : correct)
  for (size_t i = 0; i < ty.size(); ++i) {
    std::vector<std::pair<float, int32_t>> distances(y.size());
    for (size_t j = 0; j < y.size(); ++j) {
      const float dx = tx[2 * i] - x[2 * j], dy = tx[2 * i + 1] - x[2 * j + 1];
      distances[j] = {dx * dx + dy * dy, y[j]};
    }
    std::partial_sort(distances.begin(), distances.begin() + kNeighbours, distances.end());
    std::vector<int> votes(static_cast<size_t>(train.num_classes));
    for (size_t j = 0; j < kNeighbours; ++j) ++votes[static_cast<size_t>(distances[j].second)];
    const auto winner = std::max_element(votes.begin(), votes.end()) - votes.begin();
    correct += winner == ty[i];
  }
  return static_cast<double>(correct) / static_cast<double>(ty.size());
}

TEST(Spirals, ShapesLabelsAndClassBalance) {
  const Dataset d = make_spirals(spirals(7, 300));
  EXPECT_EQ(d.size(), 2100);
  EXPECT_EQ(d.num_classes, 7);
  EXPECT_EQ(d.inputs.shape(), (ember::Shape{2100, 2}));
  EXPECT_EQ(d.inputs.dtype(), ember::DType::f32);
  EXPECT_EQ(d.labels.shape(), (ember::Shape{2100}));
  EXPECT_EQ(d.labels.dtype(), ember::DType::i32);
  EXPECT_TRUE(d.inputs.device().is_cpu());
  std::vector<int64_t> per_class(7);
  for (int32_t label : d.labels.to_vector<int32_t>()) {
    ASSERT_GE(label, 0);
    ASSERT_LT(label, 7);
    ++per_class[static_cast<size_t>(label)];
  }
  EXPECT_EQ(per_class, std::vector<int64_t>(7, 300));
}

TEST(Spirals, StandardisedInputs) {
  const Dataset d = make_spirals({});
  const std::vector<float> xy = d.inputs.to_vector<float>();
  for (size_t c = 0; c < 2; ++c) {
    double sum = 0, sum_sq = 0;
    for (size_t i = c; i < xy.size(); i += 2) {
      ASSERT_TRUE(std::isfinite(xy[i]));
      sum += xy[i], sum_sq += static_cast<double>(xy[i]) * xy[i];
    }
    const double n = static_cast<double>(xy.size() / 2), mean = sum / n;
    EXPECT_NEAR(mean, 0.0, 1e-4) << "coordinate " << c;
    EXPECT_NEAR(std::sqrt(sum_sq / n - mean * mean), 1.0, 1e-4) << "coordinate " << c;
  }
}

TEST(Spirals, DeterministicSeededAndThreadCountIndependent) {
  const SpiralsOptions options = spirals(5, 5000, 9);
  const int before = omp_get_max_threads();
  omp_set_num_threads(1);
  const Dataset one = make_spirals(options);
  omp_set_num_threads(4);
  const Dataset four = make_spirals(options);
  omp_set_num_threads(before);
  EXPECT_EQ(input_bits(one), input_bits(four));
  EXPECT_EQ(one.labels.to_vector<int32_t>(), four.labels.to_vector<int32_t>());
  EXPECT_EQ(input_bits(make_spirals(options)), input_bits(one));
  SpiralsOptions other = options;
  other.seed = 10;
  EXPECT_NE(input_bits(make_spirals(other)), input_bits(one));
  other = options;
  other.noise = 0;  // noise-free arms are the same curves for every seed
  SpiralsOptions other_seed = other;
  other_seed.seed = 11;
  EXPECT_EQ(input_bits(make_spirals(other)), input_bits(make_spirals(other_seed)));
}

// The point of the data set: linear rules do poorly, a non-linear one does well. The limits
// are far from the measured values (least squares 0.12, nearest mean 0.13, 5-NN 0.96 on 10
// classes), so they do not depend on the seed.
TEST(Spirals, LinearModelsFailWhereNearestNeighboursSucceed) {
  const Dataset all = make_spirals(spirals(10, 500, 4));
  const auto [train, test] = ember::data::split(all, 0.2, 4);
  const double least_squares = least_squares_accuracy(train, test);
  const double nearest_mean = nearest_mean_accuracy(train, test);
  const double knn = knn_accuracy(train, test);
  RecordProperty("least_squares", std::to_string(least_squares));
  RecordProperty("knn", std::to_string(knn));
  EXPECT_LT(least_squares, 0.4);
  EXPECT_LT(nearest_mean, 0.4);
  EXPECT_GT(knn, 0.85);
}

TEST(Spirals, NoiseMakesItHarder) {
  const Dataset clean = make_spirals(spirals(5, 400, 1, 0.1));
  const Dataset noisy = make_spirals(spirals(5, 400, 1, 1.0));
  const auto [clean_train, clean_test] = ember::data::split(clean, 0.25, 1);
  const auto [noisy_train, noisy_test] = ember::data::split(noisy, 0.25, 1);
  EXPECT_GT(knn_accuracy(clean_train, clean_test), knn_accuracy(noisy_train, noisy_test) + 0.1);
}

TEST(Spirals, RejectsBadOptions) {
  struct Case {
    void (*change)(SpiralsOptions&);
    const char* expected;
  };
  const Case cases[] = {
      {[](SpiralsOptions& o) { o.classes = 1; }, "classes is 1"},
      {[](SpiralsOptions& o) { o.classes = 0; }, "classes is 0"},
      {[](SpiralsOptions& o) { o.classes = 2000; }, "classes is 2000"},
      {[](SpiralsOptions& o) { o.points_per_class = 0; }, "points_per_class is 0"},
      {[](SpiralsOptions& o) { o.points_per_class = -5; }, "points_per_class is -5"},
      {[](SpiralsOptions& o) { o.points_per_class = int64_t{1} << 50; }, "points_per_class is"},
      {[](SpiralsOptions& o) { o.noise = -0.1; }, "noise -0.1"},
      {[](SpiralsOptions& o) { o.noise = NAN; }, "noise nan"},
      {[](SpiralsOptions& o) { o.turns = 0; }, "turns 0"},
      {[](SpiralsOptions& o) { o.turns = INFINITY; }, "turns inf"},
  };
  for (const Case& c : cases) {
    SpiralsOptions options;
    c.change(options);
    const std::string message = error_message([&] { make_spirals(options); });
    EXPECT_NE(message.find(c.expected), std::string::npos) << message;
    EXPECT_NE(message.find("make_spirals"), std::string::npos) << message;
  }
}

}  // namespace
