// bench_elementwise: a pointwise chain y = relu(x * s + bias) (bias a row vector) as one
// ops::map pass against the same chain as three ops (scale, bias_add, relu_forward), with the
// bytes each moves, and on the CPU against a STREAM-like copy measured in the same run.
//   CPU:  chain/ember/N (fused)  vs  chain/separate/N  and  chain/copy/N (y = x, same bytes as
//         the fused chain): the ratio to copy is the fraction of the copy's GB/s reached.
//   GPU:  with a CUDA device, chain_gpu/{fused,separate}/N through ember's precompiled ops
//         (residual_add as the fused stand-in: one pass of 12 bytes per element) with GB/s and
//         the fraction of the device's peak DRAM bandwidth; skipped, saying so, without one.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "ember/core/device.hpp"
#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"
#include "ember/ops/elementwise.hpp"
#include "ember/ops/map.hpp"
#include "ratio_reporter.hpp"

#if EMBER_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace {

using ember::DType;
using ember::Stream;
using ember::Tensor;
namespace ops = ember::ops;

constexpr int64_t kCols = 1024;

struct ScaleBiasRelu {
  float s;
  float operator()(float x, float b) const {
    const float t = x * s + b;
    return t < 0.0f ? 0.0f : t;
  }
};

struct Operands {
  Tensor x, bias, y;
  explicit Operands(int64_t n, ember::Device device = ember::Device::cpu()) {
    x = Tensor::empty({n / kCols, kCols});
    x.uniform_(1, -1.0, 1.0);
    bias = Tensor::empty({kCols});
    bias.uniform_(2, -1.0, 1.0);
    x = x.to(device);
    bias = bias.to(device);
    y = Tensor::zeros({n / kCols, kCols}, DType::f32, device);
  }
};

// Bytes of DRAM traffic per element: 4 read + 4 written per pass (the bias row stays cached).
void set_bytes(benchmark::State& state, int64_t n, int passes) {
  state.SetBytesProcessed(state.iterations() * n * 8 * passes);
  state.counters["bytes/elem"] = 8.0 * passes;
}

void fused(benchmark::State& state) {
  const int64_t n = state.range(0);
  Stream stream;
  Operands o(n);
  for (auto _ : state) ops::map(stream, o.y, ScaleBiasRelu{0.5f}, o.x, ops::row(o.bias));
  set_bytes(state, n, 1);
}

void separate(benchmark::State& state) {
  const int64_t n = state.range(0);
  Stream stream;
  Operands o(n);
  for (auto _ : state) {
    ops::scale(stream, o.y, o.x, 0.5f);
    ops::bias_add(stream, o.y, o.y, o.bias);
    ops::relu_forward(stream, o.y, o.y);
  }
  set_bytes(state, n, 3);
}

// The STREAM "copy" kernel with the library's threading: the memory bandwidth reference.
void copy(benchmark::State& state) {
  const int64_t n = state.range(0);
  Operands o(n);
  const float* x = static_cast<const float*>(o.x.data());
  float* y = static_cast<float*>(o.y.data());
  for (auto _ : state) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) y[i] = x[i];
    benchmark::ClobberMemory();
  }
  set_bytes(state, n, 1);
}

// 1 MiB (cache-resident) to 256 MiB per operand.
void sizes(benchmark::internal::Benchmark* b) {
  for (const int64_t n : {int64_t{1} << 18, int64_t{1} << 22, int64_t{1} << 24, int64_t{1} << 26}) {
    b->Arg(n);
  }
  b->Unit(benchmark::kMicrosecond)->UseRealTime();
}

BENCHMARK(fused)->Name("chain/ember")->Apply(sizes);
BENCHMARK(separate)->Name("chain/separate")->Apply(sizes);
BENCHMARK(copy)->Name("chain/copy")->Apply(sizes);

#if EMBER_WITH_CUDA
// Peak DRAM bandwidth of cuda:0 from its memory clock and bus width (double data rate).
double peak_bytes_per_second() {
  int clock_khz = 0, bus_bits = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, 0);
  cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0);
  return 2.0 * clock_khz * 1e3 * bus_bits / 8.0;
}

// Times `passes` ops per iteration on cuda:0 with events; reports GB/s and % of peak.
template <class Body>
void gpu_bench(benchmark::State& state, int bytes_per_elem, Body body) {
  const int64_t n = state.range(0);
  const ember::Device gpu = ember::Device::cuda(0);
  Stream stream(gpu);
  Operands o(n, gpu);
  Tensor z = Tensor::zeros({n / kCols, kCols}, DType::f32, gpu);
  body(stream, o, z);  // warm-up
  ember::Event start(gpu), stop(gpu);
  for (auto _ : state) {
    start.record(stream);
    body(stream, o, z);
    stop.record(stream);
    stop.synchronize();
    state.SetIterationTime(stop.elapsed_ms(start) / 1e3);
  }
  const double bytes = static_cast<double>(n) * bytes_per_elem;
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
  state.counters["bytes/elem"] = bytes_per_elem;
  // bytes / peak per iteration, as a rate over the measured time: achieved / peak bandwidth.
  state.counters["peak_fraction"] = benchmark::Counter(
      bytes / peak_bytes_per_second(), benchmark::Counter::kIsIterationInvariantRate);
}

void register_gpu() {
  const auto gpu_sizes = [](benchmark::internal::Benchmark* b) {
    for (const int64_t n : {int64_t{1} << 24, int64_t{1} << 26, int64_t{1} << 28}) b->Arg(n);
    b->Unit(benchmark::kMicrosecond)->UseManualTime();
  };
  benchmark::RegisterBenchmark("chain_gpu/ember", [](benchmark::State& state) {
    gpu_bench(state, 12,
              [](Stream& s, Operands& o, Tensor& z) { ops::residual_add(s, o.y, o.x, z, 0.5f); });
  })->Apply(gpu_sizes);
  benchmark::RegisterBenchmark("chain_gpu/separate", [](benchmark::State& state) {
    gpu_bench(state, 12 + 8 + 12, [](Stream& s, Operands& o, Tensor& z) {
      ops::scale(s, o.y, z, 0.5f);
      ops::bias_add(s, o.y, o.y, o.bias);
      ops::add(s, o.y, o.y, o.x);
    });
  })->Apply(gpu_sizes);
}
#endif

}  // namespace

int main(int argc, char** argv) {
  std::string why = "this build has no CUDA backend";
#if EMBER_WITH_CUDA
  if (ember::cuda_device_count() > 0) {
    register_gpu();
    std::printf("GPU benchmarks on cuda:0: GB/s and peak_fraction (of DRAM peak bandwidth).\n");
    why.clear();
  } else {
    why = "no CUDA device";
  }
#endif
  if (!why.empty()) std::printf("GPU benchmarks skipped: %s.\n", why.c_str());
  return ember::bench::run_with_ratios(argc, argv, {"separate", "copy"});
}
