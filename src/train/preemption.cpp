#include "ember/train/preemption.hpp"

#include <atomic>
#include <csignal>

#include "ember/core/error.hpp"

namespace ember::train {
namespace {

std::atomic<int> g_signal{0};
std::atomic<bool> g_active{false};
std::atomic<bool> g_armed{false};  // set by the first requested(): a step boundary was reached
struct sigaction g_previous_term {};
struct sigaction g_previous_usr1 {};

// Async-signal-safe: lock-free atomics, sigaction and raise. The first request after a step
// boundary is recorded for the loop to act on; a request before any step boundary (a resume
// that hangs on a bad file, a long start-up), or a second one while the first is unanswered,
// ends the process as the signal would without the guard: nothing is lost that a checkpoint
// could save, and a stuck process cannot ignore being told to stop.
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
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // system calls in flight go on; the loop checks the flag
  sigaction(SIGTERM, &action, &g_previous_term);
  sigaction(SIGUSR1, &action, &g_previous_usr1);
}

PreemptionGuard::~PreemptionGuard() {
  sigaction(SIGTERM, &g_previous_term, nullptr);
  sigaction(SIGUSR1, &g_previous_usr1, nullptr);
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
