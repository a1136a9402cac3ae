// main() of the multi-process test binaries: every rank runs every test; rank 0 prints the
// usual report, the other ranks only their failures (prefixed with the rank). A rank whose test
// fails before a collective leaves the others waiting: the communicator's timeout turns that
// into their failure, never a hang.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>

#include "dist_test_support.hpp"

namespace ember::testing {
namespace {

std::unique_ptr<dist::Communicator> g_world;

class FailuresOnly : public ::testing::EmptyTestEventListener {
 public:
  explicit FailuresOnly(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_,
                 result.file_name() ? result.file_name() : "?", result.line_number(),
                 result.summary());
  }

 private:
  int rank_;
};

}  // namespace

dist::Communicator& world() {
  return *g_world;
}

std::vector<std::vector<float>> gather_all(const std::vector<float>& mine) {
  Stream s;
  const auto n = static_cast<int64_t>(mine.size());
  Tensor in = Tensor::from_vector(mine, {n});
  Tensor out = Tensor::empty({n * world().world_size()});
  world().all_gather(s, out, in).wait();
  const std::vector<float> flat = out.to_vector<float>();
  std::vector<std::vector<float>> all;
  for (int r = 0; r < world().world_size(); ++r) {
    all.emplace_back(flat.begin() + r * n, flat.begin() + (r + 1) * n);
  }
  return all;
}

}  // namespace ember::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // Short enough that a lost rank fails the test well within ctest's timeout.
  ember::testing::g_world = ember::dist::init({.timeout_seconds = 60, .check_metadata = 1});
  const int rank = ember::testing::world().rank();
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new ember::testing::FailuresOnly(rank));
  }
  const int failed = RUN_ALL_TESTS();
  // Every rank's verdict: mpirun's exit code reports a failure on any rank.
  ember::testing::world().barrier();
  ember::testing::g_world.reset();
  return failed;
}
