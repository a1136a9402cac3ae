// Training state across ranks: DDP training saved and resumed bitwise, rank 0 writing the
// replicated state and every rank its progress; every rank resumes from the same saved state even
// when one rank's file of the newest is corrupt; preemption agreed across ranks.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>

#include "dist_test_support.hpp"
#include "ember/core/error.hpp"
#include "ember/dist/ddp.hpp"
#include "ember/dist/save_group.hpp"
#include "ember/nn/loss.hpp"
#include "ember/train/adamw.hpp"
#include "ember/train/residual_mlp.hpp"

namespace ember::testing {
namespace {

namespace fs = std::filesystem;

class DistTrainingState : public DistOnDevice {
 protected:
  // A directory every rank names alike (rank 0's pid).
  std::string shared_dir(const char* name) {
    const int64_t pid = world().host_all_gather({static_cast<int64_t>(::getpid())})[0];
    return (fs::temp_directory_path() / fmt::format("ember_dist_{}_{}", name, pid)).string();
  }
};

struct Replica {
  std::shared_ptr<dist::DistributedDataParallel> ddp;
  std::unique_ptr<train::AdamW> opt;
  train::TrainingState state;

  explicit Replica(Device device) {
    ddp = std::make_shared<dist::DistributedDataParallel>(
        train::make_residual_mlp({.inputs = 4,
                                  .width = 8,
                                  .depth = 2,
                                  .expansion = 2,
                                  .outputs = 3,
                                  .dropout = 0.1f,
                                  .seed = 5,
                                  .device = device}),
        world());
    opt = std::make_unique<train::AdamW>(ddp->parameters(), train::AdamWOptions{.lr = 1e-2f});
    state.add_module("model", *ddp);
    state.add_optimizer("optimizer", *opt);
  }
  void train_to(int64_t until, Device device, Stream s) {
    nn::Context ctx{s};
    ctx.step = state.progress.micro_step;
    nn::SoftmaxCrossEntropy loss;
    for (int64_t step = state.progress.step; step < until; ++step) {
      Tensor x = Tensor::empty({6, 4});
      x.uniform_(static_cast<uint64_t>(100 * world().rank() + step), -1, 1);
      std::vector<int32_t> y(6);
      for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<int32_t>((i + step) % 3);
      opt->zero_grad();
      loss.forward(ctx, ddp->forward(ctx, x.to(device)), Tensor::from_vector(y, {6}).to(device));
      ddp->backward(ctx, loss.backward(ctx));
      opt->step(s);
      ++ctx.step;
      state.progress = {.step = step + 1,
                        .epoch = 0,
                        .data_position = (step + 1) * 6 + world().rank(),
                        .micro_step = ctx.step};
    }
  }
  std::vector<float> values() {
    std::vector<float> out;
    for (nn::Parameter* p : ddp->parameters()) {
      const auto v = p->value.to(Device::cpu()).to_vector<float>();
      out.insert(out.end(), v.begin(), v.end());
    }
    return out;
  }
};

// A save (and its asynchronous commit) expected to fail: the Error's message ("" if it did not).
std::string save_failure(train::TrainingStateStore& store, train::TrainingState& state) {
  try {
    store.save(state);
    store.wait();
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}

TEST_P(DistTrainingState, ResumesBitwiseAndEveryRankAgrees) {
  const std::string dir = shared_dir("resume");
  Replica straight(device());
  straight.train_to(6, device(), stream());
  const auto expected = straight.values();
  {
    Replica first(device());
    train::TrainingStateStore store({.dir = dir, .keep_last = 3}, dist::save_group(world()));
    first.train_to(2, device(), stream());
    store.save(first.state);
    first.train_to(3, device(), stream());
    store.save(first.state);
  }
  // Rank 1's progress file of the newest saved state is damaged: every rank takes step 2.
  if (rank() == 1) {
    std::ofstream(fs::path(dir) / "step-000000000003" / "rank-00001.json") << "{}";
  }
  world().barrier();
  Replica second(device());
  std::vector<std::string> warnings;
  train::TrainingStateStore store(
      {.dir = dir, .warn = [&](const std::string& w) { warnings.push_back(w); }},
      dist::save_group(world()));
  ASSERT_EQ(store.resume(second.state), std::optional<int64_t>(2));
  EXPECT_EQ(warnings.size(), rank() == 1 ? 1u : 0u);
  EXPECT_EQ(second.state.progress.data_position, 2 * 6 + rank());  // this rank's own
  second.train_to(6, device(), stream());
  EXPECT_EQ(second.values(), expected);
  world().barrier();
  if (rank() == 0) fs::remove_all(dir);
}

// A save that fails on one rank (rank 0: metadata that is not UTF-8, found writing the manifest;
// the last rank: its progress file cannot be created) fails on every rank with the same Error
// naming that rank and its cause, promptly (no rank waits for a commit another abandoned),
// synchronous and asynchronous; the failed step is not committed and the next save is.
TEST_P(DistTrainingState, ASaveThatFailsOnOneRankFailsOnEveryRank) {
  for (bool async : {false, true}) {
    for (int failing : {0, ranks() - 1}) {
      SCOPED_TRACE(::testing::Message() << (async ? "async" : "sync") << ", rank " << failing);
      const std::string dir = shared_dir(async ? "fail_async" : "fail_sync");
      if (rank() == 0) fs::remove_all(dir);
      world().barrier();
      Replica replica(device());
      train::TrainingStateStore store({.dir = dir, .keep_last = 5, .async = async},
                                      dist::save_group(world()));
      replica.train_to(1, device(), stream());
      store.save(replica.state);
      store.wait();
      replica.train_to(2, device(), stream());
      if (rank() == failing && failing == 0) replica.state.metadata["note"] = "\xff\xfe";
      if (rank() == failing && failing != 0) {
        fs::create_directories(fs::path(dir) / ".tmp-step-000000000002" /
                               fmt::format("rank-{:05d}.json", failing));
      }
      world().barrier();
      const std::string message = save_failure(store, replica.state);
      EXPECT_NE(message.find(fmt::format("saving step 2 in '{}' failed on rank {} of {}", dir,
                                         failing, ranks())),
                std::string::npos)
          << message;
      EXPECT_NE(message.find(failing == 0 ? "valid UTF-8" : "rank-0000"), std::string::npos)
          << message;
      replica.state.metadata.clear();
      replica.train_to(3, device(), stream());
      store.save(replica.state);
      store.wait();
      EXPECT_EQ(store.steps(), (std::vector<int64_t>{3, 1}));
      world().barrier();
      if (rank() == 0) fs::remove_all(dir);
    }
  }
}

// Rank 0 cannot take the writer's lock (another writer holds the directory): every rank fails
// the save at once with the same Error, sync and async (the other ranks used to wait out
// EMBER_DIST_TIMEOUT in the commit).
TEST_P(DistTrainingState, ALockHeldElsewhereFailsTheSaveOnEveryRank) {
  for (bool async : {false, true}) {
    SCOPED_TRACE(async ? "async" : "sync");
    const std::string dir = shared_dir(async ? "locked_async" : "locked_sync");
    if (rank() == 0) fs::remove_all(dir);
    world().barrier();
    Replica replica(device());
    replica.train_to(1, device(), stream());
    std::optional<train::TrainingStateStore> holder;  // another writer, on rank 0's side
    if (rank() == 0) {
      holder.emplace(train::StateStoreOptions{.dir = dir});
      train::TrainingState other;
      other.progress.step = 1;
      holder->save(other);
    }
    world().barrier();
    train::TrainingStateStore store({.dir = dir, .async = async}, dist::save_group(world()));
    const std::string message = save_failure(store, replica.state);
    EXPECT_NE(message.find("failed on rank 0 of"), std::string::npos) << message;
    EXPECT_NE(message.find("another writer is saving into"), std::string::npos) << message;
    holder.reset();
    world().barrier();
    if (rank() == 0) fs::remove_all(dir);
  }
}

// A directory that is not shared (each rank its own node-local path): the save fails on every
// rank, naming the missing file and asking whether the directory is shared.
TEST_P(DistTrainingState, ADirectoryThatIsNotSharedFailsTheSaveOnEveryRank) {
  const std::string base = shared_dir("local");
  const std::string dir = rank() == 0 ? base : fmt::format("{}_rank{}", base, rank());
  Replica replica(device());
  replica.train_to(1, device(), stream());
  train::TrainingStateStore store({.dir = dir}, dist::save_group(world()));
  const std::string message = save_failure(store, replica.state);
  EXPECT_NE(message.find("failed on rank 0 of"), std::string::npos) << message;
  EXPECT_NE(message.find("is the directory shared by every rank?"), std::string::npos) << message;
  EXPECT_TRUE(store.steps().empty());
  world().barrier();
  fs::remove_all(dir);
}

TEST_P(DistTrainingState, APreemptionSignalOnOneRankStopsEveryRank) {
  EXPECT_TRUE(dist::any_rank(world(), rank() == ranks() - 1));
  EXPECT_FALSE(dist::any_rank(world(), false));
}

INSTANTIATE_DIST_DEVICES(DistTrainingState);

}  // namespace
}  // namespace ember::testing
