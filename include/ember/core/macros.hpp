// Portability macros for code shared by host C++ and CUDA device code.
#pragma once

#if defined(__CUDACC__)
#define EMBER_HOST_DEVICE __host__ __device__
#define EMBER_INLINE __forceinline__
#else
#define EMBER_HOST_DEVICE
#define EMBER_INLINE inline
#endif
