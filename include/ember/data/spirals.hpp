// The many-armed 2-D spiral classification problem: a small synthetic task that a linear model
// cannot solve but an MLP can, generated deterministically from a seed.
#pragma once

#include <cstdint>

#include "ember/data/dataset.hpp"

namespace ember::data {

struct SpiralsOptions {
  int64_t classes = 10;  // arms, one class each (2 to 1000)
  int64_t points_per_class = 2000;
  double noise = 0.15;  // standard deviation of the Gaussian jitter, in units of the arm gap
  double turns = 1.5;   // how many times each arm winds around the centre
  uint64_t seed = 1;
};

// classes * points_per_class points, class by class; inputs [N, 2] are standardised (zero mean,
// unit variance per coordinate). Point i depends only on (seed, i), never on the thread count.
Dataset make_spirals(const SpiralsOptions& options);

}  // namespace ember::data
