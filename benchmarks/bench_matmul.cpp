// bench_matmul: ember's matmul against the vendor library on the same shapes, same run.
//
// CPU backend: against OpenBLAS's sgemm called directly (GFLOP/s), whichever engine ember uses
// (cpu_gemm_engine(): OpenBLAS on AMD Zen, else oneDNN on AVX2/AVX-512 CPUs). benchmarks/reference/
// compares with PyTorch. GPU (bench_matmul_cuda.cpp): ember's tiled kernels and its cuBLASLt
// backend against cublasGemmEx (TFLOP/s). Without a GPU the GPU benchmarks are skipped with a
// notice saying why. Options:
// --flush_l2 (GPU), and Google Benchmark's own (--benchmark_filter=cuda_bf16, ...).
#include <cblas.h>

#include <cstdio>
#include <cstring>

#include "bench_matmul_cuda.hpp"
#include "ember/ember.hpp"
#include "ratio_reporter.hpp"

namespace {

using ember::DType;
using ember::Tensor;

struct Problem {
  int64_t m, n, k;
};

Tensor operand(int64_t rows, int64_t cols, DType dtype, uint64_t seed) {
  Tensor t = Tensor::empty({rows, cols});
  t.uniform_(seed, -1, 1);
  return t.to(dtype);
}

void set_flops(benchmark::State& state, const Problem& p) {
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * p.m * p.n * p.k * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

void bench_ember(benchmark::State& state, Problem p, DType dtype) {
  ember::Stream stream;
  const Tensor a = operand(p.m, p.k, dtype, 1), b = operand(p.k, p.n, dtype, 2);
  Tensor c = Tensor::empty({p.m, p.n}, dtype);
  for (auto _ : state) {
    ember::ops::matmul(stream, c, a, b);
    benchmark::DoNotOptimize(c.data());
  }
  set_flops(state, p);
}

void bench_blas(benchmark::State& state, Problem p) {
  const Tensor a = operand(p.m, p.k, DType::f32, 1), b = operand(p.k, p.n, DType::f32, 2);
  Tensor c = Tensor::empty({p.m, p.n});
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<blasint>(p.m),
                static_cast<blasint>(p.n), static_cast<blasint>(p.k), 1.0f, a.data<float>(),
                static_cast<blasint>(p.k), b.data<float>(), static_cast<blasint>(p.n), 0.0f,
                c.data<float>(), static_cast<blasint>(p.n));
    benchmark::DoNotOptimize(c.data());
  }
  set_flops(state, p);
}

// CPU shapes: squares up to 2048 and a scaled-down transformer MLP shape; the
// GPU sizes (to 8192) would take minutes per point on a CPU.
const Problem kProblems[] = {{256, 256, 256},    {512, 512, 512},   {1024, 1024, 1024},
                             {2048, 2048, 2048}, {1024, 768, 3072}, {4096, 1024, 256}};

void register_all() {
  for (const Problem& p : kProblems) {
    const std::string shape = fmt::format("{}x{}x{}", p.m, p.n, p.k);
    benchmark::RegisterBenchmark(("cpu_f32/ember/" + shape).c_str(), bench_ember, p, DType::f32)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark(("cpu_f32/blas/" + shape).c_str(), bench_blas, p)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    for (DType d : {DType::f16, DType::bf16}) {
      // 16-bit inputs: oneDNN's native bf16 dot products where the CPU has them (goal: at least
      // 1.9x ember's f32 at 1024 and above), else widened to f32 (the ratio shows the cost).
      benchmark::RegisterBenchmark(
          fmt::format("cpu_{}/ember/{}", ember::dtype_name(d), shape).c_str(), bench_ember, p, d)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool flush_l2 = false;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {  // our own flag; the rest go to Google Benchmark
    if (std::strcmp(argv[i], "--flush_l2") == 0) {
      flush_l2 = true;
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  std::string why;
  if (ember::bench::register_cuda_matmul_benchmarks(flush_l2, &why)) {
    std::printf("GPU benchmarks: ember (tiled, cublaslt) against cuBLAS on cuda:0%s.\n",
                flush_l2 ? ", L2 flushed before each iteration" : "");
  } else {
    std::printf("GPU benchmarks skipped: %s. Measuring the CPU backend against OpenBLAS.\n",
                why.c_str());
  }
  std::printf("CPU GEMM engine: %s (EMBER_CPU_GEMM=auto|onednn|openblas).\n",
              ember::ops::cpu_gemm_engine_name(ember::ops::cpu_gemm_engine()));
  register_all();
  return ember::bench::run_with_ratios(argc, argv, {"blas", "cublas"},
                                       {{"cpu_bf16", "cpu_f32"}, {"cpu_f16", "cpu_f32"}});
}
