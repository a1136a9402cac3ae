// Faults for the tests of file writing (durable::FileWriter and its users).
//
// linkat for the whole ember_tests binary: the library's calls land here (an executable's
// definition comes before libc's). It is the real one unless a test makes it fail, as a sandbox
// (EPERM) or a failing disk (EIO) would, to reach FileWriter's other paths.
#pragma once

#include <sys/resource.h>

#include <filesystem>

namespace ember::testing {

// Whether FileWriter's temporaries in `dir` start unnamed (O_TMPFILE there, /proc mounted), so
// that they are named through linkat.
bool unnamed_temporaries_in(const std::filesystem::path& dir);

// From now on, linkat fails with `error` after `successes` more calls pass through to the real
// one (0: at once).
void fail_linkat(int error, int successes = 0);
// The real linkat again.
void restore_linkat();
// The calls so far.
int linkat_calls();

// fail_linkat for a scope.
class FailingLinkat {
 public:
  explicit FailingLinkat(int error, int successes = 0) { fail_linkat(error, successes); }
  ~FailingLinkat() { restore_linkat(); }
  FailingLinkat(const FailingLinkat&) = delete;
  FailingLinkat& operator=(const FailingLinkat&) = delete;
};

// RLIMIT_FSIZE for a scope, SIGXFSZ ignored: writes past `bytes` fail with EFBIG.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes);
  ~FileSizeLimit();
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  struct rlimit saved_ {};
  void (*previous_)(int);
};

}  // namespace ember::testing
