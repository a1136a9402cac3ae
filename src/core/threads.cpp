#include "ember/core/threads.hpp"

#include <omp.h>

#include <cerrno>
#include <cstdlib>
#include <mutex>
#include <string>

#include "ember/core/error.hpp"

namespace ember {
namespace {
std::once_flag g_env_applied;

void apply_environment() {
  const char* text = std::getenv("EMBER_NUM_THREADS");
  if (text == nullptr || *text == '\0') return;
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(text, &end, 10);
  EMBER_CHECK(*end == '\0' && errno == 0 && n >= 1 && n <= 4096,
              "EMBER_NUM_THREADS='{}': expected a whole number of threads from 1 to 4096. Unset "
              "it or give e.g. EMBER_NUM_THREADS=4",
              text);
  omp_set_num_threads(static_cast<int>(n));
}
}  // namespace

namespace detail {
// Called when ember creates an allocator (src/core/allocator.cpp): the environment applies once,
// unless set_num_threads came first.
void apply_thread_environment() {
  std::call_once(g_env_applied, apply_environment);
}
}  // namespace detail

void set_num_threads(int threads) {
  EMBER_CHECK(threads >= 1, "set_num_threads({}): expected at least 1 thread", threads);
  std::call_once(g_env_applied, [] {});  // an explicit choice wins over EMBER_NUM_THREADS
  omp_set_num_threads(threads);
}

int num_threads() {
  detail::apply_thread_environment();
  return omp_get_max_threads();
}

}  // namespace ember
