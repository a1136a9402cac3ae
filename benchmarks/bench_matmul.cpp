// bench_matmul: ember's matmul against a direct BLAS call on the same shapes.
//
// On this build's CPU backend the reference is OpenBLAS's sgemm called
// directly, so the ratio is ember's dispatch and conversion overhead. GPU
// benchmarks against cuBLAS(Lt) come with ember's CUDA matmul kernels; until
// then, and on machines without a GPU, they are skipped with a notice.
#include <cblas.h>

#include <cstdio>

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
      // 16-bit inputs widen to f32 on the CPU; the ratio shows what that costs.
      benchmark::RegisterBenchmark(
          fmt::format("cpu_{}/ember/{}", ember::dtype_name(d), shape).c_str(), bench_ember, p, d)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Until ember's CUDA matmul lands, every machine measures the CPU backend.
  std::string why = "ember's CUDA matmul kernels are not built yet";
  if (ember::cuda_device_count() == 0) ember::default_device(&why);
  std::printf("GPU benchmarks skipped: %s. Measuring the CPU backend against OpenBLAS.\n",
              why.c_str());
  register_all();
  return ember::bench::run_with_ratios(argc, argv, "blas");
}
