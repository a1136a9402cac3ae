// PreemptionGuard: a graceful stop on SIGTERM (spot instances' notice, Kubernetes, Slurm at the
// time limit) and SIGUSR1 (Slurm's `--signal=USR1@120`): while a guard lives, those signals set
// a flag instead of killing the process; the training loop checks it at each step boundary,
// saves, and exits 0.
//
//   train::PreemptionGuard guard;
//   for (...) {
//     train_step();
//     if (guard.requested()) { store.save(state); return 0; }  // data parallel:
//   }                                             // dist::any_rank(comm, guard.requested())
//
// One guard at a time; the previous handlers come back when it is destroyed.
//
// Where the signal lands: oneDNN's JIT GEMMs point the stack pointer into heap memory (oneDNN
// issue 4845), so a signal frame pushed there would corrupt the heap. While the guard lives, the
// thread that made it takes the signals on an alternate stack and the OpenMP workers block them.
// Threads of your own that run ember's CPU GEMMs should block SIGTERM and SIGUSR1
// (pthread_sigmask) for the same reason.
#pragma once

namespace ember::train {

class PreemptionGuard {
 public:
  PreemptionGuard();
  ~PreemptionGuard();
  PreemptionGuard(const PreemptionGuard&) = delete;
  PreemptionGuard& operator=(const PreemptionGuard&) = delete;

  // True once SIGTERM or SIGUSR1 arrived (since construction or the last reset()). Call it at
  // each step boundary: the first call arms the guard. Before it, and for a second signal while
  // the first is still unanswered (not reset()), a signal ends the process with its default
  // action, so that a job stuck before or between step boundaries can still be stopped.
  bool requested() const;
  // The signal that arrived first (0: none).
  int signal() const;
  void reset();
};

}  // namespace ember::train
