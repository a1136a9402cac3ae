// Training batches of a Dataset from data::Loader's workers (--workers N), shared by train_mlp,
// train_resmlp and train_ddp. Each epoch deals the rows in an order (a shuffle, or a rank's
// share of one); batch `index` is the `batch` rows at index % per_epoch of epoch
// index / per_epoch (the rest of an epoch dropped), so a position (epoch, cursor) is a batch
// index and back: a resumed run gets the same batches.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

#include "cli.hpp"
#include "ember/core/error.hpp"
#include "ember/data/dataset.hpp"
#include "ember/data/loader.hpp"

namespace example {

class DatasetBatches {
 public:
  using Order = std::function<std::vector<int64_t>(uint64_t epoch)>;

  // `rows_per_epoch`: how many rows `order` deals per epoch; at least `batch` (an Error says so).
  // `epoch` and `cursor`: where a resumed run continues (0, 0 at the start).
  DatasetBatches(const ember::data::Dataset& set, int64_t batch, int64_t rows_per_epoch,
                 Order order, ember::Device device, int workers, uint64_t epoch, int64_t cursor)
      : batch_(batch),
        per_epoch_(rows_per_epoch / batch),
        features_(set.inputs.shape()[1]),
        order_(std::move(order)) {
    EMBER_CHECK(per_epoch_ >= 1, "an epoch deals {} rows, fewer than a batch of {}", rows_per_epoch,
                batch);
    const int64_t features = features_;
    loader_ = std::make_unique<ember::data::Loader>(
        std::vector<ember::data::TensorSpec>{{ember::Shape{batch, features}, ember::DType::f32},
                                             {ember::Shape{batch}, ember::DType::i32}},
        [this, &set](int64_t index, std::span<const ember::TensorView> host) {
          const auto rows = rows_of(static_cast<uint64_t>(index / per_epoch_));
          const auto first = static_cast<size_t>(index % per_epoch_ * batch_);
          ember::data::gather(set, std::span<const int64_t>(*rows).subspan(first, batch_), host[0],
                              host[1]);
        },
        device, ember::data::Loader::Options{.workers = workers, .first = index_of(epoch, cursor)});
  }

  // The next batch (inputs, labels), ready on `stream`.
  std::vector<ember::Tensor> next(const ember::Stream& stream) { return loader_->next(stream); }
  // The next batch written into fixed tensors (a captured step's inputs): [batch, features] f32
  // and [batch] i32 on the device (data::Loader::next_into: no copy of their own).
  void next_into(const ember::Stream& stream, const ember::Tensor& inputs,
                 const ember::Tensor& labels) {
    const ember::Tensor into[] = {inputs, labels};
    loader_->next_into(stream, into);
  }
  // Fixed tensors next_into fills, made on `stream`.
  std::pair<ember::Tensor, ember::Tensor> fixed_batch(const ember::Stream& stream) const {
    return {ember::Tensor::empty({batch_, features_}, ember::DType::f32, stream),
            ember::Tensor::empty({batch_}, ember::DType::i32, stream)};
  }

  // Where the next batch starts, for a saved state: (epoch, cursor in rows).
  std::pair<uint64_t, int64_t> position() const {
    const int64_t index = loader_->position();
    return {static_cast<uint64_t>(index / per_epoch_), index % per_epoch_ * batch_};
  }

 private:
  int64_t index_of(uint64_t epoch, int64_t cursor) const {
    // A cursor past the epoch's last whole batch continues with the next epoch.
    const int64_t batch = std::min(cursor / batch_, per_epoch_);
    return static_cast<int64_t>(epoch) * per_epoch_ + batch;
  }

  // The order of an epoch, kept for the last two (the workers straddle an epoch's end).
  std::shared_ptr<const std::vector<int64_t>> rows_of(uint64_t epoch) {
    std::lock_guard lock(mutex_);
    for (const auto& [e, rows] : epochs_) {
      if (e == epoch) return rows;
    }
    auto rows = std::make_shared<const std::vector<int64_t>>(order_(epoch));
    if (epochs_.size() == 2) epochs_.erase(epochs_.begin());
    epochs_.emplace_back(epoch, rows);
    return rows;
  }

  int64_t batch_, per_epoch_, features_;
  Order order_;
  std::mutex mutex_;
  std::vector<std::pair<uint64_t, std::shared_ptr<const std::vector<int64_t>>>> epochs_;
  std::unique_ptr<ember::data::Loader> loader_;  // last: its workers use the members above
};

}  // namespace example
