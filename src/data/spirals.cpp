#include "ember/data/spirals.hpp"

#include <cmath>
#include <numbers>

#include "ember/core/philox.hpp"

namespace ember::data {
namespace {
// Philox counter_hi of the spirals' noise, apart from Tensor::normal_'s 0 ("spirals" in ASCII).
constexpr uint64_t kSpiralsStream = 0x73706972616c73;
}  // namespace

Dataset make_spirals(const SpiralsOptions& o) {
  EMBER_CHECK(o.classes >= 2 && o.classes <= 1000, "make_spirals: classes is {}, not in [2, 1000]",
              o.classes);
  EMBER_CHECK(o.points_per_class >= 1 && o.points_per_class <= (int64_t{1} << 40) / o.classes,
              "make_spirals: points_per_class is {}, not in [1, 2^40 / classes]",
              o.points_per_class);
  EMBER_CHECK(std::isfinite(o.noise) && o.noise >= 0, "make_spirals: noise {} is not >= 0",
              o.noise);
  EMBER_CHECK(std::isfinite(o.turns) && o.turns > 0 && o.turns <= 100,
              "make_spirals: turns {} is not in (0, 100]", o.turns);

  const int64_t n = o.classes * o.points_per_class;
  Dataset d;
  d.inputs = Tensor::empty({n, 2});
  d.labels = Tensor::empty({n}, DType::i32);
  d.num_classes = o.classes;
  float* xy = d.inputs.data<float>();
  int32_t* labels = d.labels.data<int32_t>();

  // Arm k is the curve r = t, angle = 2 pi (turns t + k / classes) for t in (0, 1]. Along any
  // ray from the centre consecutive arms are 1 / (classes * turns) apart, so noise is measured
  // in that gap: the overlap between arms, and hence the best achievable accuracy, depends on
  // `noise` alone.
  const double gap = 1.0 / (static_cast<double>(o.classes) * o.turns);
  const double sigma = o.noise * gap;
  const double two_pi = 2 * std::numbers::pi;
#pragma omp parallel for schedule(static) if (n > 16384)
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = i / o.points_per_class, j = i % o.points_per_class;
    const double t = (static_cast<double>(j) + 1) / static_cast<double>(o.points_per_class);
    const double angle =
        two_pi * (o.turns * t + static_cast<double>(k) / static_cast<double>(o.classes));
    // Two independent standard normals by Box-Muller from one Philox block.
    const Philox4x32 r = philox4x32(o.seed, static_cast<uint64_t>(i), kSpiralsStream);
    const double u1 = (static_cast<double>(r.v[0]) + 1.0) / 4294967296.0;  // (0, 1]
    const double u2 = static_cast<double>(r.v[1]) / 4294967296.0;
    const double radius = std::sqrt(-2.0 * std::log(u1));
    xy[2 * i] = static_cast<float>(t * std::cos(angle) + sigma * radius * std::cos(two_pi * u2));
    xy[2 * i + 1] =
        static_cast<float>(t * std::sin(angle) + sigma * radius * std::sin(two_pi * u2));
    labels[i] = static_cast<int32_t>(k);
  }

  // Standardise each coordinate; sums run serially, so the result is thread-count independent.
  for (int c = 0; c < 2; ++c) {
    double sum = 0, sum_sq = 0;
    for (int64_t i = 0; i < n; ++i) sum += xy[2 * i + c];
    const double mean = sum / static_cast<double>(n);
    for (int64_t i = 0; i < n; ++i) sum_sq += (xy[2 * i + c] - mean) * (xy[2 * i + c] - mean);
    const double stddev = std::sqrt(sum_sq / static_cast<double>(n));
    const double scale = stddev > 0 ? 1.0 / stddev : 1.0;
    for (int64_t i = 0; i < n; ++i) {
      xy[2 * i + c] = static_cast<float>((xy[2 * i + c] - mean) * scale);
    }
  }
  return d;
}

}  // namespace ember::data
