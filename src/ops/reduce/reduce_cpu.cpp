// CPU reductions, bitwise reproducible at any thread count: the input is cut into chunks whose
// size depends only on the shape, each chunk reduces in a fixed order (SumLanes / MaxLanes), and
// the chunk results combine sequentially in chunk order.
#include <algorithm>
#include <vector>

#include "ops/common/cpu_ops.hpp"
#include "ops/common/cpu_tasks.hpp"

namespace ember::ops::cpu {
namespace {

// Elements per chunk of sum and max: large enough that combining chunks costs nothing, small
// enough that 1e6 elements make 60 chunks to spread over threads.
constexpr int64_t kChunk = int64_t{1} << 14;

// column_sums: columns per work item (its double accumulators live on the stack), and the least
// number of rows per row chunk, which bounds the partial sums to 1/32 of x's f32 size.
constexpr int64_t kColBlock = 256;
constexpr int64_t kMinChunkRows = 128;

// Reduces elements [begin, begin + count) of x with acc.add, converting 16-bit inputs in blocks.
template <class Lanes>
void reduce_range(Lanes& acc, const TensorView& x, int64_t begin, int64_t count) {
  if (x.dtype == DType::f32) {
    acc.add(static_cast<const float*>(x.data) + begin, count);
    return;
  }
  float buffer[kBlock];
  for (int64_t done = 0; done < count; done += kBlock) {
    const int64_t n = std::min(kBlock, count - done);
    acc.add(load_f32(x.data, x.dtype, begin + done, n, buffer), n);
  }
}

// Each chunk's total by a Lanes accumulator (SumLanes or MaxLanes, whose total() is a Total), the
// chunks in parallel.
template <class Lanes, class Total>
std::vector<Total> chunk_totals(const TensorView& x) {
  const int64_t n = x.numel();
  const int64_t chunks = ceil_div(n, kChunk);
  std::vector<Total> partial(static_cast<size_t>(chunks));
  parallel_for(chunks, n >= kParallelMin, [&](int64_t c) {
    Lanes acc;
    reduce_range(acc, x, c * kChunk, std::min(kChunk, n - c * kChunk));
    partial[static_cast<size_t>(c)] = acc.total();
  });
  return partial;
}

}  // namespace

void sum(const TensorView& out, const TensorView& x, bool accumulate) {
  if (x.numel() == 0 && accumulate) return;  // out + 0 would turn -0 into +0
  double total = 0.0;
  for (const double p : chunk_totals<SumLanes, double>(x)) total += p;
  float* result = static_cast<float*>(out.data);
  // With accumulate, add in double and round once.
  *result = static_cast<float>(accumulate ? static_cast<double>(*result) + total : total);
}

void column_sums(const TensorView& out, const TensorView& x, bool accumulate) {
  const int64_t cols = out.numel();
  if (cols == 0) return;
  const int64_t rows = x.numel() / cols;
  if (rows == 0 && accumulate) return;  // out + 0 would turn -0 into +0
  // Phase 1: each (row chunk, column block) item sums its rows in order into doubles; phase 2:
  // each column adds its row chunks' partials in chunk order. The chunking depends only on the
  // shape; narrow matrices get taller chunks so each item still has real work.
  const int64_t chunk_rows = std::max(kMinChunkRows, ceil_div(kChunk, cols));
  const int64_t row_chunks = ceil_div(rows, chunk_rows);
  const int64_t col_blocks = ceil_div(cols, kColBlock);
  std::vector<double> partial(static_cast<size_t>(row_chunks * cols));
  parallel_for(row_chunks * col_blocks, x.numel() >= kParallelMin, [&](int64_t item) {
    const int64_t r0 = (item / col_blocks) * chunk_rows;
    const int64_t r1 = std::min(rows, r0 + chunk_rows);
    const int64_t c0 = (item % col_blocks) * kColBlock;
    const int64_t width = std::min(kColBlock, cols - c0);
    double acc[kColBlock] = {};
    float buffer[kColBlock];
    for (int64_t r = r0; r < r1; ++r) {
      const float* p = load_f32(x.data, x.dtype, r * cols + c0, width, buffer);
      for (int64_t j = 0; j < width; ++j) acc[j] += static_cast<double>(p[j]);
    }
    std::copy(acc, acc + width, partial.begin() + (item / col_blocks) * cols + c0);
  });
  float* result = static_cast<float*>(out.data);
  parallel_for(cols, row_chunks * cols >= kParallelMin, [&](int64_t j) {
    double total = accumulate ? static_cast<double>(result[j]) : 0.0;
    for (int64_t rc = 0; rc < row_chunks; ++rc)
      total += partial[static_cast<size_t>(rc * cols + j)];
    result[j] = static_cast<float>(total);
  });
}

void max(const TensorView& out, const TensorView& x) {
  const std::vector<float> partial = chunk_totals<MaxLanes, float>(x);
  float m = partial[0];
  for (const float p : partial) m = max_nan(m, p);
  *static_cast<float*>(out.data) = m;
}

}  // namespace ember::ops::cpu
