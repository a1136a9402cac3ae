#include "ember/core/threads.hpp"

#include <omp.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <mutex>

#include "ember/core/denormals.hpp"
#include "ember/core/error.hpp"

namespace ember {
namespace {
constexpr int kMaxThreads = 4096;

// The chosen count (0: OpenMP's default) and a generation that changes with every choice, so
// that each thread applies the latest one (omp_set_num_threads is per thread).
std::atomic<int> g_threads{0};
std::atomic<uint64_t> g_generation{1};
std::once_flag g_env_read;
thread_local uint64_t t_applied = 0;

void read_environment() {
  const char* text = std::getenv("EMBER_NUM_THREADS");
  if (text == nullptr || *text == '\0') return;
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(text, &end, 10);
  EMBER_CHECK(*end == '\0' && errno == 0 && n >= 1 && n <= kMaxThreads,
              "EMBER_NUM_THREADS='{}': expected a whole number of threads from 1 to {}. Unset "
              "it or give e.g. EMBER_NUM_THREADS=4",
              text, kMaxThreads);
  g_threads.store(static_cast<int>(n));
  g_generation.fetch_add(1);
}
}  // namespace

namespace detail {
void apply_thread_environment() {
  std::call_once(g_env_read, read_environment);
  read_flush_denormals_environment();
  const uint64_t generation = g_generation.load();
  if (t_applied == generation) return;
  t_applied = generation;
  const int n = g_threads.load();
  if (n > 0) omp_set_num_threads(n);
}
}  // namespace detail

void set_num_threads(int threads) {
  EMBER_CHECK(threads >= 1 && threads <= kMaxThreads,
              "set_num_threads({}): expected 1 to {} threads", threads, kMaxThreads);
  std::call_once(g_env_read, [] {});  // an explicit choice wins over EMBER_NUM_THREADS
  g_threads.store(threads);
  g_generation.fetch_add(1);
  detail::apply_thread_environment();
}

int num_threads() {
  detail::apply_thread_environment();
  return omp_get_max_threads();
}

}  // namespace ember
