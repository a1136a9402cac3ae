// The communicator's collectives across ranks: exact values for every op and size (empty,
// one element, sizes that are not a multiple of anything), out-of-order waits, mismatches.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "dist_test_support.hpp"
#include "ember/core/graph.hpp"
#include "test_support.hpp"

namespace ember::testing {
namespace {

using dist::ReduceOp;

class Collectives : public DistOnDevice {};

// Rank r's element i: r * 1000 + i (exact in f32 for these sizes).
std::vector<float> ramp(int rank, int64_t n, float sign = 1) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = sign * (rank * 1000.0f + i);
  return v;
}

TEST_P(Collectives, AllReduceSumAvgMax) {
  Stream s = stream();
  const int w = ranks();
  for (int64_t n : {0, 1, 7, 1000, 4097}) {
    Tensor sum = Tensor::from_vector(ramp(rank(), n), {n}, s);
    Tensor avg = Tensor::from_vector(ramp(rank(), n), {n}, s);
    Tensor max = Tensor::from_vector(ramp(rank(), n, rank() % 2 ? 1 : -1), {n}, s);
    dist::Work a = world().all_reduce(s, sum, ReduceOp::sum);
    dist::Work b = world().all_reduce(s, avg, ReduceOp::avg);
    dist::Work c = world().all_reduce(s, max, ReduceOp::max);
    c.wait(s);
    b.wait(s);
    a.wait(s);
    const auto got_sum = sum.to_vector<float>();
    const auto got_avg = avg.to_vector<float>();
    const auto got_max = max.to_vector<float>();
    for (int64_t i = 0; i < n; ++i) {
      float total = 0;
      float best = -1e30f;
      for (int r = 0; r < w; ++r) {
        total += r * 1000.0f + i;
        best = std::max(best, (r % 2 ? 1.0f : -1.0f) * (r * 1000.0f + i));
      }
      ASSERT_EQ(got_sum[i], total) << "n=" << n << " i=" << i;
      ASSERT_EQ(got_avg[i], total / static_cast<float>(w)) << "n=" << n << " i=" << i;
      ASSERT_EQ(got_max[i], best) << "n=" << n << " i=" << i;
    }
  }
}

TEST_P(Collectives, IntegerSums) {
  Stream s = stream();
  Tensor i32 = Tensor::from_vector<int32_t>({rank(), -rank(), 1 << 20}, {3}, s);
  Tensor i64 = Tensor::from_vector<int64_t>({int64_t{1} << 40, rank()}, {2}, s);
  world().all_reduce(s, i32).wait(s);
  world().all_reduce(s, i64, ReduceOp::max).wait(s);
  const int w = ranks();
  EXPECT_EQ(i32.to_vector<int32_t>(),
            (std::vector<int32_t>{w * (w - 1) / 2, -w * (w - 1) / 2, w << 20}));
  EXPECT_EQ(i64.to_vector<int64_t>(), (std::vector<int64_t>{int64_t{1} << 40, w - 1}));
}

TEST_P(Collectives, BroadcastFromEveryRoot) {
  Stream s = stream();
  for (int root = 0; root < ranks(); ++root) {
    Tensor t = Tensor::from_vector(ramp(rank(), 33), {33}, s);
    world().broadcast(s, t, root).wait(s);
    EXPECT_EQ(t.to_vector<float>(), ramp(root, 33)) << "root " << root;
  }
}

TEST_P(Collectives, AllGatherAndReduceScatter) {
  Stream s = stream();
  const int w = ranks();
  Tensor in = Tensor::from_vector(ramp(rank(), 5), {5}, s);
  Tensor out = Tensor::zeros({5 * w}, DType::f32, s);
  world().all_gather(s, out, in).wait(s);
  std::vector<float> expected;
  for (int r = 0; r < w; ++r) {
    const auto part = ramp(r, 5);
    expected.insert(expected.end(), part.begin(), part.end());
  }
  EXPECT_EQ(out.to_vector<float>(), expected);

  // Each rank contributes ramp(rank, 3 * w); rank r keeps the sums of elements [3r, 3r + 3).
  Tensor whole = Tensor::from_vector(ramp(rank(), 3 * w), {3 * w}, s);
  Tensor mine = Tensor::zeros({3}, DType::f32, s);
  world().reduce_scatter(s, mine, whole, ReduceOp::sum).wait(s);
  std::vector<float> sums(3, 0.0f);
  for (int r = 0; r < w; ++r) {
    for (int j = 0; j < 3; ++j) sums[j] += r * 1000.0f + 3 * rank() + j;
  }
  EXPECT_EQ(mine.to_vector<float>(), sums);
}

// In place: this rank's chunk of the whole tensor as the single-rank one (MPI_IN_PLACE, NCCL's
// in-place rule); any other overlap is an Error before anything starts.
TEST_P(Collectives, InPlaceAllGatherAndReduceScatter) {
  Stream s = stream();
  const int w = ranks();
  Tensor whole = Tensor::from_vector(ramp(rank(), 3 * w), {3 * w}, s);
  Tensor mine = whole.slice(3 * rank(), 3 * rank() + 3);
  world().all_gather(s, whole, mine).wait(s);
  std::vector<float> expected;
  for (int r = 0; r < w; ++r) {
    const auto all = ramp(r, 3 * w);
    expected.insert(expected.end(), all.begin() + 3 * r, all.begin() + 3 * r + 3);
  }
  EXPECT_EQ(whole.to_vector<float>(), expected);

  Tensor in = Tensor::from_vector(ramp(rank(), 3 * w), {3 * w}, s);
  world().reduce_scatter(s, in.slice(3 * rank(), 3 * rank() + 3), in).wait(s);
  const auto got = in.to_vector<float>();
  for (int j = 0; j < 3; ++j) {
    float sum = 0;
    for (int r = 0; r < w; ++r) sum += r * 1000.0f + 3 * rank() + j;
    EXPECT_EQ(got[static_cast<size_t>(3 * rank() + j)], sum) << j;
  }
  if (w > 1) {
    Tensor other = whole.slice(3 * ((rank() + 1) % w), 3 * ((rank() + 1) % w) + 3);
    expect_error([&] { world().all_gather(s, whole, other); },
                 "overlaps the whole one other than at this rank's chunk");
  }
  world().barrier();  // the communicator still works
}

TEST_P(Collectives, ManyInFlightWaitedInAnyOrder) {
  Stream s = stream();
  std::vector<Tensor> tensors;
  std::vector<dist::Work> works;
  for (int k = 0; k < 6; ++k) {
    tensors.push_back(Tensor::full({100 + k}, rank() + k, DType::f32, s));
    works.push_back(world().all_reduce(s, tensors.back()));
  }
  for (int k = 5; k >= 0; --k) works[k].wait();
  for (int k = 0; k < 6; ++k) {
    const float expected = ranks() * (ranks() - 1) / 2.0f + ranks() * k;
    const auto got = tensors[k].to_vector<float>();
    EXPECT_TRUE(std::all_of(got.begin(), got.end(), [&](float v) { return v == expected; })) << k;
    EXPECT_TRUE(works[k].done());
  }
}

TEST_P(Collectives, MismatchedSizesAreReportedNotCorrupted) {
  ASSERT_TRUE(world().checks_metadata());
  Stream s = stream();
  const int64_t n = rank() == 0 ? 10 : 12;
  Tensor t = Tensor::zeros({n}, DType::f32, s);
  const uint64_t checks = world().metadata_checks();
  expect_error([&] { world().all_reduce(s, t); },
               {"the ranks called mismatched collectives", "rank 0: all_reduce(sum) of f32 x 10",
                "rank 1: all_reduce(sum) of f32 x 12"});
  EXPECT_EQ(world().metadata_checks(), checks + 1);
  Tensor b = Tensor::zeros({4}, DType::f32, s);
  expect_error(
      [&] { world().broadcast(s, b, rank() == 0 ? 0 : 1); },
      {"rank 0: broadcast of f32 x 4 from rank 0", "rank 1: broadcast of f32 x 4 from rank 1"});
  // Nothing was started: the communicator still works.
  Tensor ok = Tensor::full({3}, 1.0, DType::f32, s);
  world().all_reduce(s, ok).wait(s);
  EXPECT_EQ(ok.to_vector<float>(), std::vector<float>(3, static_cast<float>(ranks())));
}

// Found by outside testing: an average whose Work was dropped stayed a sum, and a Work that
// outlived its communicator crashed.
TEST_P(Collectives, DroppedWorksCompleteAndWorksOutliveTheirCommunicator) {
  Stream s = stream();
  Tensor t = Tensor::full({5}, rank() + 1, DType::f32, s);
  (void)world().all_reduce(s, t, ReduceOp::avg);  // never waited
  Tensor u = Tensor::zeros({1}, DType::f32, s);
  world().all_reduce(s, u).wait(s);  // after it, in call order
  EXPECT_EQ(t.to_vector<float>(), std::vector<float>(5, (ranks() + 1) / 2.0f));
  if (device().is_cpu()) {
    dist::Work w;
    Tensor v = Tensor::full({3}, 1.0, DType::f32, s);
    {
      dist::Communicator c(world().launch(), {.timeout_seconds = 60});
      w = c.all_reduce(s, v);
    }
    w.wait();
    EXPECT_EQ(v.to_vector<float>(), std::vector<float>(3, static_cast<float>(ranks())));
  }
}

// Found by outside testing on emulated NCCL: misuse accepted, a wait on a CPU stream that did not
// wait, a lost peer that hung the destructor, a failed communicator still taking CPU work.
TEST_P(Collectives, CudaMisuseAndFailuresAreErrors) {
  if (!device().is_cuda()) GTEST_SKIP() << "the NCCL path";
  Stream s = stream();
  Tensor t = Tensor::full({4}, rank() + 1, DType::f32, s);
  Stream cpu;
  expect_error([&] { world().all_reduce(cpu, t); },
               "the stream is on cpu, but the tensors are on cuda:0");
  expect_error([&] { world().all_reduce(s, Tensor::zeros({2}, DType::i32, s), ReduceOp::avg); },
               "avg needs a float tensor");
  // A CPU stream's wait is a host wait.
  world().all_reduce(s, t).wait(Stream());
  EXPECT_EQ(t.to_vector<float>(), std::vector<float>(4, ranks() * (ranks() + 1) / 2.0f));

  // Rank 0 alone calls a second collective: its wait times out, the communicator then refuses
  // everything (CPU work too), and destroying it returns.
  {
    dist::Communicator c(world().launch(), {.timeout_seconds = 2, .check_metadata = 0});
    Tensor u = Tensor::full({3}, 1.0, DType::f32, s);
    c.all_reduce(s, u).wait(s);  // both ranks: the NCCL communicator exists
    if (rank() == 0) {
      try {
        c.all_reduce(s, u).wait();
        ADD_FAILURE() << "no timeout";
      } catch (const Error& e) {
        EXPECT_NE(e.message().find("timed out after 2."), std::string::npos) << e.message();
      }
      expect_error([&] { c.all_reduce(cpu, Tensor::zeros({1})); },
                   "refused: this communicator failed earlier");
    }
  }
  world().barrier();
}

// A graph that captured a collective, replayed, and its communicator destroyed while the replays
// may still be queued (deferred streams): the destructor lets them finish first.
TEST_P(Collectives, DestroyingACommunicatorFinishesItsQueuedReplays) {
  if (!device().is_cuda()) GTEST_SKIP() << "the NCCL path (CPU collectives are not captured)";
  Stream s = stream();
  Tensor t = Tensor::full({4}, 1.0, DType::f32, s);
  std::optional<Graph> graph;
  {
    dist::Communicator c(world().launch(), {.timeout_seconds = 30, .check_metadata = 0});
    c.all_reduce(s, t).wait(s);  // the NCCL communicator exists: t = ranks
    graph.emplace(Graph::capture(s, [&] { c.all_reduce(s, t).wait(s); }));
    graph->replay(s);  // t = ranks^2
    graph->replay(s);  // t = ranks^3
  }
  const auto n = static_cast<float>(ranks());
  EXPECT_EQ(t.to_vector<float>(), std::vector<float>(4, n * n * n));
  world().barrier();
}

TEST_P(Collectives, BadInputIsALocalError) {
  Stream s = stream();
  Tensor t = Tensor::zeros({4}, DType::f32, s);
  expect_error([&] { world().all_gather(s, t, t); }, "all_gather needs an output of");
  expect_error([&] { world().broadcast(s, t, ranks()); }, "there are");
  if (device().is_cpu()) {
    expect_error([&] { world().all_reduce(s, Tensor::zeros({2}, DType::f16)); },
                 "MPI reductions take f32, i32, i64 or u8 tensors, not f16");
  }
}

INSTANTIATE_DIST_DEVICES(Collectives);

}  // namespace
}  // namespace ember::testing
