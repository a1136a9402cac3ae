// train::TrainingStateStore on the CPU: retention, atomicity under kill -9, corrupt and truncated
// saved states skipped with a warning, saved states that do not fit, asynchronous saves, and the
// safetensors reader and the manifest under malformed input (fuzzed).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "ember/nn/dropout.hpp"
#include "ember/nn/linear.hpp"
#include "ember/nn/mlp.hpp"
#include "ember/nn/sequential.hpp"
#include "ember/train/safetensors.hpp"
#include "ember/train/sgd.hpp"
#include "ember/train/training_state.hpp"
#include "test_support.hpp"
#include "train/durable_files.hpp"
#include "train/file_faults.hpp"

#define XXH_INLINE_ALL  // header-only: the checksum ember writes, without linking libxxhash
#include <xxhash.h>

namespace ember::train {
namespace {

namespace fs = std::filesystem;

std::string fresh_dir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / fmt::format("ember_ckpt_{}_{}", name, ::getpid());
  fs::remove_all(dir);
  return dir.string();
}

// A state of one tensor whose every element is the step it was saved at.
struct Counter {
  Tensor value = Tensor::zeros({1000});
  TrainingState state;
  Counter() {
    state.add_state(
        "counter",
        [this] {
          StateDict d;
          d.insert("value", value);
          return d;
        },
        [this](const StateDict& d) { value.copy_(d.at("value")); });
  }
  void set(int64_t step) {
    value.fill_(static_cast<double>(step));
    state.progress.step = step;
  }
  bool consistent(int64_t step) const {
    const auto v = value.to_vector<float>();
    return std::all_of(v.begin(), v.end(), [&](float x) { return x == static_cast<float>(step); });
  }
};

// Resumes `dir` into c with a fresh reader: it takes `step` (consistent: every element that
// step), having skipped exactly one saved state with a warning that contains `text`.
void expect_one_skipped(const std::string& dir, Counter& c, std::optional<int64_t> step,
                        const std::string& text) {
  std::vector<std::string> warnings;
  c.set(0);
  TrainingStateStore reader(
      {.dir = dir, .warn = [&](const std::string& w) { warnings.push_back(w); }});
  EXPECT_EQ(reader.resume(c.state), step);
  if (step) {
    EXPECT_TRUE(c.consistent(*step));
  }
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find(text), std::string::npos) << warnings[0];
}

TEST(TrainingStateStore, KeepsTheLastNAndLeavesNoTemporaries) {
  const std::string dir = fresh_dir("keep");
  Counter c;
  TrainingStateStore store({.dir = dir, .keep_last = 2});
  for (int64_t step = 1; step <= 5; ++step) {
    c.set(step);
    store.save(c.state);
  }
  EXPECT_EQ(store.steps(), (std::vector<int64_t>{5, 4}));
  for (const auto& e : fs::directory_iterator(dir)) {  // the writer's lock file only
    const std::string name = e.path().filename().string();
    EXPECT_TRUE(!name.starts_with(".") || name == ".lock") << e.path();
  }
  // The files a saved state holds.
  for (const char* f : {"manifest.json", "replicated.safetensors", "rank-00000.json"}) {
    EXPECT_TRUE(fs::exists(fs::path(store.path_of(5)) / f)) << f;
  }
  c.set(0);
  EXPECT_EQ(TrainingStateStore({.dir = dir}).resume(c.state), std::optional<int64_t>(5));
  EXPECT_TRUE(c.consistent(5));
  // The same step again replaces it.
  c.set(5);
  c.value.fill_(42.0);
  store.save(c.state);
  c.set(0);
  store.resume(c.state);
  EXPECT_EQ(c.value.to_vector<float>()[0], 42.0f);
  fs::remove_all(dir);
}

TEST(TrainingStateStore, CorruptAndTruncatedSavedStatesAreSkippedWithAWarning) {
  const std::string dir = fresh_dir("corrupt");
  Counter c;
  {
    TrainingStateStore store({.dir = dir, .keep_last = 5});
    for (int64_t step = 1; step <= 5; ++step) {
      c.set(step);
      store.save(c.state);
    }
  }
  std::vector<std::string> warnings;
  auto resume = [&] {
    TrainingStateStore store(
        {.dir = dir, .warn = [&](const std::string& w) { warnings.push_back(w); }});
    c.set(0);
    return store.resume(c.state);
  };
  TrainingStateStore probe({.dir = dir});
  // Step 5's tensors grown to a sparse TiB: refused by its size before anything is allocated.
  fs::resize_file(fs::path(probe.path_of(5)) / "replicated.safetensors", uint64_t{1} << 40);
  {  // one flipped byte in step 4's tensors
    std::fstream f(fs::path(probe.path_of(4)) / "replicated.safetensors",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-10, std::ios::end);
    f.put('\x7f');
  }
  fs::resize_file(fs::path(probe.path_of(3)) / "replicated.safetensors", 100);  // truncated
  {
    std::ofstream(fs::path(probe.path_of(2)) / "manifest.json") << "{\"format\": ";  // cut JSON
  }
  EXPECT_EQ(resume(), std::optional<int64_t>(1));
  EXPECT_TRUE(c.consistent(1));
  ASSERT_EQ(warnings.size(), 4u);
  EXPECT_NE(warnings[0].find(probe.path_of(5)), std::string::npos);
  EXPECT_NE(warnings[0].find("has 1099511627776 bytes, not"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[1].find(probe.path_of(4)), std::string::npos);
  EXPECT_NE(warnings[1].find("checksum does not match"), std::string::npos) << warnings[1];
  EXPECT_NE(warnings[2].find("truncated"), std::string::npos) << warnings[2];
  EXPECT_NE(warnings[3].find("manifest is not valid JSON"), std::string::npos) << warnings[3];
  fs::remove(fs::path(probe.path_of(1)) / "rank-00000.json");
  warnings.clear();
  EXPECT_EQ(resume(), std::nullopt);
  EXPECT_EQ(warnings.size(), 5u);
  fs::remove_all(dir);
}

TEST(TrainingStateStore, ASavedStateThatDoesNotFitIsAnErrorListingTheDifferences) {
  const std::string dir = fresh_dir("fit");
  auto a = nn::make_mlp({.inputs = 3, .hidden = 8, .depth = 1, .outputs = 2, .seed = 1});
  SGD sgd(a->parameters(), {.lr = 0.1f});
  TrainingState sa;
  sa.add_module("model", *a);
  sa.add_optimizer("optimizer", sgd);
  TrainingStateStore({.dir = dir}).save(sa);

  auto b = nn::make_mlp({.inputs = 3, .hidden = 9, .depth = 1, .outputs = 2, .seed = 1});
  const auto before = b->parameters()[0]->value.to_vector<float>();
  SGD sgd_b(b->parameters(), {.lr = 0.1f});
  TrainingState sb;
  sb.add_module("model", *b);
  sb.add_optimizer("optimizer", sgd_b);
  testing::expect_error([&] { TrainingStateStore({.dir = dir}).resume(sb); },
                        {"does not fit this training state (nothing was loaded)",
                         "model:", "0.weight (expected [9, 3] f32, got [8, 3] f32)"});
  EXPECT_EQ(b->parameters()[0]->value.to_vector<float>(), before);
  // Another component set: missing and unexpected entries.
  TrainingState sc;
  sc.add_module("net", *a);
  testing::expect_error([&] { TrainingStateStore({.dir = dir}).resume(sc); },
                        {"net:", "unexpected entry 'model/0.weight'"});
  // Another world size.
  SaveGroup two{.rank = 0, .world_size = 2, .all_gather = [](const std::vector<int64_t>& v) {
                  auto out = v;
                  out.insert(out.end(), v.begin(), v.end());
                  return out;
                }};
  testing::expect_error([&] { TrainingStateStore({.dir = dir}, two).resume(sa); },
                        "was saved by 1 ranks, but this job has 2");
  fs::remove_all(dir);
}

// Found by outside testing: a dropout seed mismatch loaded the components before it; a child
// module named "rng" clashed with the dropout keys; a step below the newest was pruned as soon
// as it was written; a failed asynchronous save also lost the next; non-UTF-8 metadata escaped
// as a JSON library exception.
TEST(TrainingStateStore, OutsideTestingRegressions) {
  const std::string dir = fresh_dir("regressions");
  auto build = [](uint64_t dropout_seed) {
    auto m = std::make_shared<nn::Sequential>();
    m->add("rng", std::make_shared<nn::Linear>(3, 2, nn::LinearOptions{.seed = 4}));
    m->add("drop",
           std::make_shared<nn::Dropout>(nn::DropoutOptions{.p = 0.5f, .seed = dropout_seed}));
    return m;
  };
  {
    Counter c;
    auto model = build(1);
    c.state.add_module("model", *model);
    c.set(4);
    TrainingStateStore({.dir = dir}).save(c.state);
    // The child named "rng" comes back.
    Counter again;
    auto same = build(1);
    again.state.add_module("model", *same);
    ASSERT_EQ(TrainingStateStore({.dir = dir}).resume(again.state), std::optional<int64_t>(4));
    EXPECT_EQ(same->parameters()[0]->value.to_vector<float>(),
              model->parameters()[0]->value.to_vector<float>());
    EXPECT_TRUE(again.consistent(4));
  }
  {
    Counter c;  // registered before the model: must stay untouched
    auto other = build(2);
    c.state.add_module("model", *other);
    testing::expect_error(
        [&] { TrainingStateStore({.dir = dir}).resume(c.state); },
        {"does not fit", "dropout 0", "has seed 2, the saved state's has seed 1"});
    EXPECT_TRUE(c.consistent(0));
  }
  {
    std::vector<std::string> warnings;
    Counter c;
    TrainingStateStore store(
        {.dir = dir, .keep_last = 1, .warn = [&](const std::string& w) { warnings.push_back(w); }});
    c.set(3);
    store.save(c.state);
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_NE(warnings[0].find("saving step 3 below the newest saved state"), std::string::npos);
    EXPECT_EQ(store.steps(), (std::vector<int64_t>{3}));
    c.state.metadata["bad"] = "caf\xe9";
    c.set(5);
    testing::expect_error([&] { store.save(c.state); }, "must be valid UTF-8");
  }
  fs::remove_all(dir);
  {
    Counter c;
    TrainingStateStore store({.dir = dir, .async = true});
    // Step 2's progress file cannot be written (a full disk). The store writes the files of its
    // temporary directory in place (WriteMode::in_place).
    fs::create_directories(fs::path(dir) / ".tmp-step-000000000002");
    fs::create_symlink("/dev/full", fs::path(dir) / ".tmp-step-000000000002" / "rank-00000.json");
    c.set(2);
    store.save(c.state);
    c.set(3);
    testing::expect_error([&] { store.save(c.state); },
                          {"the earlier asynchronous save of step 2 failed", "No space left",
                           "this save of step 3 was started"});
    store.wait();
    EXPECT_EQ(store.steps(), (std::vector<int64_t>{3}));
  }
  fs::remove_all(dir);
}

// A transient disk-full, injected without a mount: a file-size limit (RLIMIT_FSIZE, SIGXFSZ
// ignored, so writes fail with EFBIG) during step 2's and 3's saves. Each failed save removes
// its temporary directory; once the limit is lifted the next save commits and keep_last holds.
// A stale temporary left by a crash is cleared by the next save. Sync and async.
TEST(TrainingStateStore, ATransientWriteFailureDoesNotStopSavingForGood) {
  for (bool async : {false, true}) {
    SCOPED_TRACE(async ? "async" : "sync");
    const std::string dir = fresh_dir(async ? "diskfull_async" : "diskfull");
    Counter c;
    TrainingStateStore store({.dir = dir, .keep_last = 1, .async = async});
    c.set(1);
    store.save(c.state);
    store.wait();
    fs::create_directories(fs::path(dir) / ".tmp-step-000000000099");  // a crash's leftover
    struct rlimit saved {};
    ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
    void (*previous)(int) = std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit small = saved;
    small.rlim_cur = 1000;  // bytes: the 4000-byte tensor file cannot be written
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
    for (int64_t step : {2, 3}) {
      c.set(step);
      try {
        store.save(c.state);
        store.wait();
        ADD_FAILURE() << "step " << step << " saved past the file-size limit";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("File too large"), std::string::npos) << e.what();
      }
    }
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &saved), 0);
    std::signal(SIGXFSZ, previous);
    for (const auto& e : fs::directory_iterator(dir)) {
      EXPECT_FALSE(e.path().filename().string().starts_with(".tmp-")) << e.path();
    }
    c.set(4);
    store.save(c.state);
    store.wait();
    EXPECT_EQ(store.steps(), (std::vector<int64_t>{4}));
    c.set(0);
    EXPECT_EQ(TrainingStateStore({.dir = dir}).resume(c.state), std::optional<int64_t>(4));
    EXPECT_TRUE(c.consistent(4));
    fs::remove_all(dir);
  }
}

// A custom SaveGroup whose all_gather returns too few or no values is an Error naming the
// lengths, at save and at resume (it was indexed unchecked: garbage in the manifest, a crash).
TEST(TrainingStateStore, AGroupReturningTheWrongLengthIsAnError) {
  const std::string dir = fresh_dir("group");
  Counter c;
  c.set(1);
  TrainingStateStore({.dir = dir}).save(c.state);
  for (int returned : {0, 1}) {
    SCOPED_TRACE(returned);
    SaveGroup group{.rank = 0, .world_size = 2, .all_gather = [returned](const auto& mine) {
                      return returned == 0 ? std::vector<int64_t>{} : mine;
                    }};
    TrainingStateStore store({.dir = dir}, group);
    c.set(2);
    testing::expect_error([&] { store.save(c.state); },
                          {"all_gather returned", "for 2 ranks", "expected"});
    testing::expect_error([&] { store.resume(c.state); }, {"all_gather returned", "for 2 ranks"});
  }
  fs::remove_all(dir);
}

// An asynchronous save's filesystem failure (here the directory replaced by a file) reaches
// wait() as an ember::Error naming the step and the directory, as a synchronous save's does.
TEST(TrainingStateStore, AnAsyncFilesystemFailureIsAnEmberError) {
  const std::string dir = fresh_dir("async_fs");
  Counter c;
  TrainingStateStore store({.dir = dir, .async = true});
  c.set(1);
  store.save(c.state);  // holds the writer's lock from here on
  store.wait();
  fs::remove_all(dir);
  std::ofstream(dir) << "not a directory";
  c.set(7);
  store.save(c.state);
  try {
    store.wait();
    ADD_FAILURE() << "the save did not fail";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("saving step 7 in '" + dir + "' failed"), std::string::npos)
        << e.message();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not an ember::Error: " << e.what();
  }
  fs::remove(dir);
}

// Two writers in one directory: the second one's save is an Error naming the holder of the lock
// (this process); once the first is gone, the second saves.
TEST(TrainingStateStore, ASecondWriterInOneDirectoryIsAnErrorNamingTheFirst) {
  const std::string dir = fresh_dir("two_writers");
  Counter c;
  c.set(1);
  auto first = std::make_unique<TrainingStateStore>(StateStoreOptions{.dir = dir});
  first->save(c.state);
  TrainingStateStore second({.dir = dir});
  EXPECT_EQ(second.resume(c.state), std::optional<int64_t>(1));  // reading needs no lock
  c.set(2);
  testing::expect_error(
      [&] { second.save(c.state); },
      {"another writer is saving into '" + dir + "'", fmt::format("pid {} on ", ::getpid())});
  first.reset();
  second.save(c.state);
  EXPECT_EQ(second.steps(), (std::vector<int64_t>{2, 1}));
  fs::remove_all(dir);
}

// A huge manifest (a sparse 1 TiB file in its place) is refused before it is read: skipped with
// a warning.
TEST(TrainingStateStore, AHugeManifestIsSkippedWithoutReadingIt) {
  const std::string dir = fresh_dir("huge_manifest");
  Counter c;
  TrainingStateStore store({.dir = dir, .keep_last = 2});
  for (int64_t step : {1, 2}) {
    c.set(step);
    store.save(c.state);
  }
  fs::resize_file(fs::path(store.path_of(2)) / "manifest.json", uintmax_t{1} << 40);
  expect_one_skipped(dir, c, 1, "more than the 268435456 it may have");
  fs::remove_all(dir);
}

// Messages that used to mislead: a directory that is a dangling symbolic link ("File exists"),
// a manifest's world size of 2^63 (printed negative): now named as what they are.
TEST(TrainingStateStore, DanglingLinksAndHugeWorldSizesAreNamed) {
  const std::string dir = fresh_dir("dangling");
  fs::create_directory_symlink(dir + "_nowhere", dir);
  testing::expect_error([&] { TrainingStateStore store({.dir = dir}); },
                        {"is a symbolic link to '" + dir + "_nowhere', which does not exist"});
  fs::remove(dir);
  Counter c;
  c.set(1);
  TrainingStateStore store({.dir = dir});
  store.save(c.state);
  const fs::path manifest = fs::path(store.path_of(1)) / "manifest.json";
  std::ifstream in(manifest);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = text.find("\"world_size\": 1");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 15, "\"world_size\": 9223372036854775808");
  std::ofstream(manifest, std::ios::trunc) << text;
  expect_one_skipped(dir, c, std::nullopt, "'world_size' is 9223372036854775808: out of range");
  fs::remove_all(dir);
}

// The disk-full of the report, on a real small disk: a 912 KiB tmpfs (ctest mounts it in a mount
// namespace: train.saved_state_on_a_full_tmpfs; skipped without EMBER_TEST_TMPFS), keep_last 1, a
// save per step of ~240 KB; a filler file fills the disk at step 3 and goes at step 5. Steps 3
// and 4 fail; from step 5 on every save commits again (the failed saves' temporaries used to keep
// the disk full for good). Sync and async.
TEST(TrainingStateStore, AFullDiskThatEmptiesAgainTakesSavesAgain) {
  const char* mount = std::getenv("EMBER_TEST_TMPFS");
  if (mount == nullptr) GTEST_SKIP() << "run by train.saved_state_on_a_full_tmpfs";
  for (bool async : {false, true}) {
    SCOPED_TRACE(async ? "async" : "sync");
    const fs::path dir = fs::path(mount) / (async ? "async" : "sync");
    const fs::path filler = fs::path(mount) / "filler";
    Tensor weights = Tensor::zeros({60'000});  // 240 KB
    TrainingState state;
    state.add_state(
        "w",
        [&] {
          StateDict d;
          d.insert("w", weights);
          return d;
        },
        [&](const StateDict& d) { weights.copy_(d.at("w")); });
    TrainingStateStore store({.dir = dir.string(), .keep_last = 1, .async = async});
    std::vector<int64_t> failed;
    for (int64_t step = 1; step <= 8; ++step) {
      if (step == 3) {
        const fs::space_info space = fs::space(mount);
        std::ofstream(filler, std::ios::binary)
            << std::string(static_cast<size_t>(space.available) - 100'000, 'x');
      }
      if (step == 5) fs::remove(filler);
      weights.fill_(static_cast<double>(step));
      state.progress.step = step;
      try {
        store.save(state);
        store.wait();
      } catch (const Error&) {
        failed.push_back(step);
      }
    }
    EXPECT_EQ(failed, (std::vector<int64_t>{3, 4}));
    EXPECT_EQ(store.steps(), (std::vector<int64_t>{8}));
    fs::remove_all(dir);
  }
}

// A step directory copied under another step's name is not that step's saved state: skipped with
// a warning (it resumed with the returned step not progress.step); nor is one whose manifest's
// tensor table disagrees with its tensor file.
TEST(TrainingStateStore, ACopiedStepDirectoryOrAWrongTensorTableIsSkipped) {
  const std::string dir = fresh_dir("copied");
  Counter c;
  TrainingStateStore store({.dir = dir, .keep_last = 5});
  c.set(1);
  store.save(c.state);
  fs::copy(store.path_of(1), store.path_of(7), fs::copy_options::recursive);
  expect_one_skipped(dir, c, 1, "its directory says step 7, but its manifest says 1");
  fs::remove_all(store.path_of(7));
  c.set(2);
  store.save(c.state);
  const fs::path manifest = fs::path(store.path_of(2)) / "manifest.json";
  std::ifstream in(manifest);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  const size_t at = text.find("1000", text.find("\"shape\""));  // the counter's shape [1000]
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 4, "1001");
  std::ofstream(manifest, std::ios::trunc) << text;
  expect_one_skipped(dir, c, 1, "'counter/value' is f32[1000] on cpu in its tensor file");
  fs::remove_all(dir);
}

// A saved state a resume skipped as corrupt holds no keep_last slot: with keep_last 2, after
// resuming past a corrupt step 3, saving step 4 keeps 4 and 2 (the corrupt one goes), not 4 and 3.
TEST(TrainingStateStore, AKnownCorruptSavedStateHoldsNoKeepLastSlot) {
  const std::string dir = fresh_dir("corrupt_slot");
  Counter c;
  {
    TrainingStateStore writer({.dir = dir, .keep_last = 2});
    for (int64_t step : {1, 2, 3}) {
      c.set(step);
      writer.save(c.state);
    }
  }
  fs::resize_file(fs::path(dir) / "step-000000000003" / "replicated.safetensors", 10);
  TrainingStateStore store({.dir = dir, .keep_last = 2, .warn = [](const std::string&) {}});
  EXPECT_EQ(store.resume(c.state), std::optional<int64_t>(2));
  c.set(4);
  store.save(c.state);
  EXPECT_EQ(store.steps(), (std::vector<int64_t>{4, 2}));
  fs::remove_all(dir);
}

// Only damage frees a slot: a saved state that could not be read (here its manifest is a FIFO, as
// an I/O error or a newer format would be) is skipped but kept, and a step skipped as damaged and
// then saved again is whole: neither is pruned (the first version deleted both).
TEST(TrainingStateStore, OnlyDamagedSavedStatesLoseTheirSlot) {
  const std::string dir = fresh_dir("unreadable_slot");
  Counter c;
  {
    TrainingStateStore writer({.dir = dir, .keep_last = 3});
    for (int64_t step : {1, 2, 3}) {
      c.set(step);
      writer.save(c.state);
    }
  }
  const fs::path manifest = fs::path(dir) / "step-000000000003" / "manifest.json";
  fs::remove(manifest);
  ASSERT_EQ(::mkfifo(manifest.c_str(), 0644), 0);
  {
    TrainingStateStore store({.dir = dir, .keep_last = 3, .warn = [](const std::string&) {}});
    EXPECT_EQ(store.resume(c.state), std::optional<int64_t>(2));
    c.set(4);
    store.save(c.state);
    EXPECT_EQ(store.steps(), (std::vector<int64_t>{4, 3, 2}));
  }
  // Step 4 damaged, skipped, saved again, then step 5: 5, 4 and 3 stay.
  fs::resize_file(fs::path(dir) / "step-000000000004" / "replicated.safetensors", 10);
  TrainingStateStore store({.dir = dir, .keep_last = 3, .warn = [](const std::string&) {}});
  EXPECT_EQ(store.resume(c.state), std::optional<int64_t>(2));
  c.set(4);
  store.save(c.state);
  c.set(5);
  store.save(c.state);
  EXPECT_EQ(store.steps(), (std::vector<int64_t>{5, 4, 3}));
  fs::remove_all(dir);
}

// A FIFO where a saved state's manifest or tensor file should be is refused at once (no writer
// would ever come: opening it blocked forever), and the saved state skipped with a warning.
TEST(TrainingStateStore, AFifoInASavedStateIsSkippedNotWaitedFor) {
  for (const char* file : {"manifest.json", "replicated.safetensors"}) {
    SCOPED_TRACE(file);
    const std::string dir = fresh_dir("fifo");
    Counter c;
    TrainingStateStore store({.dir = dir, .keep_last = 2});
    c.set(1);
    store.save(c.state);
    c.set(2);
    store.save(c.state);
    const fs::path target = fs::path(store.path_of(2)) / file;
    fs::remove(target);
    ASSERT_EQ(::mkfifo(target.c_str(), 0644), 0);
    expect_one_skipped(dir, c, 1, "not a regular file");
    fs::remove_all(dir);
  }
}

TEST(TrainingStateStore, AsynchronousSaveKeepsTheStepBoundaryValues) {
  const std::string dir = fresh_dir("async");
  Counter c;
  {
    TrainingStateStore store({.dir = dir, .async = true});
    c.set(7);
    store.save(c.state);
    c.value.fill_(-1.0);  // training goes on while the save is written
    c.set(8);
    store.save(c.state);  // waits for the first: at most one in flight
    c.value.fill_(-2.0);
    store.wait();
    EXPECT_EQ(store.steps(), (std::vector<int64_t>{8, 7}));
  }
  c.set(0);
  TrainingStateStore store({.dir = dir});
  EXPECT_EQ(store.resume(c.state), std::optional<int64_t>(8));
  EXPECT_TRUE(c.consistent(8));
  fs::remove_all(dir);
}

TEST(TrainingStateStore, BadOptionsAreErrors) {
  testing::expect_error([] { TrainingStateStore({.dir = ""}); }, "StateStoreOptions::dir is empty");
  testing::expect_error([] { TrainingStateStore({.dir = "/tmp/x", .keep_last = 0}); },
                        "keep_last must be >= 1, not 0");
  testing::expect_error([] { TrainingStateStore({.dir = "/proc/version/ckpt"}); },
                        "cannot create the directory '/proc/version/ckpt'");
  TrainingState s;
  testing::expect_error(
      [&] {
        s.add_state(
            "a/b", [] { return StateDict(); }, [](const StateDict&) {});
      },
      "without '/'");
  s.add_state(
      "a", [] { return StateDict(); }, [](const StateDict&) {});
  testing::expect_error(
      [&] {
        s.add_state(
            "a", [] { return StateDict(); }, [](const StateDict&) {});
      },
      "'a' is registered twice");
}

// kill -9 at random moments while a child saves in a loop: whatever saved state resume picks
// afterwards loads and verifies, and holds the values of its step.
TEST(TrainingStateStore, KillNineWhileSavingNeverLeavesABrokenNewestSavedState) {
  const std::string dir = fresh_dir("kill");
  std::mt19937 rng(12345);
  int64_t last = 0;
  for (int round = 0; round < 25; ++round) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      Counter c;
      TrainingStateStore store({.dir = dir, .keep_last = 2, .warn = [](const std::string&) {}});
      if (auto step = store.resume(c.state)) c.state.progress.step = *step;
      for (int64_t step = c.state.progress.step + 1;; ++step) {
        c.set(step);
        store.save(c.state);
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 40000));
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    Counter c;
    TrainingStateStore store({.dir = dir, .warn = [](const std::string&) {}});
    const auto step = store.resume(c.state);
    if (!step) {
      EXPECT_EQ(last, 0) << "a saved state existed before round " << round;
      continue;
    }
    EXPECT_GE(*step, last) << "round " << round;
    EXPECT_TRUE(c.consistent(*step)) << "round " << round << " step " << *step;
    last = *step;
  }
  EXPECT_GT(last, 0);
  fs::remove_all(dir);
}

// ---- safetensors ------------------------------------------------------------------------------

TEST(Safetensors, RoundTripsEveryDtypeEmptyTensorsAndMetadata) {
  StateDict d;
  d.insert("f32", Tensor::from_vector<float>({1.5f, -2.0f, 3.25f}, {3}));
  d.insert("f16", Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2}).to(DType::f16));
  d.insert("bf16", Tensor::from_vector<float>({-1}, {1}).to(DType::bf16));
  d.insert("i32", Tensor::from_vector<int32_t>({7, -8}, {2}));
  d.insert("i64", Tensor::from_vector<int64_t>({int64_t{1} << 40}, {1}));
  d.insert("u8", Tensor::from_vector<uint8_t>({255, 0, 1}, {3, 1}));
  d.insert("empty", Tensor::zeros({0, 4}));
  const std::string bytes = encode_safetensors(d, {{"who", "ember"}});
  const Safetensors back = decode_safetensors(
      std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), "roundtrip");
  EXPECT_EQ(back.metadata.at("who"), "ember");
  ASSERT_EQ(back.tensors.size(), d.size());
  for (const auto& [k, t] : d) {
    const Tensor& g = back.tensors.at(k);
    EXPECT_EQ(g.shape(), t.shape()) << k;
    EXPECT_EQ(g.dtype(), t.dtype()) << k;
    ASSERT_EQ(g.nbytes(), t.nbytes()) << k;
    EXPECT_EQ(std::memcmp(g.data(), t.data(), t.nbytes()), 0) << k;
  }
  // The data starts 8-byte aligned (the header is padded with spaces).
  uint64_t header = 0;
  for (int i = 0; i < 8; ++i)
    header |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
  EXPECT_EQ(header % 8, 0u);
}

// The writer refuses what the reader refuses: a header over 100 MB, two tensors of one name.
TEST(Safetensors, TheWriterRefusesWhatTheReaderRefuses) {
  StateDict d;
  d.insert("x", Tensor::zeros({2}));
  testing::expect_error(
      [&] {
        encode_safetensors(d, {{"big", std::string(100'000'001, 'a')}});
      },
      "over the format's 100 MB limit");
  const Tensor t = Tensor::zeros({2});
  const NamedViews twice = {{"w", t.view()}, {"w", t.view()}};
  const std::string path =
      (fs::temp_directory_path() / fmt::format("ember_twice_{}.safetensors", ::getpid())).string();
  testing::expect_error([&] { write_safetensors(path, twice, {}); }, "two tensors are named 'w'");
  EXPECT_FALSE(fs::exists(path));
}

TEST(Safetensors, MalformedFilesAreErrors) {
  auto decode = [](const std::string& bytes) {
    return decode_safetensors(
        std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), "bad.safetensors");
  };
  auto file = [](const std::string& header, size_t data) {
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    return out + header + std::string(data, '\0');
  };
  testing::expect_error([&] { decode("abc"); }, "too short");
  testing::expect_error([&] { decode(std::string(8, '\xff')); }, "exceeds the file");
  testing::expect_error([&] { decode(file("{nope", 0)); }, "not valid JSON");
  testing::expect_error([&] { decode(file("[]", 0)); }, "not a JSON object");
  testing::expect_error(
      [&] { decode(file(R"({"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", 8)); },
      "dtype is not one of");
  testing::expect_error(
      [&] { decode(file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8)); },
      "does not match its shape");
  testing::expect_error(
      [&] { decode(file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4)); },
      "outside the data");
  testing::expect_error(
      [&] {
        decode(file(
            R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
            4));
      },
      "overlap");
  testing::expect_error(
      [&] { decode(file(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4)); },
      "not a size");
  testing::expect_error([&] { decode(file(R"({"__metadata__":{"k":1}})", 0)); },
                        "metadata 'k' is not a string");
  // JSON keeps the last of two equal keys; a name given twice is an Error, even with one range.
  testing::expect_error(
      [&] {
        decode(file(
            R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
            16));
      },
      "the key 'a' appears twice in one object of the header");
  // So is a key given twice inside an entry (which dtype would it be?) or in the metadata; equal
  // keys in different objects are fine.
  testing::expect_error(
      [&] {
        decode(file(R"({"a":{"dtype":"F32","dtype":"F16","shape":[1],"data_offsets":[0,4]}})", 4));
      },
      "the key 'dtype' appears twice in one object of the header");
  testing::expect_error(
      [&] { decode(file(R"({"__metadata__":{"format":"pt","format":"np"}})", 0)); },
      "the key 'format' appears twice in one object of the header");
  const Safetensors fine = decode(file(
      R"({"__metadata__":{"a":"x"},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
      8));
  EXPECT_EQ(fine.tensors.size(), 2u);
  EXPECT_EQ(fine.metadata.at("a"), "x");
  testing::expect_error([&] { decode(file(R"({"__metadata__":{"":"1","":"2"}})", 0)); },
                        "the key '' appears twice in one object of the header");
  testing::expect_error(
      [&] { decode(file(R"({"":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4)); },
      "a tensor has an empty name");
}

// A file that cannot be written whole (here: a file-size limit, writes failing with EFBIG) leaves
// the file it would replace as it was, and no temporary beside it.
TEST(Safetensors, AFailedWriteKeepsTheFileItWouldReplace) {
  const fs::path dir(fresh_dir("replace"));
  fs::create_directories(dir);
  const std::string path = (dir / "model.safetensors").string();
  StateDict small, large;
  small.insert("w", Tensor::from_vector<float>({1, 2, 3}, {3}));
  large.insert("w", Tensor::zeros({4000}));
  write_safetensors(path, small);
  const std::string before = read_whole_file(path);
  struct rlimit saved {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  void (*previous)(int) = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit limit = saved;
  limit.rlim_cur = 1000;  // bytes: the 16000-byte tensor cannot be written
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limit), 0);
  std::string error;
  try {
    write_safetensors(path, large);
  } catch (const Error& e) {
    error = e.what();
  }
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &saved), 0);
  std::signal(SIGXFSZ, previous);
  EXPECT_NE(error.find("File too large"), std::string::npos) << error;
  EXPECT_EQ(read_whole_file(path), before);
  EXPECT_EQ(read_safetensors(path).tensors.at("w").to_vector<float>(),
            (std::vector<float>{1, 2, 3}));
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"model.safetensors"});
  // Written whole, it replaces the file. Through a symlink, the link's target is replaced and
  // the link stays.
  const fs::path link = dir / "link.safetensors";
  fs::create_symlink("model.safetensors", link);
  write_safetensors(link.string(), large);
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(link)));
  EXPECT_EQ(read_safetensors(path).tensors.at("w").numel(), 4000);
  names.clear();
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"link.safetensors", "model.safetensors"}));
  // A dangling symlink: its target is created (whole, by rename); the link stays.
  const fs::path dangling = dir / "dangling.safetensors";
  fs::create_symlink("created.safetensors", dangling);
  write_safetensors(dangling.string(), small);
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(dangling)));
  EXPECT_EQ(read_safetensors((dir / "created.safetensors").string()).tensors.at("w").numel(), 3);
  // A file that is not a regular one is written in place, not replaced.
  write_safetensors("/dev/null", small);
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
  testing::expect_error([&] { write_safetensors(dir.string(), small); }, "is a directory");
  fs::remove_all(dir);
}

// A writer killed while it writes leaves the old file as it was and nothing beside it: the
// temporary has no name until it is written and fsynced (O_TMPFILE on this file system).
TEST(Safetensors, AWriterKilledWhileWritingLeavesNothingBehind) {
  const fs::path dir(fresh_dir("killed"));
  fs::create_directories(dir);
  if (!testing::unnamed_temporaries_in(dir)) {
    fs::remove_all(dir);
    GTEST_SKIP() << "no O_TMPFILE or /proc here: the temporary is named from the start";
  }
  const fs::path path = dir / "model.safetensors";
  StateDict small;
  small.insert("w", Tensor::from_vector<float>({1, 2, 3}, {3}));
  write_safetensors(path.string(), small);
  const std::string before = read_whole_file(path.string());
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    try {
      train::durable::FileWriter file(path, "probe");
      const std::string chunk(1 << 20, 'x');
      file.write(chunk.data(), chunk.size());
      ::kill(::getpid(), SIGKILL);  // killed mid-write, before sync()
    } catch (...) {
    }
    ::_exit(2);  // never back into the test runner
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  EXPECT_EQ(read_whole_file(path.string()), before);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"model.safetensors"});
  // Synced and committed, the file is replaced, named on the way (sync) and renamed (commit).
  {
    train::durable::FileWriter file(path, "probe");
    file.write("new", 3);
    file.sync();
    names.clear();
    for (const auto& e : fs::directory_iterator(dir)) {
      names.push_back(e.path().filename().string());
    }
    EXPECT_EQ(names.size(), 2u);  // the file and its named temporary
    file.commit();
    testing::expect_error([&] { file.commit(); },
                          "probe: '" + path.string() + "' is already finished");
  }
  EXPECT_EQ(read_whole_file(path.string()), "new");
  // Where linkat is refused, the written bytes are copied to a named temporary instead.
  const int calls = testing::linkat_calls();
  {
    const testing::FailingLinkat refused(EPERM);
    train::durable::FileWriter file(path, "probe");
    const std::string bytes(3 << 20, 'y');  // more than one copy buffer
    file.write(bytes.data(), bytes.size());
    file.finish();
  }
  EXPECT_GT(testing::linkat_calls(), calls);  // the library's call came here
  EXPECT_EQ(read_whole_file(path.string()), std::string(3 << 20, 'y'));
  // Any other failure to name it (a disk error) is an Error, and nothing is left.
  {
    const testing::FailingLinkat failing(EIO);
    train::durable::FileWriter file(path, "probe");
    file.write("lost", 4);
    testing::expect_error([&] { file.sync(); }, "probe: cannot write '" + path.string() +
                                                    "' (naming its temporary): Input/output error");
  }
  EXPECT_EQ(read_whole_file(path.string()), std::string(3 << 20, 'y'));
  // A copy that fails part way (a size limit) is never committed, not even by a second sync().
  {
    const testing::FailingLinkat refused(EPERM);
    train::durable::FileWriter file(path, "probe");
    const std::string bytes(3 << 20, 'z');
    file.write(bytes.data(), bytes.size());
    const testing::FileSizeLimit limit(1 << 20);
    testing::expect_error([&] { file.sync(); }, "failed after 1048576 bytes: File too large");
    testing::expect_error([&] { file.sync(); }, "is already finished");
    testing::expect_error([&] { file.commit(); }, "is already finished");
  }
  EXPECT_EQ(read_whole_file(path.string()), std::string(3 << 20, 'y'));
  names.clear();
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"model.safetensors"});
  fs::remove_all(dir);
}

// Every truncation and thousands of random byte changes of a valid file: a clean Error or a
// successful decode, never a crash (the debug preset runs this under ASan and UBSan).
TEST(Safetensors, FuzzedBytesNeverCrash) {
  StateDict d;
  d.insert("w", Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}));
  d.insert("b", Tensor::from_vector<int64_t>({9}, {1}));
  const std::string good = encode_safetensors(d, {{"m", "x"}});
  std::mt19937 rng(7);
  int errors = 0;
  auto attempt = [&](const std::string& bytes) {
    try {
      decode_safetensors(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
                         "fuzz");
    } catch (const Error&) {
      ++errors;
    }
  };
  for (size_t n = 0; n < good.size(); ++n) attempt(good.substr(0, n));
  for (int i = 0; i < 5000; ++i) {
    std::string bytes = good;
    const int changes = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < changes; ++k) bytes[rng() % bytes.size()] = static_cast<char>(rng());
    attempt(bytes);
  }
  EXPECT_GT(errors, static_cast<int>(good.size()));  // every truncation at least
}

// The manifest and the progress file, fuzzed on disk: resume skips (with a warning) or loads,
// never crashes.
// A tensor file whose size and checksum match the manifest but that does not decode (a header
// size beyond the file) is skipped with a warning like a corrupt one: resume takes the older.
TEST(TrainingStateStore, AChecksumValidButUndecodableFileIsSkipped) {
  const std::string dir = fresh_dir("undecodable");
  Counter c;
  TrainingStateStore store({.dir = dir, .keep_last = 2});
  for (int64_t step : {1, 2}) {
    c.set(step);
    store.save(c.state);
  }
  const fs::path step2(store.path_of(2));
  auto slurp = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  auto hex = [](const std::string& bytes) {
    return fmt::format("{:016x}", XXH3_64bits(bytes.data(), bytes.size()));
  };
  std::string tensors = slurp(step2 / "replicated.safetensors");
  const std::string old_hash = hex(tensors);
  std::memset(tensors.data(), 0xff, 8);  // the header size: far beyond the file
  std::ofstream(step2 / "replicated.safetensors", std::ios::trunc | std::ios::binary) << tensors;
  std::string manifest = slurp(step2 / "manifest.json");
  const size_t at = manifest.find(old_hash);
  ASSERT_NE(at, std::string::npos);
  manifest.replace(at, old_hash.size(), hex(tensors));
  std::ofstream(step2 / "manifest.json", std::ios::trunc | std::ios::binary) << manifest;
  expect_one_skipped(dir, c, 1, "exceeds the file");
  fs::remove_all(dir);
}

TEST(TrainingStateStore, FuzzedManifestsAreSkippedOrLoaded) {
  const std::string dir = fresh_dir("fuzz");
  Counter c;
  c.set(3);
  TrainingStateStore({.dir = dir}).save(c.state);
  const fs::path manifest = fs::path(TrainingStateStore({.dir = dir}).path_of(3)) / "manifest.json";
  std::ifstream in(manifest);
  const std::string good((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::mt19937 rng(11);
  int skipped = 0;
  for (int i = 0; i < 300; ++i) {
    std::string bytes = good;
    if (i % 3 == 0) {
      bytes.resize(rng() % bytes.size());
    } else {
      bytes[rng() % bytes.size()] = static_cast<char>(rng());
    }
    std::ofstream(manifest, std::ios::trunc | std::ios::binary) << bytes;
    int warned = 0;
    TrainingStateStore store({.dir = dir, .warn = [&](const std::string&) { ++warned; }});
    try {
      const auto step = store.resume(c.state);
      if (!step) ++skipped;
      EXPECT_TRUE(step || warned == 1);
    } catch (const Error&) {  // e.g. a world size changed into another number
    }
  }
  EXPECT_GT(skipped, 100);
  fs::remove_all(dir);
}

// Python's safetensors package reads ember's file (when Python has it; else skipped).
TEST(Safetensors, PythonReadsEmbersFiles) {
  if (std::system("python3 -c 'import safetensors.numpy' 2>/dev/null") != 0) {
    GTEST_SKIP() << "Python's safetensors package is not installed";
  }
  const std::string dir = fresh_dir("python");
  fs::create_directories(dir);
  StateDict d;
  d.insert("w", Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}));
  const std::string bytes = encode_safetensors(d, {{"m", "x"}});
  std::ofstream(dir + "/w.safetensors", std::ios::binary) << bytes;
  const std::string cmd = "python3 -c \"from safetensors.numpy import load_file; t = load_file('" +
                          dir +
                          "/w.safetensors')['w']; assert t.shape == (2, 3) and t[1, 2] == 6\"";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ember::train
