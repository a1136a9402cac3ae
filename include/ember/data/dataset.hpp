// In-memory classification datasets and the seeded shuffling, splitting and batching that
// training loops need. Everything is deterministic: it depends only on the seeds given.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "ember/core/tensor.hpp"

namespace ember::data {

struct Dataset {
  Tensor inputs;  // [N, D] f32 on the cpu
  Tensor labels;  // [N] i32 on the cpu, each in [0, num_classes)
  int64_t num_classes = 0;

  int64_t size() const;  // N; 0 when the dataset holds nothing
};

// A permutation of [0, n) that depends only on (seed, epoch): a Fisher-Yates shuffle driven by
// Philox, so it is the same on every machine and at every thread count.
std::vector<int64_t> permutation(int64_t n, uint64_t seed, uint64_t epoch);

// Shuffles `all` with `seed` and splits off the last round(validation_fraction * N) rows as the
// validation set (at most N - 1, so the training set is never empty): {train, validation}.
// Throws for a fraction outside [0, 1) and for a malformed dataset (bad dtypes, shapes, devices,
// or labels outside [0, num_classes)).
std::pair<Dataset, Dataset> split(const Dataset& all, double validation_fraction, uint64_t seed);

// Copies the given rows of `d` into x [rows.size(), D] (f32) and y [rows.size()] (i32), both
// host memory. Throws for a row outside [0, N) or outputs of the wrong dtype, shape or device.
void gather(const Dataset& d, std::span<const int64_t> rows, const TensorView& x,
            const TensorView& y);

}  // namespace ember::data
