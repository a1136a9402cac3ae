#include "ops/matmul/matmul_onednn.hpp"

#include "ember/core/scratch.hpp"
#include "ops/matmul/cpu_output_tiles.hpp"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <omp.h>

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
// whose rows are ldc apart. With packed_b, B is in whatever layout oneDNN's kernel reads best
// (format_tag::any; pack_b makes it), and transpose_b and ldb are not used.
dnnl::matmul::primitive_desc describe(int64_t m, int64_t n, int64_t k, memory::data_type type,
                                      bool transpose_a, bool transpose_b, int64_t lda, int64_t ldb,
                                      int64_t ldc, float alpha, float beta, bool packed_b = false,
                                      bool user_scratchpad = false) {
  dnnl::primitive_attr attr;
  if (user_scratchpad) attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(beta);
    attr.set_post_ops(ops);
  }
  const dnnl::matmul::desc desc(matrix(m, k, type, transpose_a, lda),
                                packed_b ? memory::desc({k, n}, type, memory::format_tag::any)
                                         : matrix(k, n, type, transpose_b, ldb),
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
  bool packed_b = false;  // then transpose_b and ldb are 0
  // alpha and beta by their bits, as the hash: -0 and 0 are different keys, a nan one key.
  bool operator==(const TileKey& o) const {
    return rows == o.rows && cols == o.cols && k == o.k && lda == o.lda && ldb == o.ldb &&
           ldc == o.ldc && type == o.type && transpose_a == o.transpose_a &&
           transpose_b == o.transpose_b && packed_b == o.packed_b &&
           std::bit_cast<uint32_t>(alpha) == std::bit_cast<uint32_t>(o.alpha) &&
           std::bit_cast<uint32_t>(beta) == std::bit_cast<uint32_t>(o.beta);
  }
};

struct TileKeyHash {
  size_t operator()(const TileKey& key) const {
    size_t h = 0;
    for (const int64_t v :
         {key.rows, key.cols, key.k, key.lda, key.ldb, key.ldc, int64_t{key.type},
          int64_t{key.transpose_a}, int64_t{key.transpose_b}, int64_t{key.packed_b},
          int64_t{std::bit_cast<int32_t>(key.alpha)}, int64_t{std::bit_cast<int32_t>(key.beta)}}) {
      h = h * 1000003u ^ std::hash<int64_t>()(v);
    }
    return h;
  }
};

struct TilePrimitive {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul product;
  bool user_scratchpad = false;  // then each thread passes its own (execute)
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
               key.transpose_b, key.lda, key.ldb, key.ldc, key.alpha, key.beta, key.packed_b);
  return cache.emplace(key, TilePrimitive{pd, dnnl::matmul(pd)}).first->second;
}

// Primitives for ops::matmul's tiles, made once per process on the calling thread, outside any
// team, while OpenMP reports one thread, and shared by every thread with a scratchpad of each
// thread's own. oneDNN chooses a primitive's implementation and blocking from the threading it
// sees when the primitive is made: made inside a team of 3 the same tile ran AVX-512 where made
// at 1 thread it ran AMX, so primitives made per thread gave bits that depended on the thread
// count, and wanted another layout of a B packed elsewhere. Bounded: cleared at 1024 shapes.
std::shared_ptr<const TilePrimitive> shared_primitive(const TileKey& key) {
  static std::mutex mutex;
  static std::unordered_map<TileKey, std::shared_ptr<const TilePrimitive>, TileKeyHash> cache;
  const std::lock_guard lock(mutex);
  const auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  if (cache.size() >= 1024) cache.clear();  // tiles running now hold their own references
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  auto pd = describe(key.rows, key.cols, key.k, static_cast<memory::data_type>(key.type),
                     key.transpose_a, key.transpose_b, key.lda, key.ldb, key.ldc, key.alpha,
                     key.beta, key.packed_b, /*user_scratchpad=*/true);
  auto tile = std::make_shared<const TilePrimitive>(TilePrimitive{pd, dnnl::matmul(pd), true});
  omp_set_num_threads(threads);
  return cache.emplace(key, std::move(tile)).first->second;
}

// C = alpha * A B + beta * C for one tile on the calling thread, B in the layout tile.pd wants.
void execute(const TilePrimitive& tile, const void* a, const void* b, float* c) {
  OneDnn& dnn = onednn();
  memory src(tile.pd.src_desc(), dnn.engine, const_cast<void*>(a));
  memory weights(tile.pd.weights_desc(), dnn.engine, const_cast<void*>(b));
  memory dst(tile.pd.dst_desc(), dnn.engine, c);
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}};
  if (tile.user_scratchpad) {
    const memory::desc scratch = tile.pd.scratchpad_desc();
    thread_local std::vector<unsigned char> buffer;
    const size_t bytes = scratch.get_size();
    if (buffer.size() < bytes + 64) buffer.resize(bytes + 64);
    const auto base = reinterpret_cast<uintptr_t>(buffer.data());
    args.emplace(DNNL_ARG_SCRATCHPAD,
                 memory(scratch, dnn.engine, reinterpret_cast<void*>((base + 63) / 64 * 64)));
  }
  // One stream per thread: a stream is not shared between threads.
  thread_local dnnl::stream stream(dnn.engine);
  tile.product.execute(stream, args);
  stream.wait();
}

void run_tile(const TileKey& key, const void* a, const void* b, float* c) {
  execute(tile_primitive(key), a, b, c);
}

// dst = src on the calling thread's oneDNN stream: a layout change (a transpose, a packing),
// exact for any data.
void reorder(const memory::desc& from, const void* src, const memory::desc& to, void* dst) {
  OneDnn& dnn = onednn();
  memory source(from, dnn.engine, const_cast<void*>(src)), target(to, dnn.engine, dst);
  dnnl::stream stream(dnn.engine);
  dnnl::reorder(source, target).execute(stream, source, target);
  stream.wait();
}

}  // namespace

bool gemm16_tile(DType dtype, bool transpose_a, bool transpose_b, int64_t rows, int64_t cols,
                 int64_t k, float alpha, const void* a, int64_t lda, const void* b, int64_t ldb,
                 float beta, float* c, int64_t ldc) {
  if (!onednn_available(dtype)) return false;
  run_tile({rows, cols, k, lda, ldb, ldc, static_cast<int>(data_type(dtype)), transpose_a,
            transpose_b, alpha, beta},
           a, b, c);
  return true;
}

bool matmul_onednn(float* c32, const TensorView& a, const TensorView& b,
                   const detail::MatmulDims& dims, bool transpose_a, bool transpose_b, float alpha,
                   float beta) {
  if (a.dtype != b.dtype || !onednn_available(a.dtype)) return false;
  const int64_t m = dims.m, n = dims.n, k = dims.k;
  const int64_t element = static_cast<int64_t>(dtype_size(a.dtype));
  const int type = static_cast<int>(data_type(a.dtype));
  // Output tiles as the f32 path (cpu_output_tiles.hpp): one single-threaded oneDNN call per
  // tile over the whole K, the same tiles at any thread count, each tile shape's primitive made
  // once (shared_primitive). Tiles of whole rows where C is narrow enough (whole_row_tiles).
  const bool whole_rows = n <= kWholeRowsMax;
  const OutputTiles tiles =
      whole_rows ? whole_row_tiles(m, n, k * n * element) : output_tiles(m, n);

  // Tiles of whole rows run on AMX: A row-major, and B packed once into the kernel's own layout
  // when several tiles read it. oneDNN 2.6's AMX kernels (brgemm) take A only row-major; with A
  // transposed it runs its AVX-512 gemm at less than half the speed (a weight gradient dY^T X:
  // 245 against 600+ GFLOP/s per thread). And each call repacks all of B: a 32-row tile of a
  // 2048-wide layer repacked 8 MB for 268 MFLOP. Both copies are exact and made by oneDNN's
  // reorders.
  const void* a_data = a.data;
  int64_t lda = transpose_a ? m : k;
  std::optional<Scratch> a_rows;
  if (whole_rows && transpose_a) {
    const int64_t entries = dims.a_batched ? dims.batch : 1;
    a_rows.emplace(Stream(), static_cast<size_t>(entries * m * k * element));
    const memory::data_type t = data_type(a.dtype);
    for (int64_t e = 0; e < entries; ++e) {
      reorder(matrix(m, k, t, true, m), static_cast<const char*>(a.data) + e * m * k * element,
              matrix(m, k, t, false, k), static_cast<char*>(a_rows->data()) + e * m * k * element);
    }
    a_data = a_rows->data();
    transpose_a = false;
    lda = k;
  }
  const int64_t ldb = transpose_b ? k : n;
  const TileKey plain{tiles.rows, tiles.cols,  k,           lda,   ldb, n,
                      type,       transpose_a, transpose_b, alpha, beta};
  TileKey packed = plain;
  packed.packed_b = true;
  packed.transpose_b = false;
  packed.ldb = 0;
  std::optional<Scratch> b_packed;
  int64_t packed_bytes = 0;
  // Each tile shape's primitive (the last row and column tiles may be shorter), made once on
  // this thread (shared_primitive). B is packed when the main tile's primitive wants another
  // layout than B's; a shorter tile whose primitive wants yet another reads B as it is.
  const int64_t last_rows = m - (tiles.row_tiles - 1) * tiles.rows;
  const int64_t last_cols = n - (tiles.col_tiles - 1) * tiles.cols;
  std::shared_ptr<const TilePrimitive> primitives[2][2];  // [shorter rows][shorter cols]
  bool reads_packed[2][2] = {};
  memory::desc layout;
  if (whole_rows && tiles.row_tiles > 1) {
    layout = shared_primitive(packed)->pd.weights_desc();
    const memory::desc plain_layout = shared_primitive(plain)->pd.weights_desc();
    if (layout != plain_layout) {
      packed_bytes = static_cast<int64_t>(layout.get_size());
      const int64_t entries = dims.b_batched ? dims.batch : 1;
      b_packed.emplace(Stream(), static_cast<size_t>(entries * packed_bytes));
      for (int64_t e = 0; e < entries; ++e) {
        reorder(plain_layout, static_cast<const char*>(b.data) + e * k * n * element, layout,
                static_cast<char*>(b_packed->data()) + e * packed_bytes);
      }
    }
  }
  for (int r = 0; r < 2; ++r) {
    for (int c = 0; c < 2; ++c) {
      TileKey key = plain;
      key.rows = r == 0 ? tiles.rows : last_rows;
      key.cols = c == 0 ? tiles.cols : last_cols;
      if (key.rows <= 0 || key.cols <= 0) continue;
      if (b_packed) {
        TileKey packed_key = packed;
        packed_key.rows = key.rows;
        auto tile = shared_primitive(packed_key);
        if (tile->pd.weights_desc() == layout) {
          primitives[r][c] = std::move(tile);
          reads_packed[r][c] = true;
          continue;
        }
      }
      primitives[r][c] = shared_primitive(key);
    }
  }

  for_each_output_tile(
      dims.batch, m, n, tiles, [&](int64_t e, int64_t i0, int64_t rows, int64_t j0, int64_t cols) {
        const int64_t a_offset = (dims.a_batched ? e * m * k : 0) + (transpose_a ? i0 : i0 * lda);
        const char* a_tile = static_cast<const char*>(a_data) + a_offset * element;
        float* c_tile = c32 + e * m * n + i0 * n + j0;
        const int r = rows == tiles.rows ? 0 : 1, c = cols == tiles.cols ? 0 : 1;
        const char* b_tile =
            reads_packed[r][c]
                ? static_cast<const char*>(b_packed->data()) +
                      (dims.b_batched ? e * packed_bytes : 0)
                : static_cast<const char*>(b.data) +
                      ((dims.b_batched ? e * k * n : 0) + (transpose_b ? j0 * ldb : j0)) * element;
        execute(*primitives[r][c], a_tile, b_tile, c_tile);
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
