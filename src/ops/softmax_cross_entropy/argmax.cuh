// Row argmax of x [rows, cols] (T: f32, __half or __nv_bfloat16), behind ops::argmax and
// ops::count_correct. The first index wins on ties (-0 == +0), and a nan counts as larger than
// everything, the first nan winning: PickBest with the column as key is exactly that order, so
// any reduction tree finds the CPU's index. Rows go to teams as in softmax_cross_entropy.cuh.
#pragma once

#include <cstdint>

#include "ember/kernels/reduce_common.cuh"
#include "ops/softmax_cross_entropy/softmax_cross_entropy.cuh"

namespace ember::kernels {

// Per row: out[row] = the argmax (when out is not null; i64 or i32), and *correct += 1 when it
// equals the row's label (when correct is not null). The count is an integer atomic: exact, so
// the total does not depend on the order the rows finish in.
template <int kTeam, class T>
__global__ void __launch_bounds__(softmax_detail::kThreads)
    argmax_kernel(const T* x, int64_t rows, int64_t cols, void* out, bool out_i64,
                  const void* labels, bool labels_i64, unsigned long long* correct) {
  const PickBest pick;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; row < rows;
       row += static_cast<int64_t>(gridDim.x) * blockDim.y) {  // uniform across a team
    const T* xr = x + row * cols;
    Candidate best = no_candidate();
    for (int64_t j = threadIdx.x; j < cols; j += kTeam) {
      best = pick(best, Candidate{to_f32(xr[j]), j});
    }
    best = team_reduce<kTeam>(best, pick, no_candidate());
    if (threadIdx.x != 0) continue;
    if (out != nullptr) {
      if (out_i64) {
        static_cast<int64_t*>(out)[row] = best.key;
      } else {
        static_cast<int32_t*>(out)[row] = static_cast<int32_t>(best.key);
      }
    }
    if (correct != nullptr && best.key == load_index(labels, labels_i64, row)) {
      atomicAdd(correct, 1ull);
    }
  }
}

}  // namespace ember::kernels
