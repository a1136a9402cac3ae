// Data-parallel training state and preemption: the glue between dist, train::TrainingStateStore
// and PreemptionGuard.
//
//   train::TrainingStateStore store({.dir = "ckpt"}, dist::save_group(*comm));
//   ...
//   if (dist::any_rank(*comm, guard.requested())) { store.save(state); return 0; }
#pragma once

#include "ember/dist/communicator.hpp"
#include "ember/train/training_state.hpp"

namespace ember::dist {

// The communicator's ranks as a save group: rank 0 writes the replicated state, every
// rank its progress, and all resume from the same saved state. `comm` must outlive its use.
inline train::SaveGroup save_group(Communicator& comm) {
  return train::SaveGroup{.rank = comm.rank(),
                          .world_size = comm.world_size(),
                          .all_gather = [&comm](const std::vector<int64_t>& mine) {
                            return comm.host_all_gather(mine);
                          }};
}

// True on every rank when `flag` is true on any (a preemption signal reaches one rank first):
// every rank then stops at the same step.
inline bool any_rank(Communicator& comm, bool flag) {
  for (int64_t v : comm.host_all_gather({flag ? 1 : 0})) {
    if (v != 0) return true;
  }
  return false;
}

}  // namespace ember::dist
