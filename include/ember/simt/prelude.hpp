// The prelude a kernel translation unit includes (under EMBER_SIMT) before
// the kernels (ember/kernels/*.cuh, src/ops/*/*.cuh), so that g++ compiles CUDA C++ for the SIMT emulator.
#pragma once

#ifndef EMBER_SIMT
#error "ember/simt/prelude.hpp is for the emulated build (define EMBER_SIMT)"
#endif

#include <cmath>

#include "ember/simt/atomics.hpp"
#include "ember/simt/block.hpp"
#include "ember/simt/context.hpp"
#include "ember/simt/cuda_types.hpp"
#include "ember/simt/dynamic_shared.hpp"
#include "ember/simt/fp16.hpp"
#include "ember/simt/launch.hpp"
#include "ember/simt/math.hpp"
#include "ember/simt/warp.hpp"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __align__(n) alignas(n)
// Each OS thread runs one block at a time, so function-local static
// thread_local storage is exactly per-block storage.
#define __shared__ static thread_local

#define threadIdx (::ember::simt::current_thread().thread_idx)
#define blockIdx (::ember::simt::current_thread().block_idx)
#define blockDim (::ember::simt::current_thread().block_dim)
#define gridDim (::ember::simt::current_thread().grid_dim)
inline constexpr int warpSize = 32;
