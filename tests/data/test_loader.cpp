// data::Loader on the CPU: the same batches in the same order for any number of workers,
// batches made ahead, a resumed run's batches, TokenShards' batches, and every fault an Error
// (a producer's exception naming the batch, a hung worker after the timeout, bad options), with
// a clean destruction mid-epoch.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "ember/data/loader.hpp"
#include "ember/data/token_shards.hpp"
#include "ember/train/training_state.hpp"
#include "test_support.hpp"

namespace {

using ember::Device;
using ember::DType;
using ember::Shape;
using ember::Stream;
using ember::Tensor;
using ember::TensorView;
using ember::data::Loader;
using ember::data::TensorSpec;
using ember::testing::expect_error;

const std::vector<TensorSpec> kSpecs = {{Shape{3, 4}, DType::f32}, {Shape{3}, DType::i32}};

// Batch i: x = i * 100 + position, y = i - position; a worker sleeps a random while first, so
// that batches finish out of order.
void produce(int64_t index, std::span<const TensorView> host) {
  std::mt19937 sleep_rng(static_cast<uint32_t>(index * 7919 + 1));
  std::this_thread::sleep_for(std::chrono::microseconds(sleep_rng() % 3000));
  auto* x = host[0].as<float>();
  for (int64_t i = 0; i < host[0].numel(); ++i) x[i] = static_cast<float>(index * 100 + i);
  auto* y = host[1].as<int32_t>();
  for (int64_t i = 0; i < host[1].numel(); ++i) y[i] = static_cast<int32_t>(index - i);
}

std::vector<float> flat(const std::vector<Tensor>& batch) {
  std::vector<float> out = batch[0].to_vector<float>();
  for (const int32_t v : batch[1].to_vector<int32_t>()) out.push_back(static_cast<float>(v));
  return out;
}

std::vector<std::vector<float>> take(Loader& loader, int n) {
  Stream cpu(Device::cpu());
  std::vector<std::vector<float>> batches;
  for (int i = 0; i < n; ++i) batches.push_back(flat(loader.next(cpu)));
  return batches;
}

TEST(Loader, TheSameBatchesInTheSameOrderForAnyNumberOfWorkers) {
  Loader reference(kSpecs, produce, Device::cpu(), {.workers = 0});
  const auto want = take(reference, 12);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(want[i][0], 100.0f * i);
  for (const int workers : {1, 2, 4}) {
    for (const int prefetch : {1, 2, 5}) {
      Loader loader(kSpecs, produce, Device::cpu(), {.workers = workers, .prefetch = prefetch});
      EXPECT_EQ(loader.workers(), workers);
      EXPECT_EQ(take(loader, 12), want) << workers << " workers, prefetch " << prefetch;
      EXPECT_EQ(loader.position(), 12);
    }
  }
  Loader automatic(kSpecs, produce, Device::cpu());
  EXPECT_GE(automatic.workers(), 1);
  EXPECT_EQ(take(automatic, 12), want);
}

TEST(Loader, BatchesAreMadeAheadUpToThePrefetchDepth) {
  std::atomic<int64_t> highest{-1};
  auto counting = [&](int64_t index, std::span<const TensorView> host) {
    int64_t seen = highest.load();
    while (index > seen && !highest.compare_exchange_weak(seen, index)) {
    }
    produce(index, host);
  };
  Loader loader(kSpecs, counting, Device::cpu(), {.workers = 2, .prefetch = 3});
  Stream cpu(Device::cpu());
  loader.next(cpu);  // batch 0; the workers go on with 1 .. 5 (prefetch 3 + 2 in progress)
  for (int i = 0; i < 200 && highest.load() < 5; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(highest.load(), 5);  // and no further until next() takes one
  loader.next(cpu);
  for (int i = 0; i < 200 && highest.load() < 6; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(highest.load(), 6);
}

TEST(Loader, AResumedLoaderStartsAtItsPosition) {
  Loader all(kSpecs, produce, Device::cpu(), {.workers = 2});
  const auto want = take(all, 9);
  Loader resumed(kSpecs, produce, Device::cpu(), {.workers = 3, .first = 5});
  EXPECT_EQ(resumed.position(), 5);
  EXPECT_EQ(take(resumed, 4), std::vector<std::vector<float>>(want.begin() + 5, want.end()));
}

// seek() drops what was made ahead (also batches a worker finishes after the seek) and goes on
// from the new index, forwards and backwards, with and without workers.
TEST(Loader, SeekRestartsAtAnyIndex) {
  Loader all(kSpecs, produce, Device::cpu(), {.workers = 0});
  const auto want = take(all, 30);
  for (const int workers : {0, 1, 3}) {
    Loader loader(kSpecs, produce, Device::cpu(), {.workers = workers, .prefetch = 2});
    EXPECT_EQ(take(loader, 3), std::vector<std::vector<float>>(want.begin(), want.begin() + 3));
    loader.seek(20);  // forwards, while workers are making 3..7
    EXPECT_EQ(loader.position(), 20);
    EXPECT_EQ(take(loader, 4),
              std::vector<std::vector<float>>(want.begin() + 20, want.begin() + 24));
    loader.seek(2);  // backwards
    EXPECT_EQ(take(loader, 5), std::vector<std::vector<float>>(want.begin() + 2, want.begin() + 7));
    loader.seek(7);  // where it is: nothing dropped
    EXPECT_EQ(take(loader, 1)[0], want[7]) << workers << " workers";
  }
  Loader loader(kSpecs, produce, Device::cpu(), {.workers = 1});
  expect_error([&] { loader.seek(-1); },
               {"data::Loader::seek: the batch index must be in 0..2^62, not -1"});
}

// A failed batch is dropped by a seek away from it: the batches after the seek are good.
TEST(Loader, SeekPastAFailedBatch) {
  auto failing = [](int64_t index, std::span<const TensorView> host) {
    if (index == 1) throw std::runtime_error("bad record");
    produce(index, host);
  };
  for (const int workers : {0, 2}) {
    Loader loader(kSpecs, failing, Device::cpu(), {.workers = workers});
    take(loader, 1);
    expect_error([&] { take(loader, 1); }, {"data::Loader: batch 1: bad record"});
    loader.seek(2);
    EXPECT_EQ(take(loader, 1)[0][0], 200.0f) << workers << " workers";
  }
}

TEST(Loader, AProducersExceptionNamesTheBatch) {
  auto failing = [](int64_t index, std::span<const TensorView> host) {
    if (index == 3) throw std::runtime_error("bad record in shard 7");
    produce(index, host);
  };
  for (const int workers : {0, 2}) {
    Loader loader(kSpecs, failing, Device::cpu(), {.workers = workers});
    take(loader, 3);
    Stream cpu(Device::cpu());
    expect_error([&] { loader.next(cpu); }, {"data::Loader: batch 3: bad record in shard 7"});
    expect_error([&] { loader.next(cpu); }, {"batch 3"});  // it stays failed
    EXPECT_EQ(loader.position(), 3);
  }
}

TEST(Loader, AHungWorkerIsAnErrorAfterTheTimeoutAndDestructionStillReturns) {
  // Shared with the worker, which outlives the loader.
  const auto release = std::make_shared<std::atomic<bool>>(false);
  auto hanging = [release](int64_t index, std::span<const TensorView> host) {
    if (index == 1) {
      while (!release->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    produce(index, host);
  };
  {
    Loader loader(kSpecs, hanging, Device::cpu(), {.workers = 2, .timeout_seconds = 0.2});
    Stream cpu(Device::cpu());
    loader.next(cpu);
    const auto start = std::chrono::steady_clock::now();
    expect_error([&] { loader.next(cpu); },
                 {"data::Loader: batch 1 was not ready after 0.2 s", "a worker is hung"});
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
    EXPECT_GE(loader.wait_seconds(), 0.2);
  }  // the hung worker is left to finish on its own (a warning), the destructor returns
  *release = true;  // it finishes, then exits
}

TEST(Loader, AnExceptionWithAnEmptyMessageStillFailsTheBatch) {
  auto failing = [](int64_t index, std::span<const TensorView> host) {
    produce(index, host);
    if (index == 1) throw std::runtime_error("");
  };
  for (const int workers : {0, 2}) {
    Loader loader(kSpecs, failing, Device::cpu(), {.workers = workers});
    take(loader, 1);
    Stream cpu(Device::cpu());
    expect_error([&] { loader.next(cpu); },
                 {"data::Loader: batch 1: an exception with an empty message"});
  }
}

TEST(Loader, AnInfiniteTimeoutWaits) {
  auto slow = [](int64_t index, std::span<const TensorView> host) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    produce(index, host);
  };
  Loader loader(kSpecs, slow, Device::cpu(),
                {.workers = 1, .timeout_seconds = std::numeric_limits<double>::infinity()});
  EXPECT_EQ(take(loader, 2).size(), 2u);
}

TEST(Loader, TheWaitWithoutWorkersIsTheProducersTime) {
  auto slow = [](int64_t index, std::span<const TensorView> host) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    produce(index, host);
  };
  Loader loader(kSpecs, slow, Device::cpu(), {.workers = 0});
  take(loader, 3);
  EXPECT_GE(loader.wait_seconds(), 0.06);
}

// A next() blocked in one thread when another destroys the loader: an Error, not a crash.
TEST(Loader, DestroyingTheLoaderWakesAWaitingNext) {
  const auto release = std::make_shared<std::atomic<bool>>(false);
  auto held = [release](int64_t index, std::span<const TensorView> host) {
    while (index == 0 && !release->load())
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    produce(index, host);
  };
  auto loader = std::make_unique<Loader>(kSpecs, held, Device::cpu(),
                                         Loader::Options{.workers = 1, .timeout_seconds = 2});
  std::atomic<bool> threw{false};
  std::thread consumer([&] {
    Stream cpu(Device::cpu());
    try {
      loader->next(cpu);
    } catch (const ember::Error& e) {
      threw = std::string(e.what()).find("destroyed while it waited") != std::string::npos;
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::thread release_later([release] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    *release = true;
  });
  loader.reset();  // waits for the worker to finish batch 0, then stops
  consumer.join();
  release_later.join();
  EXPECT_TRUE(threw.load());
}

TEST(Loader, DestructionMidEpochJoinsTheWorkers) {
  std::atomic<int> calls{0};
  auto counting = [&](int64_t index, std::span<const TensorView> host) {
    ++calls;
    produce(index, host);
  };
  for (int round = 0; round < 5; ++round) {
    Loader loader(kSpecs, counting, Device::cpu(), {.workers = 4, .prefetch = 2});
    take(loader, round);
  }
  EXPECT_LE(calls.load(), 5 * (4 + 6));  // at most what each look-ahead allowed
}

// next_into writes the batches next() would return into the caller's fixed tensors (a captured
// step's inputs); tensors that do not fit the specs are Errors that take no batch.
TEST(Loader, NextIntoFillsFixedTensorsWithTheSameBatches) {
  Stream cpu(Device::cpu());
  const std::vector<Tensor> into = {Tensor::empty({3, 4}), Tensor::empty({3}, DType::i32)};
  {
    Loader reference(kSpecs, produce, Device::cpu(), {.workers = 2});
    Loader made_in_the_call(kSpecs, produce, Device::cpu(), {.workers = 0});
    for (int i = 0; i < 3; ++i) {
      made_in_the_call.next_into(cpu, into);
      EXPECT_EQ(flat(into), flat(reference.next(cpu))) << "batch " << i;
    }
  }
  Loader reference(kSpecs, produce, Device::cpu(), {.workers = 0});
  Loader loader(kSpecs, produce, Device::cpu(), {.workers = 2});
  for (int i = 0; i < 5; ++i) {
    const void* data = into[0].data();
    loader.next_into(cpu, into);
    EXPECT_EQ(into[0].data(), data);
    EXPECT_EQ(flat(into), flat(reference.next(cpu))) << "batch " << i;
  }
  expect_error([&] { loader.next_into(cpu, std::span(into).subspan(0, 1)); },
               {"data::Loader::next_into: a batch is 2 tensors, not 1"});
  const std::vector<Tensor> wide = {Tensor::empty({3, 5}), into[1]};
  expect_error([&] { loader.next_into(cpu, wide); },
               {"tensor 0 must be f32[3, 4] on cpu, not f32[3, 5]"});
  const std::vector<Tensor> floats = {into[0], Tensor::empty({3})};
  expect_error([&] { loader.next_into(cpu, floats); },
               {"tensor 1 must be i32[3] on cpu, not f32[3]"});
  EXPECT_EQ(loader.position(), 5);  // the refused calls took no batch
  loader.next_into(cpu, into);
  EXPECT_EQ(flat(into), flat(reference.next(cpu)));
}

TEST(Loader, BadOptionsAreErrors) {
  expect_error([] { Loader(kSpecs, produce, Device::cpu(), {.workers = 2, .prefetch = 0}); },
               {"a prefetch depth of 0 leaves the 2 workers nothing to do ahead"});
  expect_error(
      [] {
        Loader({{Shape{0, 4}, DType::f32}}, produce, Device::cpu());
      },
      {"a batch tensor of shape [0, 4] holds nothing (a batch size of 0?)"});
  expect_error([] { Loader({}, produce, Device::cpu()); }, {"at least one tensor"});
  expect_error([] { Loader(kSpecs, produce, Device::cpu(), {.workers = -2}); },
               {"workers must be -1 (automatic) or in 0..1024, not -2"});
  expect_error([] { Loader(kSpecs, produce, Device::cpu(), {.prefetch = 1 << 30}); },
               {"prefetch must be in 0..65536"});
  expect_error(
      [] {
        Loader(kSpecs, produce, Device::cpu(), {.first = std::numeric_limits<int64_t>::max()});
      },
      {"the first batch index must be in 0..2^62"});
  expect_error([] { Loader(kSpecs, produce, Device::cpu(), {.timeout_seconds = 0}); },
               {"timeout_seconds must be positive"});
  expect_error([] { Loader(kSpecs, nullptr, Device::cpu()); }, {"no producer"});
  Loader loader(kSpecs, produce, Device::cpu(), {.workers = 0, .prefetch = 0});  // fine: no workers
  EXPECT_EQ(take(loader, 2).size(), 2u);
}

TEST(Loader, TokenShardsBatchesMatchTheReadersOwnAcrossEpochs) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("ember_loader_shards_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::vector<uint16_t> tokens(2000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>((i * 37) % 1000);
  const std::string path = (dir / "a.bin").string();
  ember::data::write_token_shard(path, tokens);
  for (const int workers : {0, 3}) {
    ember::data::TokenShards reader({path},
                                    {.batch = 4, .seq = 16, .world_size = 2, .rank = 1, .seed = 9});
    ember::data::TokenShards served({path},
                                    {.batch = 4, .seq = 16, .world_size = 2, .rank = 1, .seed = 9});
    served.set_position({1, 2});  // a resumed run: epoch 1, batch 2
    reader.set_position({1, 2});
    const auto loader =
        ember::data::token_shards_loader(served, Device::cpu(), {.workers = workers});
    Stream cpu(Device::cpu());
    const int64_t per_epoch = reader.batches_per_epoch();
    for (int64_t i = 0; i < 2 * per_epoch; ++i) {  // across two epoch ends
      const ember::data::TokenShards::Batch want = reader.next();
      const std::vector<Tensor> got = loader->next(cpu);
      ASSERT_EQ(got[0].to_vector<int32_t>(), want.inputs.to_vector<int32_t>()) << i;
      ASSERT_EQ(got[1].to_vector<int32_t>(), want.targets.to_vector<int32_t>()) << i;
    }
    const auto at = served.position_at(loader->position());
    EXPECT_EQ(at.epoch, reader.position().epoch);
    EXPECT_EQ(at.batch, reader.position().batch);
  }
  std::filesystem::remove_all(dir);
}

// The loader's position is part of a TrainingState's progress (data::track_in): a save stores
// it as epoch and batch, a resume seeks a new loader there, and it sees the batches the
// first one would have.
TEST(Loader, ItsPositionIsPartOfTheTrainingState) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("ember_loader_state_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  Loader all(kSpecs, produce, Device::cpu(), {.workers = 0});
  const auto want = take(all, 20);
  {
    Loader loader(kSpecs, produce, Device::cpu(), {.workers = 2});
    ember::train::TrainingState state;
    ember::data::track_in(state, loader, /*batches_per_epoch=*/6);
    take(loader, 14);
    state.progress.step = 14;
    ember::train::TrainingStateStore({.dir = dir.string()}).save(state);
    EXPECT_EQ(state.progress.epoch, 2);  // 14 = 2 * 6 + 2
    EXPECT_EQ(state.progress.data_position, 2);
  }
  Loader resumed(kSpecs, produce, Device::cpu(), {.workers = 3});
  take(resumed, 2);  // made ahead from 0: dropped by the resume
  ember::train::TrainingState state;
  ember::data::track_in(state, resumed, 6);
  ASSERT_EQ(ember::train::TrainingStateStore({.dir = dir.string()}).resume(state), 14);
  EXPECT_EQ(resumed.position(), 14);
  EXPECT_EQ(take(resumed, 6), std::vector<std::vector<float>>(want.begin() + 14, want.end()));

  // A saved position that does not fit the loader is found before anything loads: the other
  // components keep their values.
  {
    Loader small(kSpecs, produce, Device::cpu(), {.workers = 0});
    ember::train::TrainingState state;
    bool loaded = false;
    state.add_state(
        "model", [] { return ember::StateDict(); },
        [&](const ember::StateDict&) { loaded = true; });
    ember::data::track_in(state, small, /*batches_per_epoch=*/1);
    expect_error(
        [&] { ember::train::TrainingStateStore({.dir = dir.string()}).resume(state); },
        {"does not fit this training state (nothing was loaded)",
         "data::track_in: the saved state's data position (epoch 2, batch 2) does not fit 1 "
         "batches per epoch"});
    EXPECT_FALSE(loaded);
    EXPECT_EQ(state.progress.step, 0);
    EXPECT_EQ(small.position(), 0);
  }

  // One endless epoch: the position is the data position.
  Loader endless(kSpecs, produce, Device::cpu(), {.workers = 1});
  ember::train::TrainingState other;
  ember::data::track_in(other, endless);
  other.progress = {.step = 14, .epoch = 2, .data_position = 2};
  expect_error([&] { other.progress_hooks()[0].load(other.progress); },
               {"data::track_in: the saved state's data position (epoch 2, batch 2) does not fit 0 "
                "batches per epoch"});
  other.progress = {.step = 3, .epoch = 0, .data_position = 9};
  other.progress_hooks()[0].load(other.progress);
  EXPECT_EQ(take(endless, 1)[0], want[9]);
  expect_error([&] { ember::data::track_in(other, endless, -1); },
               {"batches_per_epoch must be positive (or 0: one endless epoch), not -1"});
  std::filesystem::remove_all(dir);
}

}  // namespace
