// Helpers shared by ember's unit tests.
#pragma once

#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "ember/core/error.hpp"

namespace ember::testing {

// Same bits, element by element (NaN == NaN where the bits match).
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Runs f, which must throw ember::Error whose message contains every one of `parts`.
template <class F>
void expect_error(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "no ember::Error thrown (expected one mentioning '" << *parts.begin() << "')";
  } catch (const Error& e) {
    for (const std::string& part : parts) {
      EXPECT_NE(e.message().find(part), std::string::npos)
          << "message '" << e.message() << "' lacks '" << part << "'";
    }
  }
}

template <class F>
void expect_error(F&& f, const std::string& part) {
  expect_error(std::forward<F>(f), {part});
}

// Runs f, which must throw ember::Error, and returns its message (a test failure, and "", when f
// throws none).
template <class F>
std::string error_message(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.message();
  }
  ADD_FAILURE() << "no ember::Error was thrown";
  return {};
}

// Sets the OpenMP thread count for a scope and restores the previous one.
class OmpThreads {
 public:
  explicit OmpThreads(int n) : previous_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~OmpThreads() { omp_set_num_threads(previous_); }
  OmpThreads(const OmpThreads&) = delete;
  OmpThreads& operator=(const OmpThreads&) = delete;

 private:
  int previous_;
};

// Runs f with `threads` OpenMP threads.
template <class F>
void with_threads(int threads, F&& f) {
  const OmpThreads scope(threads);
  f();
}

}  // namespace ember::testing
