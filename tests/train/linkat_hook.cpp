#include "train/linkat_hook.hpp"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

namespace {

std::atomic<int> calls{0};
std::atomic<int> failure{0};         // 0: the real linkat
std::atomic<int> successes_left{0};  // before the failures start

}  // namespace

extern "C" int linkat(int from_dir, const char* from, int to_dir, const char* to,
                      int flags) noexcept {
  calls.fetch_add(1);
  if (failure.load() != 0 && successes_left.fetch_sub(1) <= 0) {
    errno = failure.load();
    return -1;
  }
  return static_cast<int>(::syscall(SYS_linkat, from_dir, from, to_dir, to, flags));
}

namespace ember::testing {

bool unnamed_temporaries_in(const std::filesystem::path& dir) {
  const int probe = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0644);
  if (probe < 0) return false;
  ::close(probe);
  return ::access("/proc/self/fd", X_OK) == 0;
}

void fail_linkat(int error, int successes) {
  successes_left = successes;
  failure = error;
}

void restore_linkat() {
  failure = 0;
}

int linkat_calls() {
  return calls.load();
}

}  // namespace ember::testing
