// Histogram with atomics, plus every other atomic on the side.
#pragma once

struct AtomicStats {
  int count_int;
  float sum_float;
  double sum_double;
  int max_int;
  int min_int;
  unsigned max_unsigned;
  float max_float;
  float min_float;
  int cas_winner;
  int exch_seen;
  unsigned sub_unsigned;
  __half2 half_sum;
};

__global__ void histogram_kernel(const int* values, int n, unsigned* bins, float* weights,
                                 AtomicStats* stats) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int v = values[i];
  atomicAdd(&bins[v], 1u);
  atomicAdd(&weights[v], 0.5f);
  atomicAdd(&stats->count_int, 1);
  atomicAdd(&stats->sum_float, 1.0f);
  atomicAdd(&stats->sum_double, 0.25);
  atomicMax(&stats->max_int, v);
  atomicMin(&stats->min_int, v);
  atomicMax(&stats->max_unsigned, static_cast<unsigned>(i));
  atomicMax(&stats->max_float, static_cast<float>(v));
  atomicMin(&stats->min_float, static_cast<float>(v));
  atomicCAS(&stats->cas_winner, -1, i);
  atomicExch(&stats->exch_seen, 1);
  atomicSub(&stats->sub_unsigned, 1u);
  atomicAdd(&stats->half_sum, __floats2half2_rn(1.0f, 2.0f));
}
