// The SIMT emulator's speed: fiber switches, thread-barrier crossings (one
// worker thread, so per core) and an emulated 256x256x256 tiled matmul.
#include "ember/simt/prelude.hpp"

#include <benchmark/benchmark.h>

#include <boost/context/fiber.hpp>
#include <vector>

#include "ember/core/launch.hpp"

namespace {

// The emulated workload: C = A * B (row-major, n x n) with 16x16 shared-memory tiles.
constexpr int kMatmulTile = 16;

__global__ void tiled_matmul_kernel(const float* a, const float* b, float* c, int n) {
  __shared__ float as[kMatmulTile][kMatmulTile];
  __shared__ float bs[kMatmulTile][kMatmulTile];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * kMatmulTile + ty, col = blockIdx.x * kMatmulTile + tx;
  float acc = 0.0f;
  for (int k0 = 0; k0 < n; k0 += kMatmulTile) {
    as[ty][tx] = row < n && k0 + tx < n ? a[row * n + k0 + tx] : 0.0f;
    bs[ty][tx] = col < n && k0 + ty < n ? b[(k0 + ty) * n + col] : 0.0f;
    __syncthreads();
    for (int k = 0; k < kMatmulTile; ++k) acc += as[ty][k] * bs[k][tx];
    __syncthreads();
  }
  if (row < n && col < n) c[row * n + col] = acc;
}

__global__ void barrier_kernel(int rounds) {
  for (int i = 0; i < rounds; ++i) __syncthreads();
}

// Raw Boost.Context ping-pong: the floor under every emulated switch.
void BM_fiber_switch(benchmark::State& state) {
  namespace ctx = boost::context;
  bool stop = false;
  ctx::fiber f([&](ctx::fiber&& sink) {
    while (!stop) sink = std::move(sink).resume();
    return std::move(sink);
  });
  int64_t switches = 0;
  for (auto _ : state) {
    f = std::move(f).resume();
    switches += 2;
  }
  stop = true;
  f = std::move(f).resume();
  state.counters["switches_per_s"] =
      benchmark::Counter(static_cast<double>(switches), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_fiber_switch);

// Each thread crosses `rounds` barriers: a crossing costs one switch to the
// scheduler and one back (the last thread to arrive does not switch).
void BM_barrier_crossings(benchmark::State& state) {
  ember::simt::set_worker_threads(1);
  const unsigned threads = static_cast<unsigned>(state.range(0));
  const int rounds = 1000;
  int64_t crossings = 0;
  for (auto _ : state) {
    ember::launch(barrier_kernel, dim3(1), dim3(threads), 0, nullptr, rounds);
    crossings += int64_t{threads} * rounds;
  }
  state.counters["crossings_per_s"] =
      benchmark::Counter(static_cast<double>(crossings), benchmark::Counter::kIsRate);
  state.counters["fiber_switches_per_s"] =
      benchmark::Counter(2.0 * static_cast<double>(crossings), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_barrier_crossings)->Arg(32)->Arg(256)->Arg(1024)->Unit(benchmark::kMillisecond);

void BM_tiled_matmul_256(benchmark::State& state) {
  ember::simt::set_worker_threads(static_cast<unsigned>(state.range(0)));
  const int n = 256;
  std::vector<float> a(n * n, 1.0f), b(n * n, 2.0f), c(n * n);
  for (auto _ : state) {
    ember::launch(tiled_matmul_kernel, dim3(n / kMatmulTile, n / kMatmulTile),
                  dim3(kMatmulTile, kMatmulTile), 0, nullptr, a.data(), b.data(), c.data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  if (c[0] != 2.0f * n) state.SkipWithError("wrong matmul result");
}
BENCHMARK(BM_tiled_matmul_256)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
