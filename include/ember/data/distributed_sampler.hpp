// DistributedSampler: each rank's share of a dataset's rows, for one epoch.
//
// Every rank draws the same permutation of [0, N) from (seed, epoch) (data::permutation, Philox:
// identical on every machine), and rank r takes positions r, r + W, r + 2W, ... of it. The
// remainder (N not a multiple of W ranks) is handled by `remainder`:
//   pad  (default, as PyTorch): the permutation wraps around so that every rank gets ceil(N / W)
//        rows; up to W - 1 rows are seen twice per epoch.
//   drop: the last N mod W rows of the permutation are left out of this epoch; every rank gets
//        floor(N / W) rows (a different few are dropped each epoch when shuffling).
// Call set_epoch(e) before each epoch so that the shuffle changes; without shuffle the order is
// 0 .. N-1.
#pragma once

#include <cstdint>
#include <vector>

namespace ember::data {

class DistributedSampler {
 public:
  enum class Remainder { pad, drop };
  struct Options {
    bool shuffle = true;
    uint64_t seed = 0;
    Remainder remainder = Remainder::pad;
  };

  // An Error for size < 0, world_size < 1, a rank outside [0, world_size), or (pad) an empty
  // dataset, or (drop) fewer rows than ranks.
  DistributedSampler(int64_t size, int world_size, int rank, Options options);
  DistributedSampler(int64_t size, int world_size, int rank)
      : DistributedSampler(size, world_size, rank, Options{}) {}

  void set_epoch(uint64_t epoch) { epoch_ = epoch; }
  uint64_t epoch() const { return epoch_; }
  // Rows per rank this epoch (the same on every rank).
  int64_t rows_per_rank() const;
  // This rank's rows for the current epoch, in order.
  std::vector<int64_t> indices() const;

 private:
  int64_t size_;
  int world_;
  int rank_;
  Options options_;
  uint64_t epoch_ = 0;
};

}  // namespace ember::data
