#include "ember/data/dataset.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string_view>

#include "ember/core/philox.hpp"

namespace ember::data {
namespace {

// Philox counter tags keep these shuffles' random streams apart from Tensor::uniform_/normal_,
// which use counters (i, 0) with small i: permutation() sets the top bit of the low counter
// word, split() the next one.
constexpr uint64_t kPermutationTag = uint64_t{1} << 63;
constexpr uint64_t kSplitTag = uint64_t{1} << 62;

// The O(1) checks every function makes on the dataset it is given.
void check_layout(const Dataset& d, std::string_view op) {
  EMBER_CHECK(d.inputs.defined() && d.labels.defined(),
              "{}: the dataset has no inputs or labels (undefined tensors)", op);
  EMBER_CHECK(d.inputs.dtype() == DType::f32 && d.inputs.rank() == 2 && d.inputs.device().is_cpu(),
              "{}: dataset inputs must be f32 [N, D] on the cpu, not {}", op,
              d.inputs.view().describe());
  EMBER_CHECK(d.labels.dtype() == DType::i32 && d.labels.rank() == 1 && d.labels.device().is_cpu(),
              "{}: dataset labels must be i32 [N] on the cpu, not {}", op,
              d.labels.view().describe());
  EMBER_CHECK(d.inputs.shape()[0] == d.labels.shape()[0],
              "{}: the dataset has {} input rows but {} labels", op, d.inputs.shape()[0],
              d.labels.shape()[0]);
  EMBER_CHECK(d.num_classes > 0, "{}: the dataset's num_classes is {}, not positive", op,
              d.num_classes);
}

// The O(N) check: every label names a class.
void check_labels(const Dataset& d, std::string_view op) {
  const int32_t* labels = d.labels.data<int32_t>();
  for (int64_t i = 0; i < d.size(); ++i) {
    EMBER_CHECK(labels[i] >= 0 && labels[i] < d.num_classes,
                "{}: label {} of row {} is outside [0, {})", op, labels[i], i, d.num_classes);
  }
}

// A uniform integer in [0, bound) from 64 random bits by multiply-and-shift (Lemire); the
// bias, at most bound / 2^64, is far below anything a shuffle could show.
uint64_t uniform_below(uint64_t bound, const Philox4x32& r) {
  __extension__ typedef unsigned __int128 u128;
  const uint64_t bits = (static_cast<uint64_t>(r.v[1]) << 32) | r.v[0];
  return static_cast<uint64_t>((static_cast<u128>(bits) * bound) >> 64);
}

// Fisher-Yates: the swap partner of position i comes from Philox counter (i | tag, epoch).
std::vector<int64_t> shuffle(int64_t n, uint64_t seed, uint64_t tag, uint64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  for (int64_t i = n - 1; i > 0; --i) {
    const uint64_t at = static_cast<uint64_t>(i);
    const uint64_t j = uniform_below(at + 1, philox4x32(seed, at | tag, epoch));
    std::swap(order[at], order[j]);
  }
  return order;
}

Dataset gathered(const Dataset& all, std::span<const int64_t> rows) {
  const int64_t n = static_cast<int64_t>(rows.size());
  Dataset d;
  d.inputs = Tensor::empty({n, all.inputs.shape()[1]});
  d.labels = Tensor::empty({n}, DType::i32);
  d.num_classes = all.num_classes;
  gather(all, rows, d.inputs, d.labels);
  return d;
}

}  // namespace

int64_t Dataset::size() const {
  return inputs.defined() && inputs.rank() >= 1 ? inputs.shape()[0] : 0;
}

std::vector<int64_t> permutation(int64_t n, uint64_t seed, uint64_t epoch) {
  EMBER_CHECK(n >= 0, "permutation: n is negative ({})", n);
  return shuffle(n, seed, kPermutationTag, epoch);
}

std::pair<Dataset, Dataset> split(const Dataset& all, double validation_fraction, uint64_t seed) {
  check_layout(all, "split");
  check_labels(all, "split");
  EMBER_CHECK(validation_fraction >= 0 && validation_fraction < 1,
              "split: validation_fraction {} is outside [0, 1)", validation_fraction);
  const int64_t n = all.size();
  const int64_t wanted = std::llround(validation_fraction * static_cast<double>(n));
  const int64_t n_validation = std::min(wanted, std::max<int64_t>(n - 1, 0));
  const std::vector<int64_t> order = shuffle(n, seed, kSplitTag, 0);
  const std::span<const int64_t> rows(order);
  const size_t n_train = static_cast<size_t>(n - n_validation);
  return {gathered(all, rows.first(n_train)), gathered(all, rows.subspan(n_train))};
}

void gather(const Dataset& d, std::span<const int64_t> rows, const TensorView& x,
            const TensorView& y) {
  check_layout(d, "gather");
  const int64_t n = d.size(), features = d.inputs.shape()[1];
  const int64_t batch = static_cast<int64_t>(rows.size());
  EMBER_CHECK(x.dtype == DType::f32 && x.device.is_cpu() && x.shape == Shape({batch, features}),
              "gather: x must be f32[{}, {}] on cpu for {} rows of {} features, not {}", batch,
              features, batch, features, x.describe());
  EMBER_CHECK(y.dtype == DType::i32 && y.device.is_cpu() && y.shape == Shape({batch}),
              "gather: y must be i32[{}] on cpu, not {}", batch, y.describe());
  EMBER_CHECK((x.data != nullptr || x.numel() == 0) && (y.data != nullptr || batch == 0),
              "gather: x or y has no data");
  for (size_t i = 0; i < rows.size(); ++i) {
    EMBER_CHECK(rows[i] >= 0 && rows[i] < n,
                "gather: row index {} (at position {}) is outside the dataset's [0, {})", rows[i],
                i, n);
  }
  const float* inputs = d.inputs.data<float>();
  const int32_t* labels = d.labels.data<int32_t>();
  float* out_x = x.as<float>();
  int32_t* out_y = y.as<int32_t>();
  const size_t row_bytes = static_cast<size_t>(features) * sizeof(float);
#pragma omp parallel for schedule(static) if (batch * features > (1 << 18))
  for (int64_t i = 0; i < batch; ++i) {
    const int64_t row = rows[static_cast<size_t>(i)];
    std::memcpy(out_x + i * features, inputs + row * features, row_bytes);
    out_y[i] = labels[row];
  }
}

}  // namespace ember::data
