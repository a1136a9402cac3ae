// The tensor-core and async-copy wrappers (ember/kernels/intrinsics.cuh) under the SIMT emulator.
//
// Each test runs a kernel in which every lane records its registers, and checks every lane's
// fragment against the layout tables of the PTX ISA, written out again here (lane -> row and
// column of each register element) rather than taken from the emulator:
//   ldmatrix: 9.7.14.5.15 "Warp-level matrix load instruction: ldmatrix"
//   mma:      9.7.14.5.8  "Matrix Fragments for mma.m16n8k16 with floating point type"
//   cp.async: 9.7.9.25.3  "cp.async", "cp.async.commit_group", "cp.async.wait_group"
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ember/core/error.hpp"
#include "ember/core/half.hpp"
#include "ember/simt/prelude.hpp"
#include "ember/simt/runtime.hpp"
#include "kernels/intrinsics_test_kernels.cuh"

namespace ember::tests {
namespace {

// One block of `threads` threads. Launches run at once on the default stream under emulation,
// so a kernel's ember::Error comes back from here.
template <class Kernel, class... Args>
void run_block(Kernel kernel, unsigned threads, Args... args) {
  ember::launch(kernel, dim3(1), dim3(threads), 0, cudaStream_t{}, args...);
}

// Runs blocks on `count` OS threads for its lifetime.
class WorkerThreads {
 public:
  explicit WorkerThreads(unsigned count) : saved_(simt::worker_threads()) {
    simt::set_worker_threads(count);
  }
  ~WorkerThreads() { simt::set_worker_threads(saved_); }
  WorkerThreads(const WorkerThreads&) = delete;
  WorkerThreads& operator=(const WorkerThreads&) = delete;

 private:
  unsigned saved_;
};

uint16_t low_half(uint32_t reg) {
  return static_cast<uint16_t>(reg & 0xffffu);
}
uint16_t high_half(uint32_t reg) {
  return static_cast<uint16_t>(reg >> 16);
}

// ---- ldmatrix ---------------------------------------------------------------------------------

std::vector<uint16_t> distinct_rows() {
  std::vector<uint16_t> rows(kLdmatrixRows * 8);
  // Distinct in every element, with both bytes non-trivial, so any swap of rows, columns,
  // halves or bytes shows.
  for (int r = 0; r < kLdmatrixRows; ++r)
    for (int c = 0; c < 8; ++c)
      rows[r * 8 + c] = static_cast<uint16_t>(0x8000 + 0x100 * r + 0x11 * c);
  return rows;
}

// The ISA's ldmatrix layout: matrix j's row r comes from the address of lane 8*j + r. Lane t's
// register j holds, low half first, (row t/4, cols 2*(t%4), 2*(t%4)+1) of matrix j, or with
// .trans (rows 2*(t%4), 2*(t%4)+1, col t/4).
template <int Num, bool Trans>
void check_ldmatrix() {
  const std::vector<uint16_t> rows = distinct_rows();
  std::vector<uint32_t> out(32 * Num, 0);
  run_block(ldmatrix_kernel<Num, Trans>, 32, rows.data(), out.data(), -1);

  auto element = [&](int matrix, int row, int col) {
    const int source_row = ldmatrix_row_for_lane(8 * matrix + row);  // that lane's address
    return rows[source_row * 8 + col];
  };
  for (int lane = 0; lane < 32; ++lane) {
    for (int j = 0; j < Num; ++j) {
      uint16_t want[2];
      for (int h = 0; h < 2; ++h) {
        want[h] = Trans ? element(j, 2 * (lane % 4) + h, lane / 4)
                        : element(j, lane / 4, 2 * (lane % 4) + h);
      }
      const uint32_t got = out[lane * Num + j];
      EXPECT_EQ(low_half(got), want[0]) << "x" << Num << (Trans ? ".trans" : "") << " lane " << lane
                                        << " reg " << j << " low half";
      EXPECT_EQ(high_half(got), want[1]) << "x" << Num << (Trans ? ".trans" : "") << " lane "
                                         << lane << " reg " << j << " high half";
    }
  }
}

TEST(SimtIntrinsics, LdmatrixX1) {
  check_ldmatrix<1, false>();
}
TEST(SimtIntrinsics, LdmatrixX2) {
  check_ldmatrix<2, false>();
}
TEST(SimtIntrinsics, LdmatrixX4) {
  check_ldmatrix<4, false>();
}
TEST(SimtIntrinsics, LdmatrixX1Trans) {
  check_ldmatrix<1, true>();
}
TEST(SimtIntrinsics, LdmatrixX2Trans) {
  check_ldmatrix<2, true>();
}
TEST(SimtIntrinsics, LdmatrixX4Trans) {
  check_ldmatrix<4, true>();
}

TEST(SimtIntrinsics, LdmatrixRejectsMisalignedRowAddress) {
  const std::vector<uint16_t> rows = distinct_rows();
  std::vector<uint32_t> out(32 * 4, 0);
  // Lane 5's address is used by every form; lane 12's only by x2 and x4.
  EXPECT_THROW(run_block(ldmatrix_kernel<1, false>, 32, rows.data(), out.data(), 5), Error);
  EXPECT_THROW(run_block(ldmatrix_kernel<4, true>, 32, rows.data(), out.data(), 12), Error);
  EXPECT_NO_THROW(run_block(ldmatrix_kernel<1, true>, 32, rows.data(), out.data(), 12));
  try {
    run_block(ldmatrix_kernel<2, false>, 32, rows.data(), out.data(), 9);
    ADD_FAILURE() << "a misaligned ldmatrix row address was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("lane 9"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("16-byte aligned"), std::string::npos) << e.what();
  }
}

// ---- mma.sync m16n8k16 ------------------------------------------------------------------------

struct Matrices {
  float a[16][16];  // M x K, values exactly representable in the input type
  float b[16][8];   // K x N
  float c[16][8];   // M x N
};

uint16_t to_bits(float x, bool bf16) {
  return bf16 ? bfloat16(x).bits : half(x).bits;
}
float round_to_input(float x, bool bf16) {
  return bf16 ? static_cast<float>(bfloat16(x)) : static_cast<float>(half(x));
}

// The ISA's m16n8k16 tables; groupID = lane >> 2, tig = lane % 4, element i of a register pair
// vector: register i / 2, half i % 2.
int a_row(int lane, int i) {
  return (lane >> 2) + ((i == 2 || i == 3 || i == 6 || i == 7) ? 8 : 0);
}
int a_col(int lane, int i) {
  return (lane % 4) * 2 + (i & 1) + (i >= 4 ? 8 : 0);
}
int b_row(int lane, int i) {
  return (lane % 4) * 2 + (i & 1) + (i >= 2 ? 8 : 0);
}
int b_col(int lane, int /*i*/) {
  return lane >> 2;
}
int c_row(int lane, int i) {
  return (lane >> 2) + (i >= 2 ? 8 : 0);
}
int c_col(int lane, int i) {
  return (lane % 4) * 2 + (i & 1);
}

// Returns D computed by the kernel at (row, col), gathered back from the lanes' fragments.
std::vector<float> run_mma_fragments(const Matrices& m, bool bf16) {
  std::vector<uint32_t> a(32 * 4, 0), b(32 * 2, 0);
  std::vector<float> c(32 * 4), d(32 * 4, NAN);
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 8; ++i) {
      const uint32_t bits = to_bits(m.a[a_row(lane, i)][a_col(lane, i)], bf16);
      a[lane * 4 + i / 2] |= bits << (16 * (i % 2));
    }
    for (int i = 0; i < 4; ++i) {
      const uint32_t bits = to_bits(m.b[b_row(lane, i)][b_col(lane, i)], bf16);
      b[lane * 2 + i / 2] |= bits << (16 * (i % 2));
    }
    for (int i = 0; i < 4; ++i) c[lane * 4 + i] = m.c[c_row(lane, i)][c_col(lane, i)];
  }
  if (bf16) {
    run_block(mma_fragment_kernel<true>, 32, a.data(), b.data(), c.data(), d.data());
  } else {
    run_block(mma_fragment_kernel<false>, 32, a.data(), b.data(), c.data(), d.data());
  }
  std::vector<float> result(16 * 8, NAN);
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 4; ++i) result[c_row(lane, i) * 8 + c_col(lane, i)] = d[lane * 4 + i];
  return result;
}

std::vector<float> run_mma_tile(const Matrices& m, bool bf16) {
  std::vector<uint16_t> a(16 * 16), b(16 * 8);
  std::vector<float> c(16 * 8), d(16 * 8, NAN);
  for (int r = 0; r < 16; ++r)
    for (int k = 0; k < 16; ++k) a[r * 16 + k] = to_bits(m.a[r][k], bf16);
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < 8; ++n) b[k * 8 + n] = to_bits(m.b[k][n], bf16);
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 8; ++n) c[r * 8 + n] = m.c[r][n];
  if (bf16) {
    run_block(mma_tile_kernel<true>, 32, a.data(), b.data(), c.data(), d.data());
  } else {
    run_block(mma_tile_kernel<false>, 32, a.data(), b.data(), c.data(), d.data());
  }
  return d;
}

// Plain CPU product in double, plus sum |c| + |a*b| per element for the tolerance.
void cpu_mma(const Matrices& m, double (&d)[16][8], double (&magnitude)[16][8]) {
  for (int r = 0; r < 16; ++r) {
    for (int n = 0; n < 8; ++n) {
      double sum = m.c[r][n], mag = std::fabs(m.c[r][n]);
      for (int k = 0; k < 16; ++k) {
        sum += static_cast<double>(m.a[r][k]) * m.b[k][n];
        mag += std::fabs(static_cast<double>(m.a[r][k]) * m.b[k][n]);
      }
      d[r][n] = sum;
      magnitude[r][n] = mag;
    }
  }
}

Matrices small_integer_matrices(uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> small(-8, 8), wide(-100, 100);
  Matrices m;
  // Distinct-ish entries that differ per row and column, so a transposed or shifted fragment
  // changes the product. All sums stay far below 2^24: exact in float whatever the order.
  for (auto& row : m.a)
    for (float& x : row) x = static_cast<float>(small(rng));
  for (auto& row : m.b)
    for (float& x : row) x = static_cast<float>(small(rng));
  for (auto& row : m.c)
    for (float& x : row) x = static_cast<float>(wide(rng));
  return m;
}

Matrices random_matrices(uint32_t seed, bool bf16) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> unit(-1.f, 1.f);
  Matrices m;
  for (auto& row : m.a)
    for (float& x : row) x = round_to_input(unit(rng) * 4.f, bf16);
  for (auto& row : m.b)
    for (float& x : row) x = round_to_input(unit(rng), bf16);
  for (auto& row : m.c)
    for (float& x : row) x = unit(rng) * 10.f;
  return m;
}

void check_mma_exact(bool bf16, bool through_ldmatrix) {
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    const Matrices m = small_integer_matrices(seed);
    double want[16][8], magnitude[16][8];
    cpu_mma(m, want, magnitude);
    const std::vector<float> got =
        through_ldmatrix ? run_mma_tile(m, bf16) : run_mma_fragments(m, bf16);
    for (int r = 0; r < 16; ++r)
      for (int n = 0; n < 8; ++n)
        ASSERT_EQ(got[r * 8 + n], static_cast<float>(want[r][n]))
            << (bf16 ? "bf16" : "f16") << " seed " << seed << " D[" << r << "][" << n << "]";
  }
}

// Tolerance for non-integer inputs: every product is exact in float, the only error is in
// the accumulation. The emulator rounds once (|error| <= 2^-24 |d|); the hardware's unspecified
// accumulation order and rounding may lose up to a few ulps of the largest partial sum, so
// 2^-21 * sum |terms| (8 ulps of the magnitude bound) covers both without hiding a misplaced
// element, which changes a result by about one product, i.e. ~2^-4 of the magnitude here.
void check_mma_random(bool bf16, bool through_ldmatrix) {
  for (uint32_t seed = 10; seed < 14; ++seed) {
    const Matrices m = random_matrices(seed, bf16);
    double want[16][8], magnitude[16][8];
    cpu_mma(m, want, magnitude);
    const std::vector<float> got =
        through_ldmatrix ? run_mma_tile(m, bf16) : run_mma_fragments(m, bf16);
    for (int r = 0; r < 16; ++r)
      for (int n = 0; n < 8; ++n)
        ASSERT_NEAR(got[r * 8 + n], want[r][n], std::ldexp(magnitude[r][n], -21))
            << (bf16 ? "bf16" : "f16") << " seed " << seed << " D[" << r << "][" << n << "]";
  }
}

TEST(SimtIntrinsics, MmaF16FragmentsExact) {
  check_mma_exact(false, false);
}
TEST(SimtIntrinsics, MmaBf16FragmentsExact) {
  check_mma_exact(true, false);
}
TEST(SimtIntrinsics, MmaF16FragmentsRandom) {
  check_mma_random(false, false);
}
TEST(SimtIntrinsics, MmaBf16FragmentsRandom) {
  check_mma_random(true, false);
}
TEST(SimtIntrinsics, MmaF16TileThroughCpAsyncAndLdmatrix) {
  check_mma_exact(false, true);
  check_mma_random(false, true);
}
TEST(SimtIntrinsics, MmaBf16TileThroughCpAsyncAndLdmatrix) {
  check_mma_exact(true, true);
  check_mma_random(true, true);
}

// A single non-zero element of A, B and C lands exactly where the ISA tables say: catches a
// layout error even where the random tests' tolerance might be argued.
TEST(SimtIntrinsics, MmaSingleElementPlacement) {
  for (int probe = 0; probe < 16; ++probe) {
    Matrices m{};
    const int row = probe, k = (probe * 7 + 3) % 16, col = probe % 8;
    m.a[row][k] = 2.f;
    m.b[k][col] = 3.f;
    m.c[(row + 5) % 16][(col + 3) % 8] = 1.f;
    const std::vector<float> got = run_mma_fragments(m, probe % 2 == 1);
    for (int r = 0; r < 16; ++r) {
      for (int n = 0; n < 8; ++n) {
        float want = 0.f;
        if (r == row && n == col) want += 6.f;
        if (r == (row + 5) % 16 && n == (col + 3) % 8) want += 1.f;
        ASSERT_EQ(got[r * 8 + n], want) << "probe " << probe << " D[" << r << "][" << n << "]";
      }
    }
  }
}

// ---- cp.async ---------------------------------------------------------------------------------

std::vector<unsigned char> pattern(size_t n, unsigned salt) {
  std::vector<unsigned char> bytes(n);
  for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<unsigned char>((i * 131 + salt) % 251);
  return bytes;
}

template <int Bytes>
void check_cp_async_copy() {
  constexpr unsigned n = 64;
  alignas(16) static unsigned char src[n * Bytes];
  const auto bytes = pattern(n * Bytes, Bytes);
  std::memcpy(src, bytes.data(), sizeof(src));
  std::vector<unsigned char> out(n * Bytes, 0);
  run_block(cp_async_copy_kernel<Bytes>, n, static_cast<const unsigned char*>(src), out.data());
  for (unsigned t = 0; t < n; ++t) {
    const unsigned to = (t * 7 + 1) % n;
    for (int i = 0; i < Bytes; ++i)
      ASSERT_EQ(out[to * Bytes + i], src[t * Bytes + i]) << "thread " << t << " byte " << i;
  }
}

TEST(SimtIntrinsics, CpAsync4) {
  check_cp_async_copy<4>();
}
TEST(SimtIntrinsics, CpAsync8) {
  check_cp_async_copy<8>();
}
TEST(SimtIntrinsics, CpAsync16) {
  check_cp_async_copy<16>();
}

// Reading shared memory before the wait gives the old contents; each wait_group completes
// exactly the groups the ISA says; a copy never committed is only completed by wait_all.
template <int Bytes>
void check_cp_async_pipeline() {
  constexpr unsigned n = 64;
  alignas(16) static unsigned char src[3 * n * Bytes];
  const auto bytes = pattern(sizeof(src), 7 * Bytes);
  std::memcpy(src, bytes.data(), sizeof(src));
  std::vector<unsigned char> out(4 * n * 3 * Bytes, 0);
  run_block(cp_async_pipeline_kernel<Bytes>, n, static_cast<const unsigned char*>(src), out.data());
  // landed[step][slot]: whether the copy into that slot has completed after that step.
  constexpr bool landed[4][3] = {
      {false, false, false},  // just issued: nothing is complete
      {true, false, false},   // wait_group 1: group 0 complete, group 1 may still be pending
      {true, true, false},    // wait_group 0: both groups; the uncommitted copy is in none
      {true, true, true},     // wait_all commits it and waits for everything
  };
  for (int step = 0; step < 4; ++step) {
    for (unsigned t = 0; t < n; ++t) {
      for (int s = 0; s < 3; ++s) {
        for (int i = 0; i < Bytes; ++i) {
          const unsigned char want = landed[step][s] ? src[(s * n + t) * Bytes + i] : kOldByte;
          ASSERT_EQ(out[((step * n + t) * 3 + s) * Bytes + i], want)
              << "step " << step << " thread " << t << " slot " << s << " byte " << i;
        }
      }
    }
  }
}

TEST(SimtIntrinsics, CpAsync4PipelineReadsOldDataBeforeWait) {
  check_cp_async_pipeline<4>();
}
TEST(SimtIntrinsics, CpAsync8PipelineReadsOldDataBeforeWait) {
  check_cp_async_pipeline<8>();
}
TEST(SimtIntrinsics, CpAsync16PipelineReadsOldDataBeforeWait) {
  check_cp_async_pipeline<16>();
}

// Blocks run in parallel on several OS threads, fibers interleave at barriers: each emulated
// thread's waits complete its own copies and nobody else's.
TEST(SimtIntrinsics, CpAsyncPipelinesArePerThread) {
  constexpr unsigned n = 64, blocks = 6, bytes = 8;
  alignas(16) static unsigned char src[blocks * n * bytes];
  const auto values = pattern(sizeof(src), 5);
  std::memcpy(src, values.data(), sizeof(src));
  std::vector<unsigned char> out(2 * blocks * n * bytes, 0);
  {
    const WorkerThreads parallel(3);
    ember::launch(cp_async_per_thread_kernel<bytes>, dim3(blocks), dim3(n), 0, cudaStream_t{},
                  static_cast<const unsigned char*>(src), out.data());
  }
  for (unsigned step = 0; step < 2; ++step) {
    for (unsigned b = 0; b < blocks; ++b) {
      for (unsigned t = 0; t < n; ++t) {
        const bool landed = step == 1 || t % 2 == 0;
        for (unsigned i = 0; i < bytes; ++i) {
          const size_t at = (b * n + t) * bytes + i;
          ASSERT_EQ(out[step * blocks * n * bytes + at], landed ? src[at] : kOldByte)
              << "step " << step << " block " << b << " thread " << t << " byte " << i;
        }
      }
    }
  }
}

// A thread that exits with copies in flight fails; they must not land in a later launch either.
TEST(SimtIntrinsics, CpAsyncCopiesPendingAtExitDoNotLeakIntoTheNextLaunch) {
  if (!simt::kAsyncCopiesResetPerBlock)
    GTEST_SKIP() << "needs the emulator core to hold an AsyncCopyPipeline `async_copies` in "
                    "ThreadContext and reset it for every block";
  alignas(16) static unsigned char src[32 * 16];
  const auto values = pattern(sizeof(src), 9);
  std::memcpy(src, values.data(), sizeof(src));
  std::vector<unsigned char> out(32 * 16, 0);
  const WorkerThreads serial(1);  // both launches on the same OS thread and fiber slots
  // Exiting with copies never waited for is an error, naming the thread.
  try {
    run_block(cp_async_abandon_kernel, 32, static_cast<const unsigned char*>(src), out.data(),
              true);
    ADD_FAILURE() << "expected an ember::Error";
  } catch (const ember::Error& e) {
    EXPECT_NE(e.message().find("block (0,0,0) thread (0,0,0) exited with 1 cp.async copy never "
                               "waited for"),
              std::string::npos)
        << e.message();
  }
  run_block(cp_async_abandon_kernel, 32, static_cast<const unsigned char*>(src), out.data(), false);
  for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], kOldByte) << "byte " << i;
}

TEST(SimtIntrinsics, CpAsyncEmptyCommitIsAGroup) {
  constexpr unsigned n = 32;
  alignas(16) static unsigned char src[n * 16];
  const auto bytes = pattern(sizeof(src), 3);
  std::memcpy(src, bytes.data(), sizeof(src));
  std::vector<unsigned char> out(n * 16, 0);
  run_block(cp_async_empty_group_kernel<16>, n, static_cast<const unsigned char*>(src), out.data());
  for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], src[i]) << "byte " << i;
}

template <int Bytes>
void check_cp_async_zfill() {
  constexpr unsigned n = 32;
  alignas(16) static unsigned char src[n * Bytes];
  const auto bytes = pattern(sizeof(src), 11);
  std::memcpy(src, bytes.data(), sizeof(src));
  std::vector<unsigned char> out(n * Bytes, kOldByte);
  run_block(cp_async_zfill_kernel<Bytes>, n, static_cast<const unsigned char*>(src), out.data());
  for (unsigned t = 0; t < n; ++t) {
    const unsigned copied = t % (Bytes + 1);
    for (unsigned i = 0; i < Bytes; ++i) {
      const unsigned char want = i < copied ? src[t * Bytes + i] : 0;
      ASSERT_EQ(out[t * Bytes + i], want) << "thread " << t << " byte " << i;
    }
  }
}

TEST(SimtIntrinsics, CpAsyncZeroFill) {
  check_cp_async_zfill<4>();
  check_cp_async_zfill<8>();
  check_cp_async_zfill<16>();
}

template <int Bytes>
void expect_misaligned_throws(int dst_offset, int src_offset, const char* which) {
  alignas(16) static unsigned char src[64 * 2 * Bytes + 16];
  try {
    run_block(cp_async_misaligned_kernel<Bytes>, 32, static_cast<const unsigned char*>(src),
              dst_offset, src_offset);
    ADD_FAILURE() << "cp.async." << Bytes << " with " << which << " offset by "
                  << (dst_offset + src_offset) << " was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(which), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(std::to_string(Bytes) + "-byte aligned"),
              std::string::npos)
        << e.what();
  }
}

TEST(SimtIntrinsics, CpAsyncRejectsMisalignedAddresses) {
  expect_misaligned_throws<4>(2, 0, "destination");
  expect_misaligned_throws<4>(0, 1, "source");
  expect_misaligned_throws<8>(4, 0, "destination");
  expect_misaligned_throws<8>(0, 4, "source");
  expect_misaligned_throws<16>(8, 0, "destination");
  expect_misaligned_throws<16>(0, 8, "source");
  // Aligned to the copy size but not to 16 is fine for the smaller copies.
  alignas(16) static unsigned char src[64 * 2 * 8 + 16];
  EXPECT_NO_THROW(
      run_block(cp_async_misaligned_kernel<8>, 32, static_cast<const unsigned char*>(src), 8, 8));
}

}  // namespace
}  // namespace ember::tests
