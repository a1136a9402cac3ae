// --save-dir DIR --save-every N --resume, shared by the training examples: periodic saves of the
// training state (train::TrainingStateStore), a resume from the newest valid one, and a graceful
// stop on SIGTERM or SIGUSR1 (train::PreemptionGuard) that saves and exits 0.
#pragma once

#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli.hpp"
#include "ember/amp/grad_scaler.hpp"
#include "ember/core/error.hpp"
#include "ember/core/state_dict.hpp"
#include "ember/data/loader.hpp"
#include "ember/train/preemption.hpp"
#include "ember/train/training_state.hpp"

namespace example {

struct SaveConfig {
  std::string dir;    // empty: no saved states
  int64_t every = 0;  // steps between saves (0: only on preemption)
  bool resume = false;
};

inline void add_save_options(std::map<std::string_view, Setter>& options, SaveConfig& c) {
  options["--save-dir"] = [&c](const std::string& v) {
    if (v.empty()) throw UsageError{"--save-dir needs a directory, not ''"};
    c.dir = v;
  };
  options["--save-every"] = [&c](const std::string& v) {
    c.every = parse_int("--save-every", v, 1);
  };
  options["--resume"] = [&c](const std::string&) { c.resume = true; };
}

inline void check_save_options(const SaveConfig& c) {
  if (c.dir.empty() && (c.every > 0 || c.resume)) {
    throw UsageError{"--save-every and --resume need --save-dir"};
  }
}

// The spirals options a bitwise continuation depends on (--steps --batch --lr --classes --points
// --seed), as SavedStates' `options`; an example adds its own.
inline std::map<std::string, std::string> spiral_save_options(const SpiralConfig& c) {
  return {{"steps", std::to_string(c.steps)},   {"batch", std::to_string(c.batch)},
          {"lr", fmt::format("{}", c.lr)},      {"classes", std::to_string(c.classes)},
          {"points", std::to_string(c.points)}, {"seed", std::to_string(c.seed)}};
}

// An example's training state (model, optimizer, scaler, progress) with saves, resume and
// the preemption guard when --save-dir is given; nothing otherwise.
class SavedStates {
 public:
  // `options`: what a bitwise continuation depends on (--seed, --steps...): saved as metadata; a
  // resume with other values warns. `group`: the ranks (dist::save_group), one by default.
  SavedStates(const SaveConfig& config, ember::nn::Module& model,
              ember::train::Optimizer& optimizer, ember::amp::GradScaler& scaler,
              std::map<std::string, std::string> options = {}, ember::train::SaveGroup group = {})
      : config_(config), options_(std::move(options)) {
    state_.add_module("model", model);
    state_.add_optimizer("optimizer", optimizer);
    // The scaler fits as docs/amp.md says: disabled (bf16, f32), it loads nothing, so an f16 run
    // resumes in bf16; enabled (f16), it needs the state an f16 run saved.
    state_.add_state(
        "scaler", [&scaler] { return scaler.state_dict(); },
        [&scaler](const ember::StateDict& d) { scaler.load_state_dict(d); },
        [&scaler](const ember::StateDict& given) -> std::vector<std::string> {
          if (!scaler.enabled()) return {};
          if (given.empty()) {
            return {
                "the saved state has no loss-scaling state (it was saved with --amp bf16 or "
                "f32), which --amp f16 needs: resume with the --amp it was saved with, or "
                "start a new f16 run without --resume"};
          }
          const ember::StateDictMismatch m = ember::compare_state_dicts(scaler.state_dict(), given);
          if (m.empty()) return {};
          return {m.describe()};
        });
    state_.metadata = options_;
    if (config.dir.empty()) return;
    store_.emplace(ember::train::StateStoreOptions{.dir = config.dir}, std::move(group));
    guard_.emplace();
  }

  // Makes `loader`'s position part of the training state (data::track_in): saved with each
  // save, and a resume seeks the loader there.
  void track(ember::data::Loader& loader, int64_t batches_per_epoch) {
    ember::data::track_in(state_, loader, batches_per_epoch);
  }

  // With --resume: the progress of the newest valid saved state, now loaded (nullopt without
  // one); `say` gets a line on what happened.
  std::optional<ember::train::Progress> resume(const std::function<void(const std::string&)>& say) {
    if (!store_ || !config_.resume) return std::nullopt;
    const auto step = store_->resume(state_);
    if (!step) {
      say(fmt::format("no saved state in {}: starting from step 1\n", config_.dir));
      return std::nullopt;
    }
    for (const auto& [key, value] : options_) {
      const auto it = state_.metadata.find(key);
      if (it != state_.metadata.end() && it->second != value) {
        say(
            fmt::format("warning: the saved state was made with --{} {}, this run has {}: the "
                        "continuation is not the run that was interrupted\n",
                        key, it->second, value));
      }
    }
    state_.metadata = options_;
    say(fmt::format("resumed from {} (step {})\n", store_->path_of(*step), *step));
    return state_.progress;
  }

  // After each step: a save on --save-every steps; true when a signal asked to stop (then
  // the state is saved). `any_rank` (data parallel) makes every rank stop after the same step.
  // A periodic save that fails (a full disk for a while, an I/O error) is a warning and training
  // goes on: the next save retries (ranks fail a save together, so they go on together).
  bool after_step(const ember::train::Progress& progress,
                  const std::function<bool(bool)>& any_rank = {}) {
    if (!store_) return false;
    state_.progress = progress;
    const bool periodic = config_.every > 0 && progress.step % config_.every == 0;
    if (periodic) {
      try {
        store_->save(state_);
      } catch (const ember::Error& e) {
        std::fprintf(stderr, "warning: the save of step %lld failed; training goes on: %s\n",
                     static_cast<long long>(progress.step), e.message().c_str());
      }
    }
    bool stop = guard_->requested();
    if (any_rank) stop = any_rank(stop);
    if (stop && !periodic) store_->save(state_);
    if (stop) store_->wait();
    return stop;
  }

  std::string path_of(int64_t step) const { return store_->path_of(step); }

 private:
  SaveConfig config_;
  std::map<std::string, std::string> options_;
  ember::train::TrainingState state_;
  std::optional<ember::train::TrainingStateStore> store_;
  std::optional<ember::train::PreemptionGuard> guard_;
};

}  // namespace example
