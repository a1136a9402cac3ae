// data::Loader: training batches made ahead of the training loop by worker threads, the same
// batches in the same order for any number of workers.
//
// A producer fills batch `index` (0, 1, 2, ... from the start of training) into host buffers:
// it must depend on the index alone (its own random numbers seeded from the index), not on the
// order of calls, since workers fill several batches at once. Up to `prefetch` batches wait
// ready, beyond one in progress per worker: next() returns batch i while batches up to
// i + prefetch + workers are being made. On a GPU the host buffers are pinned, from a pool made
// once and reused (pinning runs at 1-2 GB/s, far below a copy), and next(stream) copies a batch to
// the device on the loader's copy stream, makes `stream` wait for the copy (an event, no host
// wait) and records the tensors' use on `stream`. On the CPU next() returns host tensors.
//
// Faults never hang and never pass silently: a producer's exception comes out of next() for
// that batch as an Error naming it; a batch not ready within `timeout_seconds` is an Error; the
// destructor stops the workers (each finishes the batch in hand; one still busy after the
// timeout is left to finish on its own, so what the producer uses must outlive it, not only
// the loader) and returns the buffers; a next() waiting in another thread then throws.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "ember/core/device.hpp"
#include "ember/core/shape.hpp"
#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"

namespace ember::train {
class TrainingState;
}

namespace ember::data {

class TokenShards;

// One tensor of a batch.
struct TensorSpec {
  Shape shape;
  DType dtype = DType::f32;
};

class Loader {
 public:
  // Fills batch `index` into `host` (one view per spec, host memory), on a worker thread.
  using Producer = std::function<void(int64_t index, std::span<const TensorView> host)>;

  struct Options {
    // Worker threads (at most 1024); -1: the cores OpenMP's compute threads leave free, at least
    // one. 0: no threads, next() makes each batch itself (nothing ahead). A worker's own OpenMP
    // loops run on one thread.
    int workers = -1;
    int prefetch = 2;              // batches waiting ready (at least 1 with workers)
    double timeout_seconds = 600;  // infinity: no timeout
    int64_t first = 0;  // the index of the first batch next() returns (a resumed run's position)
  };

  // An Error for specs without elements and for bad options. The device is where next()'s
  // tensors go.
  Loader(std::vector<TensorSpec> specs, Producer producer, Device device, Options options);
  Loader(std::vector<TensorSpec> specs, Producer producer, Device device)
      : Loader(std::move(specs), std::move(producer), device, Options{}) {}
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // The next batch, ready for work queued on `stream` (on stream's device).
  std::vector<Tensor> next(const Stream& stream);
  // The next batch written into `into`: one tensor per spec, of its shape and dtype, on the
  // loader's device (the fixed input buffers of a captured step, train::CapturedStep, refilled
  // between replays with no copy of their own). On a GPU the loader's copy stream writes them
  // after the work queued on `stream` so far (which may still read the last batch there) and
  // before the work queued on it next; on the CPU they are written at once. Other tensors are
  // an Error naming the first that does not fit, and take no batch; so is a call during a
  // capture. A batch's pinned buffer is free again once its copy ran, after the step that read
  // the last batch: without workers, the next call waits for that step on the host.
  void next_into(const Stream& stream, std::span<const Tensor> into);

  int64_t position() const;  // the index of the batch next() returns next
  // From now on next() returns batch `index`, `index` + 1, ... (a resumed run's position): the
  // batches made ahead for other indices are dropped. Not while next() runs in another thread.
  void seek(int64_t index);
  int workers() const;          // the threads it runs
  double wait_seconds() const;  // the time next() spent waiting for batches, in total

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

// A Loader of a TokenShards reader's batches (inputs, targets: [batch, seq] i32), this rank's,
// starting at the reader's position (Options::first is that, whatever it said): the batches its
// next() would have returned, in order. The reader must outlive the loader and its workers, and
// is not advanced (the loader's position() is a batch index; TokenShards::position_at converts it
// back for a saved state).
// Makes `loader`'s position part of `state`'s progress (train::TrainingState): a save records it
// as the epoch and the batch within it (`batches_per_epoch`; 0: one endless epoch, the position in
// data_position), a resume seeks the loader there, so a resumed run sees the same batches. The
// producer derives everything else (shuffling, augmentation) from the batch index, so the
// position is all of the loader's state. `loader` must outlive `state`'s saves and resumes.
void track_in(train::TrainingState& state, Loader& loader, int64_t batches_per_epoch = 0);

std::unique_ptr<Loader> token_shards_loader(const TokenShards& shards, Device device,
                                            Loader::Options options = {});

}  // namespace ember::data
