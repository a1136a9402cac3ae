#include "ember/train/preemption.hpp"

#include <atomic>
#include <csignal>

#include "ember/core/error.hpp"

namespace ember::train {
namespace {

std::atomic<int> g_signal{0};
std::atomic<bool> g_active{false};
struct sigaction g_previous_term {};
struct sigaction g_previous_usr1 {};

extern "C" void on_signal(int signal) {
  int expected = 0;
  g_signal.compare_exchange_strong(expected, signal);  // async-signal-safe: lock-free atomics
}

}  // namespace

PreemptionGuard::PreemptionGuard() {
  EMBER_CHECK(!g_active.exchange(true), "PreemptionGuard: one guard at a time");
  g_signal = 0;
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
  return g_signal.load() != 0;
}
int PreemptionGuard::signal() const {
  return g_signal.load();
}
void PreemptionGuard::reset() {
  g_signal = 0;
}

}  // namespace ember::train
