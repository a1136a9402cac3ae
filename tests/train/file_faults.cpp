#include "train/file_faults.hpp"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>

#include "ember/core/error.hpp"

namespace {

std::atomic<int> calls{0};
std::atomic<int> failure{0};         // 0: the real linkat
std::atomic<int> successes_left{0};  // before the failures start

}  // namespace

extern "C" int linkat(int from_dir, const char* from, int to_dir, const char* to,
                      int flags) noexcept {
  calls.fetch_add(1);
  const int error = failure.load();
  if (error != 0 && successes_left.fetch_sub(1) <= 0) {
    errno = error;
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

FileSizeLimit::FileSizeLimit(rlim_t bytes) : previous_(std::signal(SIGXFSZ, SIG_IGN)) {
  EMBER_CHECK(::getrlimit(RLIMIT_FSIZE, &saved_) == 0, "getrlimit failed");
  struct rlimit limit = saved_;
  limit.rlim_cur = bytes;
  EMBER_CHECK(::setrlimit(RLIMIT_FSIZE, &limit) == 0, "setrlimit failed");
}

FileSizeLimit::~FileSizeLimit() {
  ::setrlimit(RLIMIT_FSIZE, &saved_);
  std::signal(SIGXFSZ, previous_);
}

}  // namespace ember::testing
