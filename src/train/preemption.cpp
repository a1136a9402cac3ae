#include "ember/train/preemption.hpp"

#include <omp.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <vector>

#include "ember/core/error.hpp"

namespace ember::train {
namespace {

std::atomic<int> g_signal{0};
std::atomic<bool> g_active{false};
std::atomic<bool> g_armed{false};  // set by the first requested(): a step boundary was reached
struct sigaction g_previous_term {};
struct sigaction g_previous_usr1 {};

// Where the handler runs. oneDNN's JIT GEMM kernels point the stack pointer into heap memory
// (oneDNN issue 4845), so a signal frame pushed there corrupts the heap. The main thread takes
// the signals on an alternate stack (SA_ONSTACK); the OpenMP workers, which run those kernels
// too, block them, so the kernel delivers a process-directed SIGTERM to a thread that can take
// it safely. Workers created later by the main thread would inherit its unblocked mask: the
// team is set up once, here, at its full size.
std::vector<char> g_alternate_stack;
stack_t g_previous_stack{};
sigset_t guarded_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  return set;
}
void mask_in_workers(int how) {
  const sigset_t set = guarded_signals();
#pragma omp parallel
  {
    if (omp_get_thread_num() != 0) pthread_sigmask(how, &set, nullptr);
  }
}

// Async-signal-safe: lock-free atomics, sigaction and raise. The first request after a step
// boundary is recorded for the loop to act on; a request before any step boundary (a resume
// that hangs on a bad file, a long start-up), or a second one while the first is unanswered,
// ends the process as the signal would without the guard: nothing is lost that a save of the
// training state could keep, and a stuck process cannot ignore being told to stop.
extern "C" void on_signal(int signal) {
  int expected = 0;
  if (g_armed.load() && g_signal.compare_exchange_strong(expected, signal)) return;
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  sigaction(signal, &default_action, nullptr);
  raise(signal);  // delivered when this handler returns
}

}  // namespace

PreemptionGuard::PreemptionGuard() {
  EMBER_CHECK(!g_active.exchange(true), "PreemptionGuard: one guard at a time");
  g_signal = 0;
  g_armed = false;
  g_alternate_stack.assign(std::max<size_t>(SIGSTKSZ, 64 * 1024), 0);
  stack_t stack{};
  stack.ss_sp = g_alternate_stack.data();
  stack.ss_size = g_alternate_stack.size();
  sigaltstack(&stack, &g_previous_stack);
  mask_in_workers(SIG_BLOCK);
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  // SA_RESTART: system calls in flight go on (the loop checks the flag); SA_ONSTACK: the
  // alternate stack (above).
  action.sa_flags = SA_RESTART | SA_ONSTACK;
  sigaction(SIGTERM, &action, &g_previous_term);
  sigaction(SIGUSR1, &action, &g_previous_usr1);
}

PreemptionGuard::~PreemptionGuard() {
  sigaction(SIGTERM, &g_previous_term, nullptr);
  sigaction(SIGUSR1, &g_previous_usr1, nullptr);
  mask_in_workers(SIG_UNBLOCK);
  sigaltstack(&g_previous_stack, nullptr);
  g_active = false;
}

bool PreemptionGuard::requested() const {
  g_armed = true;
  return g_signal.load() != 0;
}
int PreemptionGuard::signal() const {
  return g_signal.load();
}
void PreemptionGuard::reset() {
  g_signal = 0;
}

}  // namespace ember::train
