// Tensor-core and async-copy intrinsics: the only place in ember with raw inline PTX.
//
// Kernels call these wrappers instead of writing asm themselves, so that the same kernel source
// runs on a GPU (nvcc: inline PTX below, sm_80 or newer) and under the SIMT emulator
// (EMBER_SIMT: ember/simt/intrinsics_emulation.hpp, which reproduces the PTX ISA's fragment
// layouts and the cp.async group semantics exactly).
//
//   ldmatrix_x1/x2/x4<Trans>(regs, row_ptr)  ldmatrix.sync.aligned.m8n8.xN{.trans}.shared.b16
//       row_ptr: this lane's 16-byte-aligned shared-memory row (lanes 0-7 / 0-15 / 0-31 used).
//   mma_m16n8k16_f16_f32 / _bf16_f32(d, a, b, c)  mma.sync.aligned.m16n8k16.row.col.f32.T.T.f32
//   cp_async<Bytes>(smem_dst, gmem_src)       cp.async.ca (4, 8 bytes) / .cg (16 bytes)
//   cp_async_zfill<Bytes>(dst, src, n)        copies n <= Bytes bytes and zero-fills the rest
//   cp_async_commit(), cp_async_wait<N>(), cp_async_wait_all()
//   opaque_register(word)                     an empty asm that nvcc must assume changed word
#pragma once

#include <cstdint>

#if defined(__CUDACC__) && !defined(EMBER_SIMT)

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error \
    "ember/kernels/intrinsics.cuh: ldmatrix, mma.sync.m16n8k16 and cp.async need sm_80 or newer; build with -arch=sm_80 (or newer)"
#endif

namespace ember {

namespace detail {
__device__ __forceinline__ uint32_t shared_address(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}
}  // namespace detail

// "memory" clobbers: ldmatrix reads and cp.async writes shared memory behind the compiler's
// back, so ordinary loads and stores must not be moved across them.
template <bool Trans = false>
__device__ __forceinline__ void ldmatrix_x1(uint32_t (&regs)[1], const void* smem_row) {
  if constexpr (Trans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n"
                 : "=r"(regs[0])
                 : "r"(detail::shared_address(smem_row))
                 : "memory");
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n"
                 : "=r"(regs[0])
                 : "r"(detail::shared_address(smem_row))
                 : "memory");
  }
}

template <bool Trans = false>
__device__ __forceinline__ void ldmatrix_x2(uint32_t (&regs)[2], const void* smem_row) {
  if constexpr (Trans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(regs[0]), "=r"(regs[1])
                 : "r"(detail::shared_address(smem_row))
                 : "memory");
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(regs[0]), "=r"(regs[1])
                 : "r"(detail::shared_address(smem_row))
                 : "memory");
  }
}

template <bool Trans = false>
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&regs)[4], const void* smem_row) {
  if constexpr (Trans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(regs[0]), "=r"(regs[1]), "=r"(regs[2]), "=r"(regs[3])
                 : "r"(detail::shared_address(smem_row))
                 : "memory");
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(regs[0]), "=r"(regs[1]), "=r"(regs[2]), "=r"(regs[3])
                 : "r"(detail::shared_address(smem_row))
                 : "memory");
  }
}

__device__ __forceinline__ void mma_m16n8k16_f16_f32(float (&d)[4], const uint32_t (&a)[4],
                                                     const uint32_t (&b)[2], const float (&c)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
        "f"(c[2]), "f"(c[3]));
}

__device__ __forceinline__ void mma_m16n8k16_bf16_f32(float (&d)[4], const uint32_t (&a)[4],
                                                      const uint32_t (&b)[2], const float (&c)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
        "f"(c[2]), "f"(c[3]));
}

// 16-byte copies bypass L1 (.cg): tiles staged through shared memory are not re-read from L1.
// PTX only allows .cg with 16 bytes, so 4- and 8-byte copies use .ca.
template <int Bytes>
__device__ __forceinline__ void cp_async_zfill(void* smem_dst, const void* gmem_src,
                                               uint32_t src_bytes) {
  static_assert(Bytes == 4 || Bytes == 8 || Bytes == 16, "cp.async copies 4, 8 or 16 bytes");
  const uint32_t dst = detail::shared_address(smem_dst);
  const auto src = __cvta_generic_to_global(gmem_src);
  if constexpr (Bytes == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes)
                 : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(dst), "l"(src), "n"(Bytes),
                 "r"(src_bytes)
                 : "memory");
  }
}

template <int Bytes>
__device__ __forceinline__ void cp_async(void* smem_dst, const void* gmem_src) {
  static_assert(Bytes == 4 || Bytes == 8 || Bytes == 16, "cp.async copies 4, 8 or 16 bytes");
  const uint32_t dst = detail::shared_address(smem_dst);
  const auto src = __cvta_generic_to_global(gmem_src);
  if constexpr (Bytes == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(dst), "l"(src), "n"(Bytes)
                 : "memory");
  }
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  static_assert(N >= 0, "cp.async.wait_group takes a non-negative count");
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}

// word itself, but nvcc must assume it changed: what it computed from word before cannot be
// reused after (vector_access.cuh's reload).
__device__ __forceinline__ void opaque_register(uint32_t& word) {
  asm volatile("" : "+r"(word));
}

}  // namespace ember

#elif defined(EMBER_SIMT)

#include "ember/simt/intrinsics_emulation.hpp"

namespace ember {

template <bool Trans = false>
inline void ldmatrix_x1(uint32_t (&regs)[1], const void* smem_row) {
  simt::ldmatrix_m8n8_b16<1, Trans>(regs, smem_row);
}
template <bool Trans = false>
inline void ldmatrix_x2(uint32_t (&regs)[2], const void* smem_row) {
  simt::ldmatrix_m8n8_b16<2, Trans>(regs, smem_row);
}
template <bool Trans = false>
inline void ldmatrix_x4(uint32_t (&regs)[4], const void* smem_row) {
  simt::ldmatrix_m8n8_b16<4, Trans>(regs, smem_row);
}

inline void mma_m16n8k16_f16_f32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                 const float (&c)[4]) {
  simt::mma_m16n8k16_f32<simt::MmaInputType::f16>(d, a, b, c);
}
inline void mma_m16n8k16_bf16_f32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                  const float (&c)[4]) {
  simt::mma_m16n8k16_f32<simt::MmaInputType::bf16>(d, a, b, c);
}

template <int Bytes>
inline void cp_async_zfill(void* smem_dst, const void* gmem_src, uint32_t src_bytes) {
  simt::cp_async<Bytes>(smem_dst, gmem_src, src_bytes);
}
template <int Bytes>
inline void cp_async(void* smem_dst, const void* gmem_src) {
  simt::cp_async<Bytes>(smem_dst, gmem_src);
}
inline void cp_async_commit() {
  simt::cp_async_commit_group();
}
template <int N>
inline void cp_async_wait() {
  static_assert(N >= 0, "cp.async.wait_group takes a non-negative count");
  simt::cp_async_wait_group(N);
}
inline void cp_async_wait_all() {
  simt::cp_async_wait_all();
}

// The emulator keeps no registers to reuse: nothing to hide.
inline void opaque_register(uint32_t&) {}

}  // namespace ember

#endif

#if defined(__CUDACC__) || defined(EMBER_SIMT)
namespace ember {

// acc += a b on tensor cores: bf16 operands when Bf16, else f16.
template <bool Bf16>
__device__ __forceinline__ void mma_m16n8k16_accumulate(float (&acc)[4], const uint32_t (&a)[4],
                                                        const uint32_t (&b)[2]) {
  if constexpr (Bf16) {
    mma_m16n8k16_bf16_f32(acc, a, b, acc);
  } else {
    mma_m16n8k16_f16_f32(acc, a, b, acc);
  }
}

}  // namespace ember
#else
#error \
    "ember/kernels/intrinsics.cuh is device code: compile it with nvcc, or with EMBER_SIMT defined"
#endif
