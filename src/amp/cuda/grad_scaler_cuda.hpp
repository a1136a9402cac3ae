// The CUDA side of GradScaler (../grad_scaler.cpp; kernels in grad_scaler.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "amp/scaler_state.hpp"

namespace ember::amp::cuda {

// Every gradient g (f32) becomes g * float(1 / double(*scale)); where g had an inf or nan,
// flags[i] (gradient i) = 1, *found_inf = 1 and state->found_any = 1. Enqueued on `stream` of
// the current device; flags and found_inf are cleared first.
void unscale(const std::vector<std::pair<float*, int64_t>>& grads, const float* scale,
             int32_t* flags, float* found_inf, detail::ScalerState* state, cudaStream_t stream);

// state->found_any = 1 when *found_inf is nonzero (a flag reduced across ranks).
void merge_found(const float* found_inf, detail::ScalerState* state, cudaStream_t stream);

// update_scale (scaler_state.hpp) in one thread.
void update(const detail::ScaleRule& rule, float* scale, detail::ScalerState* state,
            detail::ScaleRecord* record, cudaStream_t stream);

}  // namespace ember::amp::cuda
