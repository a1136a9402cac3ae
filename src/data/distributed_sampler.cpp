#include "ember/data/distributed_sampler.hpp"

#include "ember/core/error.hpp"
#include "ember/data/dataset.hpp"

namespace ember::data {

DistributedSampler::DistributedSampler(int64_t size, int world_size, int rank, Options options)
    : size_(size), world_(world_size), rank_(rank), options_(options) {
  EMBER_CHECK(size >= 0, "DistributedSampler: the dataset size must be >= 0, not {}", size);
  EMBER_CHECK(world_size >= 1 && rank >= 0 && rank < world_size,
              "DistributedSampler: rank {} of {} ranks is not valid", rank, world_size);
  if (options.remainder == Remainder::pad) {
    EMBER_CHECK(size > 0, "DistributedSampler: an empty dataset has nothing to give {} ranks",
                world_size);
  } else {
    EMBER_CHECK(size >= world_size,
                "DistributedSampler: {} rows cannot give each of {} ranks one with "
                "Remainder::drop",
                size, world_size);
  }
}

int64_t DistributedSampler::rows_per_rank() const {
  return options_.remainder == Remainder::pad ? (size_ + world_ - 1) / world_ : size_ / world_;
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> order;
  if (options_.shuffle) {
    order = permutation(size_, options_.seed, epoch_);
  } else {
    order.resize(static_cast<size_t>(size_));
    for (int64_t i = 0; i < size_; ++i) order[static_cast<size_t>(i)] = i;
  }
  const int64_t per_rank = rows_per_rank();
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(per_rank));
  for (int64_t k = 0; k < per_rank; ++k) {
    const int64_t position = k * world_ + rank_;                  // < per_rank * world
    out.push_back(order[static_cast<size_t>(position % size_)]);  // pad: wraps around
  }
  return out;
}

}  // namespace ember::data
