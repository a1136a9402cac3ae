// Portability macros for code shared by host C++ and CUDA device code.
#pragma once

#if defined(__CUDACC__)
#define EMBER_HOST_DEVICE __host__ __device__
#define EMBER_INLINE __forceinline__
#else
#define EMBER_HOST_DEVICE
#define EMBER_INLINE inline
#endif

// Loop unrolling in kernels. `#pragma unroll` is nvcc's and g++ (the SIMT emulator) warns about
// it, so kernels spell it through these. Under nvcc EMBER_PRAGMA_UNROLL unrolls fully and
// EMBER_PRAGMA_NO_UNROLL keeps the loop rolled; on the host compiler both are nothing.
// EMBER_PRAGMA_UNROLL_HOST(n) unrolls fully under nvcc and is GCC's `unroll n` on the host, for
// the loops the emulator also wants unrolled.
#define EMBER_PRAGMA_TEXT_(text) _Pragma(#text)
#if defined(__CUDACC__) && !defined(EMBER_SIMT)
#define EMBER_PRAGMA_UNROLL _Pragma("unroll")
#define EMBER_PRAGMA_NO_UNROLL _Pragma("unroll 1")
#define EMBER_PRAGMA_UNROLL_HOST(n) _Pragma("unroll")
#else
#define EMBER_PRAGMA_UNROLL
#define EMBER_PRAGMA_NO_UNROLL
#define EMBER_PRAGMA_UNROLL_HOST(n) EMBER_PRAGMA_TEXT_(GCC unroll n)
#endif
