// Emulation of the tensor-core and async-copy instructions behind ember/kernels/intrinsics.cuh:
// ldmatrix, mma.sync m16n8k16 (f16/bf16 -> f32) and cp.async with commit/wait groups.
//
// Every warp-level instruction is a rendezvous of the whole warp (warp_exchange, full mask),
// after which each lane assembles its own registers with the exact fragment layouts of the
// PTX ISA, so a kernel that indexes a fragment wrongly gets the wrong numbers here exactly as
// it would on a GPU. References (PTX ISA 8.x / 9.0, "Parallel Synchronization and
// Communication Instructions" / "Warp Level Matrix Multiply-Accumulate Instructions"):
//   - 9.7.14.5.15 "Warp-level matrix load instruction: ldmatrix"
//   - 9.7.14.5.8  "Matrix Fragments for mma.m16n8k16 with floating point type"
//   - 9.7.9.25.3  "cp.async", "cp.async.commit_group", "cp.async.wait_group / wait_all"
//
// cp.async is modeled as a real pipeline: a copy is only queued when issued and is performed
// when a wait makes it complete, so a kernel that reads shared memory before the matching
// cp.async.wait_group sees the OLD contents, and a missing wait is caught by the tests instead
// of passing by luck.
#pragma once

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <unordered_map>

#include "ember/core/error.hpp"
#include "ember/core/half.hpp"
#include "ember/simt/async_copy.hpp"
#include "ember/simt/context.hpp"
#include "ember/simt/runtime.hpp"
#include "ember/simt/warp.hpp"

namespace ember::simt {

namespace detail {

inline constexpr unsigned kFullWarpMask = 0xffffffffu;

inline bool is_aligned(const void* p, size_t alignment) {
  return reinterpret_cast<uintptr_t>(p) % alignment == 0;
}

inline uint16_t load_b16(const unsigned char* p) {
  uint16_t value;
  std::memcpy(&value, p, sizeof(value));
  return value;
}

// Packs two 16-bit elements the way PTX packs .b16x2 / .f16x2: the lower-indexed element in
// the low half of the register.
constexpr uint32_t pack_b16x2(uint16_t low, uint16_t high) {
  return static_cast<uint32_t>(low) | (static_cast<uint32_t>(high) << 16);
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{.trans}.shared.b16
//
// Matrix m (0 <= m < Num) is 8 rows of 8 b16 elements; the address of its row r is supplied by
// lane 8*m + r, so x1 uses lanes 0-7, x2 lanes 0-15, x4 all 32 lanes; for x1 and x2 the
// addresses of the higher lanes are ignored (ISA: "For .x1 ... threads 0-7 ... For .x2
// threads 0-15"). Each row address must be 16-byte aligned (a row is 16 contiguous bytes).
// Register m of lane t receives, low half first:
//   plain:  row t/4 of matrix m, columns 2*(t%4) and 2*(t%4)+1;
//   .trans: column t/4 of matrix m, rows 2*(t%4) and 2*(t%4)+1.
template <int Num, bool Trans>
void ldmatrix_m8n8_b16(uint32_t (&regs)[Num], const void* row_address) {
  static_assert(Num == 1 || Num == 2 || Num == 4, "ldmatrix loads 1, 2 or 4 matrices");
  constexpr unsigned kUsedLanes = 8u * Num;
  const unsigned lane = lane_id();
  const char* what = Trans ? "ldmatrix.trans" : "ldmatrix";
  const std::array<const void*, 32> rows = warp_exchange<const void*>(
      lane < kUsedLanes ? row_address : nullptr, detail::kFullWarpMask, what);

  // Every lane checks every address after the exchange, so all lanes throw the same error
  // instead of one lane leaving the others waiting at the rendezvous.
  for (unsigned l = 0; l < kUsedLanes; ++l) {
    EMBER_CHECK(rows[l] != nullptr, "{}.x{}: lane {} supplied a null row address", what, Num, l);
    EMBER_CHECK(detail::is_aligned(rows[l], 16),
                "{}.x{}: lane {} supplied row address {} which is not 16-byte aligned", what, Num,
                l, rows[l]);
  }

  const unsigned group = lane / 4;       // row (plain) or column (.trans) this lane gets
  const unsigned pair = 2 * (lane % 4);  // first of the two columns (plain) or rows (.trans)
  for (int m = 0; m < Num; ++m) {
    const auto* const* matrix_rows = reinterpret_cast<const unsigned char* const*>(&rows[8 * m]);
    uint16_t low, high;
    if constexpr (Trans) {
      low = detail::load_b16(matrix_rows[pair] + 2 * group);
      high = detail::load_b16(matrix_rows[pair + 1] + 2 * group);
    } else {
      low = detail::load_b16(matrix_rows[group] + 2 * pair);
      high = detail::load_b16(matrix_rows[group] + 2 * (pair + 1));
    }
    regs[m] = detail::pack_b16x2(low, high);
  }
}

// ---------------------------------------------------------------------------------------------
// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32  d, a, b, c
//
// Fragment layout (ISA 9.7.14.5.8), groupID = lane >> 2, tig = lane % 4; register j of A and B
// holds elements 2j (low half) and 2j+1 (high half):
//   A 16x16, a0..a7: row = groupID + 8 * ((i >> 1) & 1),  col = 2*tig + (i & 1) + 8 * (i >= 4)
//   B 16x8,  b0..b3: row = 2*tig + (i & 1) + 8 * (i >= 2), col = groupID
//   C/D 16x8, c0..c3: row = groupID + 8 * (i >= 2),       col = 2*tig + (i & 1)
//
// Arithmetic: every product of two f16 (11-bit significands) or two bf16 (8-bit) values is
// exact in float; the emulator sums c + a[r][0]*b[0][n] + ... + a[r][15]*b[15][n] in that
// order in double and rounds once to float. The hardware's internal accumulation order and
// rounding are unspecified, so GPU results may differ in the last bits; this choice makes the
// emulator deterministic and at least as accurate as the hardware (tests that compare against
// it use a tolerance of a few ulps of sum |terms| when inputs are not exactly representable
// sums, and exact equality when they are).
enum class MmaInputType { f16, bf16 };

namespace detail {

struct MmaM16N8K16Fragments {
  uint32_t a[4];
  uint32_t b[2];
  float c[4];
};

template <MmaInputType Type>
constexpr float mma_input_to_float(uint16_t bits) {
  if constexpr (Type == MmaInputType::f16) {
    return ::ember::detail::half_bits_to_float(bits);
  } else {
    return ::ember::detail::bfloat16_bits_to_float(bits);
  }
}

inline uint16_t fragment_element(const uint32_t* regs, unsigned i) {
  return static_cast<uint16_t>(regs[i / 2] >> (16 * (i % 2)));
}

}  // namespace detail

template <MmaInputType Type>
void mma_m16n8k16_f32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                      const float (&c)[4]) {
  detail::MmaM16N8K16Fragments mine;
  for (int j = 0; j < 4; ++j) mine.a[j] = a[j];
  for (int j = 0; j < 2; ++j) mine.b[j] = b[j];
  for (int j = 0; j < 4; ++j) mine.c[j] = c[j];
  const char* what = Type == MmaInputType::f16 ? "mma.sync.m16n8k16.f32.f16.f16.f32"
                                               : "mma.sync.m16n8k16.f32.bf16.bf16.f32";
  const std::array<detail::MmaM16N8K16Fragments, 32> all =
      warp_exchange(mine, detail::kFullWarpMask, what);

  // Scatter every lane's fragments into the full matrices (the inverse of the ISA tables).
  float A[16][16], B[16][8], C[16][8];
  for (unsigned lane = 0; lane < 32; ++lane) {
    const unsigned group = lane >> 2, tig = lane % 4;
    for (unsigned i = 0; i < 8; ++i) {
      const unsigned row = group + 8 * ((i >> 1) & 1);
      const unsigned col = 2 * tig + (i & 1) + 8 * (i >= 4);
      A[row][col] = detail::mma_input_to_float<Type>(detail::fragment_element(all[lane].a, i));
    }
    for (unsigned i = 0; i < 4; ++i) {
      const unsigned row = 2 * tig + (i & 1) + 8 * (i >= 2);
      B[row][group] = detail::mma_input_to_float<Type>(detail::fragment_element(all[lane].b, i));
    }
    for (unsigned i = 0; i < 4; ++i) {
      C[group + 8 * (i >= 2)][2 * tig + (i & 1)] = all[lane].c[i];
    }
  }

  const unsigned lane = lane_id();
  const unsigned group = lane >> 2, tig = lane % 4;
  for (unsigned i = 0; i < 4; ++i) {
    const unsigned row = group + 8 * (i >= 2), col = 2 * tig + (i & 1);
    double sum = C[row][col];
    for (unsigned k = 0; k < 16; ++k) sum += static_cast<double>(A[row][k] * B[k][col]);
    d[i] = static_cast<float>(sum);
  }
}

// ---------------------------------------------------------------------------------------------
// cp.async.{ca,cg}.shared.global [dst], [src], cp-size{, src-size}; commit_group; wait_group N
//
// Per emulated thread: copies issued since the last commit form the open group; commit closes
// it (an empty commit makes an empty group, as in PTX); wait_group(N) completes the oldest
// committed groups until at most N remain pending; wait_all is commit + wait_group(0). Copies
// in the open group are not part of any group, so wait_group does not complete them (PTX:
// wait_group only waits for committed groups). A copy reads its source and writes its
// destination when it completes: the hardware may do either at any time in between, and a
// kernel whose result depends on which is racy in any case.

namespace detail {

// Whether the emulator core's per-thread context holds the thread's pipeline (a member
// `AsyncCopyPipeline async_copies` that run_block resets for every block).
template <class Context>
concept HasAsyncCopies = requires(Context& t) {
  { t.async_copies } -> std::convertible_to<AsyncCopyPipeline&>;
};

// INTERIM, used until ThreadContext has that member: a per-OS-thread map (a block's fibers all
// run on one OS thread) keyed by the reused context, emptied whenever the context is seen
// running another block or launch shape. Copies a thread left pending when it exited can then
// only leak into a later launch of the same shape, block index and fiber slot.
template <class Context>
AsyncCopyPipeline& interim_async_copy_pipeline(Context& t) {
  struct Owned {
    const void* block = nullptr;
    uint3 block_idx;
    dim3 block_dim, grid_dim;
    AsyncCopyPipeline pipeline;
  };
  thread_local std::unordered_map<const Context*, Owned> pipelines;
  Owned& owned = pipelines[&t];
  const auto same3 = [](const auto& a, const auto& b) {
    return a.x == b.x && a.y == b.y && a.z == b.z;
  };
  if (owned.block != t.block || !same3(owned.block_idx, t.block_idx) ||
      !same3(owned.block_dim, t.block_dim) || !same3(owned.grid_dim, t.grid_dim)) {
    owned.block = t.block;
    owned.block_idx = t.block_idx;
    owned.block_dim = t.block_dim;
    owned.grid_dim = t.grid_dim;
    owned.pipeline.reset();
  }
  return owned.pipeline;
}

}  // namespace detail

// The calling emulated thread's pipeline: cp.async state is per CUDA thread (per fiber), not
// per OS thread.
// (A template only so that the branch not taken is not compiled.)
template <class Context = ThreadContext>
AsyncCopyPipeline& current_async_copy_pipeline() {
  Context& t = current_thread();
  if constexpr (detail::HasAsyncCopies<Context>) {
    return t.async_copies;
  } else {
    return detail::interim_async_copy_pipeline(t);
  }
}

// Whether a thread's pending copies are reliably dropped when it exits (see above).
inline constexpr bool kAsyncCopiesResetPerBlock = detail::HasAsyncCopies<ThreadContext>;

template <unsigned Bytes>
void cp_async(void* smem_dst, const void* gmem_src, unsigned src_bytes = Bytes) {
  static_assert(Bytes == 4 || Bytes == 8 || Bytes == 16, "cp.async copies 4, 8 or 16 bytes");
  EMBER_CHECK(src_bytes <= Bytes, "cp.async: src-size must be at most cp-size {}, found {}", Bytes,
              src_bytes);
  EMBER_CHECK(smem_dst != nullptr && gmem_src != nullptr,
              "cp.async.{}: null address (dst {}, src {})", Bytes, smem_dst, gmem_src);
  EMBER_CHECK(detail::is_aligned(smem_dst, Bytes),
              "cp.async of {} bytes: the shared-memory destination {} must be {}-byte aligned",
              Bytes, smem_dst, Bytes);
  EMBER_CHECK(detail::is_aligned(gmem_src, Bytes),
              "cp.async of {} bytes: the global source {} must be {}-byte aligned", Bytes, gmem_src,
              Bytes);
  AsyncCopy copy{smem_dst, gmem_src, Bytes, src_bytes};
  if (cp_async_lands_at_issue()) {
    AsyncCopyPipeline::perform(copy);  // the earliest a GPU may complete it
    copy.landed = true;                // still owed a wait, as on a GPU
  }
  current_async_copy_pipeline().issue(copy);
}

inline void cp_async_commit_group() {
  current_async_copy_pipeline().commit();
}
inline void cp_async_wait_group(unsigned n) {
  current_async_copy_pipeline().wait_group(n);
}
inline void cp_async_wait_all() {
  current_async_copy_pipeline().wait_all();
}

}  // namespace ember::simt
