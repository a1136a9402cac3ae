// --save-dir DIR --save-every N --resume, shared by the training examples: periodic checkpoints
// (train::Checkpointer), a resume from the newest valid one, and a graceful stop on SIGTERM or
// SIGUSR1 (train::PreemptionGuard) that saves and exits 0.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "cli.hpp"

namespace example {

struct SaveConfig {
  std::string dir;    // empty: no checkpoints
  int64_t every = 0;  // steps between checkpoints (0: only on preemption)
  bool resume = false;
};

constexpr const char* kSaveUsage =
    R"(  --save-dir DIR     checkpoints (training state) go to DIR; SIGTERM or SIGUSR1 then
                     saves at the end of the current step and exits 0
  --save-every N     a checkpoint every N steps (default: only when stopped by a signal)
  --resume           continue from the newest valid checkpoint in --save-dir, if any
)";

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

}  // namespace example
