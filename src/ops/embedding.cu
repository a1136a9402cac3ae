// ops::embedding_forward / embedding_backward: the checks, the CPU body and the CUDA launches
// (kernels in ember/kernels/embedding.cuh). Compiled by nvcc in CUDA builds, as C++ in CPU-only
// builds and under the SIMT emulator. The backward adds each table row's gradients in the order
// of their positions on every device, so the CPU and a GPU give the same bits.
#include "ember/core/profile.hpp"
#include "ember/ops/embedding.hpp"

#include <algorithm>
#include <climits>
#include <cstring>
#include <string_view>
#include <type_traits>
#include <vector>

#include "ember/core/denormals.hpp"
#include "ember/ops/check.hpp"
#include "ops/common/cpu_ops.hpp"
#include "ops/common/index_check.hpp"

#if EMBER_WITH_CUDA
#include "ember/core/check_cuda.hpp"
#include "ember/core/launch.hpp"
#include "ember/core/scratch.hpp"
#include "ember/kernels/embedding.cuh"
#include "ops/common/element_type.hpp"
#include "ops/reduce/reduce_cuda.hpp"
#include "ops/reduce/reduce_dispatch.hpp"
#endif

namespace ember::ops {
namespace {

struct Lookup {
  int64_t rows, vocab, dim;
};

// ids: i32 or i64; rows: an [*ids.shape, D] operand of D columns.
Lookup check_lookup(std::string_view op, const Stream& stream, const TensorView& table,
                    std::string_view table_name, const TensorView& rows, std::string_view rows_name,
                    const TensorView& ids) {
  detail::check_devices(op, stream, {{table_name, table}, {rows_name, rows}, {"ids", ids}});
  detail::check_floating(op, table_name, table);
  detail::check_floating(op, rows_name, rows);
  EMBER_CHECK(ids.dtype == DType::i32 || ids.dtype == DType::i64,
              "{}: ids must be i32 or i64, not {}", op, ids.describe());
  EMBER_CHECK(table.rank() == 2, "{}: {} must be [vocab, dim], not {}", op, table_name,
              table.describe());
  const int64_t vocab = table.shape[0], dim = table.shape[1];
  EMBER_CHECK(ids.rank() < Shape::kMaxRank, "{}: ids may have rank {} at most, not {}", op,
              Shape::kMaxRank - 1, ids.describe());
  std::vector<int64_t> expected(ids.shape.dims().begin(), ids.shape.dims().end());
  expected.push_back(dim);
  const Shape expected_shape(expected);
  EMBER_CHECK(rows.shape == expected_shape, "{}: {} must be {} (ids {} by {} columns), not {}", op,
              rows_name, expected_shape.to_string(), ids.describe(), dim, rows.describe());
  EMBER_CHECK(ids.numel() <= INT_MAX, "{}: at most 2^31 - 1 ids, not {}", op, ids.numel());
  return {ids.numel(), vocab, dim};
}

// ---- CPU ---------------------------------------------------------------------------------------

void forward_cpu(const TensorView& out, const TensorView& table, const TensorView& ids,
                 const Lookup& s) {
  const size_t in_row = static_cast<size_t>(s.dim) * dtype_size(table.dtype);
  const auto* in = static_cast<const char*>(table.data);
  auto* dst = static_cast<char*>(out.data);
  const size_t out_row = static_cast<size_t>(s.dim) * dtype_size(out.dtype);
  const bool flush_mode = ember::detail::flush_denormals_now();
#pragma omp parallel if (s.rows * s.dim >= cpu::kParallelMin)
  {
    const ember::detail::CpuFloatScope float_scope(flush_mode);
    std::vector<float> widened;
    if (out.dtype != table.dtype) widened.resize(static_cast<size_t>(s.dim));
#pragma omp for schedule(static) nowait
    for (int64_t r = 0; r < s.rows; ++r) {
      const int64_t id = cpu::index_at(ids, r);
      if (out.dtype == table.dtype) {
        std::memcpy(dst + r * out_row, in + id * in_row, in_row);
        continue;
      }
      const float* row = cpu::load_f32(table.data, table.dtype, id * s.dim, s.dim, widened.data());
      cpu::write_f32(out.data, out.dtype, r * s.dim, s.dim, row);
    }
  }
}

void backward_cpu(const TensorView& dtable, const TensorView& dout, const TensorView& ids,
                  const Lookup& s, bool accumulate) {
  // The positions grouped by id, each group in position order (a counting sort).
  std::vector<int64_t> starts(static_cast<size_t>(s.vocab) + 1, 0);
  for (int64_t r = 0; r < s.rows; ++r) ++starts[static_cast<size_t>(cpu::index_at(ids, r)) + 1];
  for (int64_t v = 0; v < s.vocab; ++v) starts[v + 1] += starts[v];
  std::vector<int64_t> ordered(static_cast<size_t>(s.rows));
  {
    std::vector<int64_t> cursor(starts.begin(), starts.end() - 1);
    for (int64_t r = 0; r < s.rows; ++r) ordered[cursor[cpu::index_at(ids, r)]++] = r;
  }
  const bool flush_mode = ember::detail::flush_denormals_now();
#pragma omp parallel if (s.vocab * s.dim >= cpu::kParallelMin)
  {
    const ember::detail::CpuFloatScope float_scope(flush_mode);
    std::vector<float> buffer(static_cast<size_t>(s.dim)), widened(static_cast<size_t>(s.dim));
#pragma omp for schedule(dynamic, 16) nowait
    for (int64_t v = 0; v < s.vocab; ++v) {
      const int64_t begin = starts[v], end = starts[v + 1];
      if (accumulate && begin == end) continue;
      float* total = cpu::result_f32(dtable.data, dtable.dtype, v * s.dim, buffer.data());
      if (accumulate) {
        const float* old =
            cpu::load_f32(dtable.data, dtable.dtype, v * s.dim, s.dim, widened.data());
        if (old != total) std::copy(old, old + s.dim, total);
      } else {
        std::fill(total, total + s.dim, 0.0f);
      }
      for (int64_t k = begin; k < end; ++k) {
        const float* g =
            cpu::load_f32(dout.data, dout.dtype, ordered[k] * s.dim, s.dim, widened.data());
#pragma omp simd
        for (int64_t c = 0; c < s.dim; ++c) total[c] += g[c];
      }
      cpu::store_f32(dtable.data, dtable.dtype, v * s.dim, s.dim, total);
    }
  }
}

// ---- CUDA --------------------------------------------------------------------------------------

#if EMBER_WITH_CUDA
using kernels::embedding_detail::kScanThreads;
using kernels::embedding_detail::kThreads;

// Calls f with a null pointer of the ids' element type (int32_t or int64_t).
template <class F>
void with_index_type(DType dtype, F&& f) {
  if (dtype == DType::i64) {
    f(static_cast<const int64_t*>(nullptr));
  } else {
    f(static_cast<const int32_t*>(nullptr));
  }
}

void forward_cuda(Stream& stream, const TensorView& out, const TensorView& table,
                  const TensorView& ids, const Lookup& s) {
  const cudaStream_t handle = cuda::enter(stream);
  cuda::with_element_type(cuda::element_type(out.dtype), [&](auto out_element) {
    using TOut = decltype(out_element);
    cuda::with_element_type(cuda::element_type(table.dtype), [&](auto table_element) {
      using TTable = decltype(table_element);
      with_index_type(ids.dtype, [&](auto index) {
        using Index = std::remove_const_t<std::remove_pointer_t<decltype(index)>>;
        launch(kernels::embedding_forward_kernel<TOut, TTable, Index>,
               dim3(kernels::grid_stride_blocks(s.rows * s.dim, kThreads)), dim3(kThreads), 0,
               handle, static_cast<const TTable*>(table.data), static_cast<const Index*>(ids.data),
               s.rows, s.dim, s.vocab, static_cast<TOut*>(out.data));
      });
    });
  });
}

void backward_cuda(Stream& stream, const TensorView& dtable, const TensorView& dout,
                   const TensorView& ids, const Lookup& s, bool accumulate) {
  const cudaStream_t handle = cuda::enter(stream);
  // counts [V], starts [V + 1], cursor [V], unordered [rows], ordered [rows]: 32-bit words.
  const auto words = static_cast<size_t>(3 * s.vocab + 1 + 2 * s.rows);
  const Scratch scratch(stream, words * sizeof(unsigned));
  auto* counts = static_cast<unsigned*>(scratch.data());
  unsigned* starts = counts + s.vocab;
  unsigned* cursor = starts + s.vocab + 1;
  unsigned* unordered = cursor + s.vocab;
  unsigned* ordered = unordered + s.rows;
  const dim3 block(kThreads), row_blocks(kernels::grid_stride_blocks(s.rows, kThreads));
  EMBER_CUDA_CHECK(
      cudaMemsetAsync(counts, 0, static_cast<size_t>(s.vocab) * sizeof(unsigned), handle));
  with_index_type(ids.dtype, [&](auto index) {
    using Index = std::remove_const_t<std::remove_pointer_t<decltype(index)>>;
    const auto* id = static_cast<const Index*>(ids.data);
    if (s.rows > 0) {
      launch(kernels::embedding_count_kernel<Index>, row_blocks, block, 0, handle, id, s.rows,
             s.vocab, counts);
    }
    launch(kernels::embedding_starts_kernel<kScanThreads>, dim3(1), dim3(kScanThreads), 0, handle,
           static_cast<const unsigned*>(counts), s.vocab, starts, cursor);
    if (s.rows > 0) {
      launch(kernels::embedding_fill_kernel<Index>, row_blocks, block, 0, handle, id, s.rows,
             s.vocab, cursor, unordered);
      launch(kernels::embedding_order_kernel<Index>, row_blocks, block, 0, handle, id,
             static_cast<const unsigned*>(starts), static_cast<const unsigned*>(unordered), s.vocab,
             ordered);
    }
  });
  cuda::with_element_type(cuda::element_type(dtable.dtype), [&](auto d_element) {
    using TD = decltype(d_element);
    cuda::with_element_type(cuda::element_type(dout.dtype), [&](auto dout_element) {
      using TDout = decltype(dout_element);
      launch(kernels::embedding_backward_kernel<TD, TDout>,
             dim3(static_cast<unsigned>(std::min(s.vocab, kernels::kMaxGridX))), block, 0, handle,
             static_cast<const TDout*>(dout.data), static_cast<const unsigned*>(starts),
             static_cast<const unsigned*>(ordered), s.vocab, s.dim, accumulate,
             static_cast<TD*>(dtable.data));
    });
  });
}
#endif

}  // namespace

void embedding_forward(Stream& stream, const TensorView& out, const TensorView& table,
                       const TensorView& ids) {
  EMBER_OP_RANGE("embedding_forward");
  constexpr std::string_view kOp = "ops::embedding_forward";
  const Lookup s = check_lookup(kOp, stream, table, "table", out, "out", ids);
  detail::check_disjoint(kOp, {"out", out}, {"table", table});
  detail::check_disjoint(kOp, {"out", out}, {"ids", ids});
  mark_written(out);
  check_indices(stream, kOp, "id", ids, s.vocab);
  if (s.rows * s.dim == 0) return;
  if (stream.device().is_cpu()) return forward_cpu(out, table, ids, s);
#if EMBER_WITH_CUDA
  forward_cuda(stream, out, table, ids, s);
#endif
}

void embedding_backward(Stream& stream, const TensorView& dtable, const TensorView& dout,
                        const TensorView& ids, bool accumulate) {
  EMBER_OP_RANGE("embedding_backward");
  constexpr std::string_view kOp = "ops::embedding_backward";
  const Lookup s = check_lookup(kOp, stream, dtable, "dtable", dout, "dout", ids);
  detail::check_disjoint(kOp, {"dtable", dtable}, {"dout", dout});
  detail::check_disjoint(kOp, {"dtable", dtable}, {"ids", ids});
  mark_written(dtable);
  check_indices(stream, kOp, "id", ids, s.vocab);
  if (s.vocab * s.dim == 0) return;
  if (stream.device().is_cpu()) return backward_cpu(dtable, dout, ids, s, accumulate);
#if EMBER_WITH_CUDA
  backward_cuda(stream, dtable, dout, ids, s, accumulate);
#endif
}

}  // namespace ember::ops
