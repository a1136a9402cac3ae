// bench_matmul on a GPU: every dtype through ember's tiled kernels and its cuBLASLt backend,
// each against cublasGemmEx (FP32 compute, no TF32) measured in the same run. Timing uses CUDA
// events around each iteration (Google Benchmark's manual time), after warm-up launches; with
// --flush_l2 a buffer twice the L2 size is overwritten before every timed iteration.
#include "bench_matmul_cuda.hpp"

#include <benchmark/benchmark.h>

#if EMBER_WITH_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <memory>
#include <vector>

#include "core/shared_library.hpp"
#include "ember/core/check_cuda.hpp"
#include "ember/ember.hpp"

namespace ember::bench {
namespace {

struct Shape3 {
  int64_t m, n, k;
};

// Squares from 256 to 8192 and training shapes: a 4096-wide layer on 1024 tokens' worth of K,
// and GPT-2-small MLP GEMMs over 8192 tokens (forward up and down projections).
const Shape3 kShapes[] = {{256, 256, 256},    {512, 512, 512},    {1024, 1024, 1024},
                          {2048, 2048, 2048}, {4096, 4096, 4096}, {8192, 8192, 8192},
                          {4096, 4096, 1024}, {8192, 768, 3072},  {8192, 3072, 768}};

// cuBLAS, the reference, loaded when the GPU benchmarks are registered (as ember loads cuBLASLt):
// the installed bench_matmul starts without the CUDA toolkit.
struct Cublas {
  decltype(&::cublasCreate_v2) create = nullptr;
  decltype(&::cublasSetMathMode) set_math_mode = nullptr;
  decltype(&::cublasSetStream_v2) set_stream = nullptr;
  // cublasGemmEx's C signature (cublas_api.h overloads it for C++).
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const void*, const void*, cudaDataType, int, const void*, cudaDataType,
                            int, const void*, void*, cudaDataType, int, cublasComputeType_t,
                            cublasGemmAlgo_t) = nullptr;
  decltype(&::cublasGetStatusName) status_name = nullptr;
};

#define BENCH_CUBLAS_CHECK(expr)                                                                   \
  do {                                                                                             \
    const cublasStatus_t bench_status_ = (expr);                                                   \
    if (bench_status_ != CUBLAS_STATUS_SUCCESS)                                                    \
      EMBER_THROW("cuBLAS call '{}' failed: {}", #expr, context().api.status_name(bench_status_)); \
  } while (0)

struct GpuContext {
  Cublas api;
  cublasHandle_t cublas = nullptr;
  void* flush = nullptr;
  size_t flush_bytes = 0;
};
GpuContext& context() {
  static GpuContext c;  // process lifetime: handles outlive every benchmark
  return c;
}

Tensor device_operand(int64_t rows, int64_t cols, DType dtype, uint64_t seed) {
  Tensor t = Tensor::empty({rows, cols});
  t.uniform_(seed, -1, 1);
  return t.to(dtype).to(Device::cuda(0));
}

cudaDataType_t cuda_type(DType d) {
  return d == DType::f16 ? CUDA_R_16F : d == DType::bf16 ? CUDA_R_16BF : CUDA_R_32F;
}

// Times `launch` with CUDA events, one timed launch per iteration.
template <class Launch>
void timed_loop(benchmark::State& state, const Shape3& p, cudaStream_t stream, Launch launch) {
  for (int i = 0; i < 3; ++i) launch();  // warm-up: plans, caches, clocks
  cudaEvent_t start, stop;
  EMBER_CUDA_CHECK(cudaEventCreate(&start));
  EMBER_CUDA_CHECK(cudaEventCreate(&stop));
  for (auto _ : state) {
    if (context().flush) {
      EMBER_CUDA_CHECK(cudaMemsetAsync(context().flush, state.iterations() & 0xff,
                                       context().flush_bytes, stream));
    }
    EMBER_CUDA_CHECK(cudaEventRecord(start, stream));
    launch();
    EMBER_CUDA_CHECK(cudaEventRecord(stop, stream));
    EMBER_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    EMBER_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    state.SetIterationTime(ms * 1e-3);
  }
  EMBER_CUDA_CHECK(cudaEventDestroy(start));
  EMBER_CUDA_CHECK(cudaEventDestroy(stop));
  state.counters["TFLOP/s"] = benchmark::Counter(2.0 * p.m * p.n * p.k * 1e-12,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

void bench_ember(benchmark::State& state, Shape3 p, DType dtype, ops::MatmulBackend backend) {
  Stream stream(Device::cuda(0));
  const Tensor a = device_operand(p.m, p.k, dtype, 1), b = device_operand(p.k, p.n, dtype, 2);
  Tensor c = Tensor::empty({p.m, p.n}, dtype, Device::cuda(0));
  ops::MatmulOptions options;
  options.backend = backend;
  try {
    timed_loop(state, p, static_cast<cudaStream_t>(stream.native()),
               [&] { ops::matmul(stream, c, a, b, options); });
  } catch (const Error& e) {
    state.SkipWithError(e.what());
  }
}

// The reference: cublasGemmEx with FP32 compute. Row-major C = A B is column-major
// C^T = B^T A^T, so B goes first.
void bench_cublas(benchmark::State& state, Shape3 p, DType dtype) {
  Stream stream(Device::cuda(0));
  const Tensor a = device_operand(p.m, p.k, dtype, 1), b = device_operand(p.k, p.n, dtype, 2);
  Tensor c = Tensor::empty({p.m, p.n}, dtype, Device::cuda(0));
  cublasHandle_t handle = context().cublas;
  const auto s = static_cast<cudaStream_t>(stream.native());
  BENCH_CUBLAS_CHECK(context().api.set_stream(handle, s));
  const float alpha = 1.0f, beta = 0.0f;
  const cudaDataType_t t = cuda_type(dtype);
  timed_loop(state, p, s, [&] {
    BENCH_CUBLAS_CHECK(context().api.gemm_ex(
        handle, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(p.n), static_cast<int>(p.m),
        static_cast<int>(p.k), &alpha, b.data(), t, static_cast<int>(p.n), a.data(), t,
        static_cast<int>(p.k), &beta, c.data(), t, static_cast<int>(p.n), CUBLAS_COMPUTE_32F,
        CUBLAS_GEMM_DEFAULT));
  });
}

}  // namespace

bool register_cuda_matmul_benchmarks(bool flush_l2, std::string* why_not) {
  if (cuda_device_count() == 0) {
    default_device(why_not);
    if (why_not->empty()) *why_not = "no CUDA device";
    return false;
  }
  GpuContext& g = context();
  static const detail::SharedLibrary cublas("libcublas.so." + std::to_string(CUBLAS_VER_MAJOR));
  if (!cublas.loaded()) {
    *why_not = fmt::format("the cuBLAS reference is not available ({})", cublas.error());
    return false;
  }
  cublas.bind("cublasCreate_v2", g.api.create);
  cublas.bind("cublasSetMathMode", g.api.set_math_mode);
  cublas.bind("cublasSetStream_v2", g.api.set_stream);
  cublas.bind("cublasGemmEx", g.api.gemm_ex);
  cublas.bind("cublasGetStatusName", g.api.status_name);
  BENCH_CUBLAS_CHECK(g.api.create(&g.cublas));
  BENCH_CUBLAS_CHECK(g.api.set_math_mode(g.cublas, CUBLAS_PEDANTIC_MATH));  // no TF32
  if (flush_l2) {
    int l2 = 0;
    EMBER_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
    g.flush_bytes = 2 * static_cast<size_t>(l2);
    EMBER_CUDA_CHECK(cudaMalloc(&g.flush, g.flush_bytes));
  }
  const std::pair<const char*, ops::MatmulBackend> backends[] = {
      {"tiled", ops::MatmulBackend::tiled}, {"cublaslt", ops::MatmulBackend::cublaslt}};
  for (const Shape3& p : kShapes) {
    const std::string shape = fmt::format("{}x{}x{}", p.m, p.n, p.k);
    for (DType d : {DType::f32, DType::f16, DType::bf16}) {
      for (const auto& [name, backend] : backends) {
        const std::string group = fmt::format("cuda_{}_{}", dtype_name(d), name);
        benchmark::RegisterBenchmark((group + "/ember/" + shape).c_str(), bench_ember, p, d,
                                     backend)
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
        benchmark::RegisterBenchmark((group + "/cublas/" + shape).c_str(), bench_cublas, p, d)
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
  return true;
}

}  // namespace ember::bench

#else  // no CUDA in this build

namespace ember::bench {
bool register_cuda_matmul_benchmarks(bool, std::string* why_not) {
  *why_not = "ember was built without CUDA (EMBER_CUDA=OFF or no nvcc)";
  return false;
}
}  // namespace ember::bench

#endif
