// Training state: save, resume bitwise, survive preemption.
//
//   train::TrainingState state;
//   state.add_module("model", *model);          // parameters, and each Dropout's seed and step
//   state.add_optimizer("optimizer", optimizer); // moments, step counts, learning rate
//   state.add_state("scaler", [&] { return scaler.state_dict(); },
//                   [&](const StateDict& d) { scaler.load_state_dict(d); });
//   train::TrainingStateStore store({.dir = "ckpt", .keep_last = 3});
//   if (auto step = store.resume(state)) { ...continue from state.progress... }
//   ... every N steps: state.progress = {...}; store.save(state);
//
// (Other frameworks call a saved training state a checkpoint; in ember "checkpoint" means
// activation recomputation, nn::Checkpoint.)
//
// A saved state is a directory `<dir>/step-<12 digits>` holding `replicated.safetensors` (every
// registered tensor; PyTorch and Hugging Face tools open it), one `rank-<r>.json` per rank (its
// progress: step, epoch, data position, micro-step) and `manifest.json` (format version, ember
// version, world size, step, each tensor's dtype and shape, each file's size and XXH3-64
// checksum, the user's metadata). Saving writes a temporary directory, fsyncs every file,
// renames it into place and fsyncs the parent: a crash at any moment leaves the previous
// saved states intact. resume() takes the newest saved state whose every file verifies (a corrupt
// or truncated one is skipped with a warning naming it); one that does not fit the registered
// state (names, shapes, dtypes, world size, dropout seeds) is an Error listing the differences,
// and nothing is loaded.
//
// One TrainingStateStore writes to a directory: the first save takes <dir>/.lock (flock, naming the
// process and host), and another writer's save is then an Error naming the holder (reading,
// resume, needs no lock). Saving a step below the newest warns (resume takes the highest step); the
// saved state just written is never the one pruned.
//
// Data parallel: pass a SaveGroup (dist::save_group(comm)). Rank 0 writes the replicated state,
// every rank its own progress; all ranks resume from the same saved state (the newest that
// verifies on every rank).
//
// Asynchronous save (options.async): save() copies the state to host memory at the step
// boundary and returns; a background thread writes it while training goes on; at most one save
// is in flight (the next save(), wait() or the destructor waits for it; with several ranks the
// commit happens there, on the calling thread).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ember/core/state_dict.hpp"
#include "ember/nn/module.hpp"
#include "ember/train/optimizer.hpp"

namespace ember::train {

// Where a rank is in training. Saved per rank.
struct Progress {
  int64_t step = 0;           // optimizer steps done
  int64_t epoch = 0;          // of the data
  int64_t data_position = 0;  // this rank's position in the epoch (samples or batches: yours)
  uint64_t micro_step = 0;    // nn::Context::step, the dropout RNG's counter
};

// The ranks a saved state spans. The default: one process.
struct SaveGroup {
  int rank = 0;
  int world_size = 1;
  // Every rank's `mine` (one length on every rank), in rank order (dist::save_group).
  std::function<std::vector<int64_t>(const std::vector<int64_t>&)> all_gather;
};

class TrainingState {
 public:
  // Replicated state: the same on every rank; rank 0 saves it. Names must be unique and may not
  // contain '/'.
  void add_module(std::string name, nn::Module& module);
  void add_optimizer(std::string name, Optimizer& optimizer);
  // `fit`, when given, decides alone whether a saved state's entries for this component fit (the
  // problems, empty when they do) instead of comparing them with save()'s names, shapes and
  // dtypes: for state whose entries legitimately vary, e.g. a GradScaler, whose dict is empty
  // when disabled (an f16 run resumed in bf16 loads nothing; the reverse needs a clear Error).
  void add_state(std::string name, std::function<StateDict()> save,
                 std::function<void(const StateDict&)> load,
                 std::function<std::vector<std::string>(const StateDict&)> fit = nullptr);

  // Progress kept by another object (data::track_in: a data::Loader's position): `save` writes
  // it into `progress` before each save, `load` takes it from a resumed saved state's. `fit`, when
  // given, lists why a saved progress cannot be loaded; resume checks it before anything loads.
  void add_progress(std::function<void(Progress&)> save, std::function<void(const Progress&)> load,
                    std::function<std::vector<std::string>(const Progress&)> fit = nullptr);

  Progress progress;                            // this rank's
  std::map<std::string, std::string> metadata;  // the user's (replicated)

  // Internal: what save and resume walk over.
  struct Component {
    std::string name;
    std::function<StateDict()> save;
    std::function<void(const StateDict&)> load;
    // Problems beyond names, shapes and dtypes (e.g. dropout seeds), found before anything loads.
    std::function<std::vector<std::string>(const StateDict&)> check;
    // When set: the whole fit check (add_state's `fit`), in place of the comparison with save().
    std::function<std::vector<std::string>(const StateDict&)> fit;
  };
  const std::vector<Component>& components() const { return components_; }
  struct ProgressHook {
    std::function<void(Progress&)> save;
    std::function<void(const Progress&)> load;
    std::function<std::vector<std::string>(const Progress&)> fit;  // may be empty
  };
  const std::vector<ProgressHook>& progress_hooks() const { return progress_hooks_; }

 private:
  void add(Component c);
  std::vector<Component> components_;
  std::vector<ProgressHook> progress_hooks_;
};

struct StateStoreOptions {
  std::string dir;     // created when missing
  int keep_last = 3;   // committed saved states kept (older ones are deleted); >= 1
  bool async = false;  // see the header
  // Where warnings go (a skipped corrupt saved state); default: a line on stderr.
  std::function<void(const std::string&)> warn;
};

class TrainingStateStore {
 public:
  explicit TrainingStateStore(StateStoreOptions options, SaveGroup group = {});
  ~TrainingStateStore();  // waits for a save in flight (its error is printed, not thrown)
  TrainingStateStore(const TrainingStateStore&) = delete;
  TrainingStateStore& operator=(const TrainingStateStore&) = delete;

  // Saves `state` as the saved state of step state.progress.step (an existing one of that step
  // is replaced).
  void save(TrainingState& state);
  // Waits until the save in flight is committed; rethrows its error.
  void wait();
  // Loads the newest saved state that verifies on every rank into `state` (progress included);
  // its step, or nullopt when there is none.
  std::optional<int64_t> resume(TrainingState& state);
  // The committed saved states' steps, newest first.
  std::vector<int64_t> steps() const;
  std::string path_of(int64_t step) const;  // <dir>/step-<12 digits>

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ember::train
