#include "ops/matmul/matmul_onednn.hpp"

#include "ops/matmul/cpu_output_tiles.hpp"

#include <bit>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#if EMBER_WITH_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace ember::ops::cpu {

bool onednn_disabled_by_environment() {
  const char* v = std::getenv("EMBER_ONEDNN");
  return v != nullptr && std::strcmp(v, "0") == 0;
}

#if EMBER_WITH_ONEDNN
namespace {

using dnnl::memory;

struct OneDnn {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
};

OneDnn& onednn() {
  static OneDnn instance;
  return instance;
}

memory::data_type data_type(DType dtype) {
  return dtype == DType::bf16 ? memory::data_type::bf16 : memory::data_type::f16;
}

// A [rows, cols] operand stored row-major with leading dimension ld, or transposed (its transpose
// [cols, rows] stored with leading dimension ld): its strides.
memory::desc matrix(int64_t rows, int64_t cols, memory::data_type type, bool transposed,
                    int64_t ld) {
  const memory::dims strides = transposed ? memory::dims{1, ld} : memory::dims{ld, 1};
  return memory::desc({rows, cols}, type, strides);
}

// The product of an [m, k] tile of op(A) and a [k, n] tile of op(B) into an [m, n] tile of C,
// whose rows are ldc apart.
dnnl::matmul::primitive_desc describe(int64_t m, int64_t n, int64_t k, memory::data_type type,
                                      bool transpose_a, bool transpose_b, int64_t lda, int64_t ldb,
                                      int64_t ldc, float alpha, float beta) {
  dnnl::primitive_attr attr;
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(beta);
    attr.set_post_ops(ops);
  }
  const dnnl::matmul::desc desc(matrix(m, k, type, transpose_a, lda),
                                matrix(k, n, type, transpose_b, ldb),
                                memory::desc({m, n}, memory::data_type::f32, {ldc, 1}));
  return dnnl::matmul::primitive_desc(desc, attr, onednn().engine);
}

// Native kernels only: a reference ("ref:") implementation is slower than widening + sgemm.
bool native(DType dtype) {
  try {
    const auto pd = describe(64, 64, 64, data_type(dtype), false, false, 64, 64, 64, 1.0f, 0.0f);
    return std::string(pd.impl_info_str()).find("ref") == std::string::npos;
  } catch (const dnnl::error&) {
    return false;
  }
}

}  // namespace

bool onednn_available(DType dtype) {
  if (dtype != DType::bf16 && dtype != DType::f16) return false;
  static const bool off = onednn_disabled_by_environment();
  static const bool bf16 = native(DType::bf16);
  static const bool f16 = native(DType::f16);
  return !off && (dtype == DType::bf16 ? bf16 : f16);
}

namespace {

// What a tile's primitive depends on.
struct TileKey {
  int64_t rows, cols, k, lda, ldb, ldc;
  int type;
  bool transpose_a, transpose_b;
  float alpha, beta;
  // alpha and beta by their bits, as the hash: -0 and 0 are different keys, a nan one key.
  bool operator==(const TileKey& o) const {
    return rows == o.rows && cols == o.cols && k == o.k && lda == o.lda && ldb == o.ldb &&
           ldc == o.ldc && type == o.type && transpose_a == o.transpose_a &&
           transpose_b == o.transpose_b &&
           std::bit_cast<uint32_t>(alpha) == std::bit_cast<uint32_t>(o.alpha) &&
           std::bit_cast<uint32_t>(beta) == std::bit_cast<uint32_t>(o.beta);
  }
};

struct TileKeyHash {
  size_t operator()(const TileKey& key) const {
    size_t h = 0;
    for (const int64_t v :
         {key.rows, key.cols, key.k, key.lda, key.ldb, key.ldc, int64_t{key.type},
          int64_t{key.transpose_a}, int64_t{key.transpose_b},
          int64_t{std::bit_cast<int32_t>(key.alpha)}, int64_t{std::bit_cast<int32_t>(key.beta)}}) {
      h = h * 1000003u ^ std::hash<int64_t>()(v);
    }
    return h;
  }
};

struct TilePrimitive {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul product;
};

// Primitives by tile, made once per thread: describing a primitive (oneDNN's dispatch over its
// implementations) costs more than a small tile's product, and a training step repeats the same
// few tile shapes. Per thread, because a primitive keeps its scratchpad: two threads executing one
// primitive at once corrupt each other's results (seen in bf16 products). Bounded: cleared at
// 1024 shapes.
const TilePrimitive& tile_primitive(const TileKey& key) {
  thread_local std::unordered_map<TileKey, TilePrimitive, TileKeyHash> cache;
  const auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  if (cache.size() >= 1024) cache.clear();
  auto pd =
      describe(key.rows, key.cols, key.k, static_cast<memory::data_type>(key.type), key.transpose_a,
               key.transpose_b, key.lda, key.ldb, key.ldc, key.alpha, key.beta);
  return cache.emplace(key, TilePrimitive{pd, dnnl::matmul(pd)}).first->second;
}

}  // namespace

bool gemm16_tile(DType dtype, bool transpose_a, bool transpose_b, int64_t rows, int64_t cols,
                 int64_t k, float alpha, const void* a, int64_t lda, const void* b, int64_t ldb,
                 float beta, float* c, int64_t ldc) {
  if (!onednn_available(dtype)) return false;
  OneDnn& dnn = onednn();
  const TilePrimitive& tile =
      tile_primitive({rows, cols, k, lda, ldb, ldc, static_cast<int>(data_type(dtype)), transpose_a,
                      transpose_b, alpha, beta});
  memory src(tile.pd.src_desc(), dnn.engine, const_cast<void*>(a));
  memory weights(tile.pd.weights_desc(), dnn.engine, const_cast<void*>(b));
  memory dst(tile.pd.dst_desc(), dnn.engine, c);
  // One stream per thread: a stream is not shared between threads.
  thread_local dnnl::stream stream(dnn.engine);
  tile.product.execute(stream,
                       {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}});
  stream.wait();
  return true;
}

bool matmul_onednn(float* c32, const TensorView& a, const TensorView& b,
                   const detail::MatmulDims& dims, bool transpose_a, bool transpose_b, float alpha,
                   float beta) {
  if (a.dtype != b.dtype || !onednn_available(a.dtype)) return false;
  const int64_t m = dims.m, n = dims.n, k = dims.k;
  const int64_t lda = transpose_a ? m : k, ldb = transpose_b ? k : n;
  const size_t element = dtype_size(a.dtype);
  // Output tiles as the f32 path (cpu_output_tiles.hpp): one single-threaded oneDNN call per
  // tile over the whole K, the same tiles at any thread count, each tile shape's primitive made
  // once (tile_primitive). Tiles of whole rows where C is narrow enough (whole_row_tiles).
  const OutputTiles tiles = n <= kWholeRowsMax ? whole_row_tiles(m, n) : output_tiles(m, n);
  for_each_output_tile(
      dims.batch, m, n, tiles, [&](int64_t e, int64_t i0, int64_t rows, int64_t j0, int64_t cols) {
        const int64_t a_offset = (dims.a_batched ? e * m * k : 0) + (transpose_a ? i0 : i0 * lda);
        const int64_t b_offset = (dims.b_batched ? e * k * n : 0) + (transpose_b ? j0 * ldb : j0);
        gemm16_tile(a.dtype, transpose_a, transpose_b, rows, cols, k, alpha,
                    static_cast<const char*>(a.data) + a_offset * element, lda,
                    static_cast<const char*>(b.data) + b_offset * element, ldb, beta,
                    c32 + e * m * n + i0 * n + j0, n);
      });
  return true;
}

#else  // no oneDNN in this build: callers widen to f32

bool gemm16_tile(DType, bool, bool, int64_t, int64_t, int64_t, float, const void*, int64_t,
                 const void*, int64_t, float, float*, int64_t) {
  return false;
}

bool onednn_available(DType) {
  return false;
}

bool matmul_onednn(float*, const TensorView&, const TensorView&, const detail::MatmulDims&, bool,
                   bool, float, float) {
  return false;
}

#endif

}  // namespace ember::ops::cpu
