// Data-parallel training state and preemption: the glue between dist and train's Checkpointer
// and PreemptionGuard.
//
//   train::Checkpointer checkpoints({.dir = "ckpt"}, dist::checkpoint_group(*comm));
//   ...
//   if (dist::any_rank(*comm, guard.requested())) { checkpoints.save(state); return 0; }
#pragma once

#include "ember/dist/communicator.hpp"
#include "ember/train/checkpointer.hpp"

namespace ember::dist {

// The communicator's ranks as a checkpoint group: rank 0 writes the replicated state, every
// rank its progress, and all resume from the same checkpoint. `comm` must outlive its use.
inline train::CheckpointGroup checkpoint_group(Communicator& comm) {
  return train::CheckpointGroup{.rank = comm.rank(),
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
