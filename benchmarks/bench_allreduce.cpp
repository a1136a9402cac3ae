// bench_allreduce: ember's all_reduce against calling the engine directly, and DDP's exposed
// communication. Run under mpirun (every rank runs every benchmark; rank 0 reports):
//
//   mpirun -np 4 bench_allreduce
//
// allreduce/ember/<bytes> vs allreduce/mpi/<bytes> (MPI_Allreduce, f32 sum, in place), 8 B to
// 256 MiB, each with nccl-tests' figures: algbw = bytes / time, busbw = algbw * 2 (n - 1) / n.
// Goal: ember at least 0.95 of direct above 1 MiB (the ratio table at the end). With a GPU
// (CUDA builds with NCCL), allreduce_gpu/ember/<bytes> runs ember's NCCL path against
// allreduce_gpu/nccl/<bytes> (ncclAllReduce on a communicator of its own) on each rank's GPU; the
// design target there is 90 % of nccl-tests' all_reduce_perf bus bandwidth. Without a GPU those
// rows are skipped (a line says so). ddp_step reports the seconds per step spent waiting for
// all-reduces after backward ended ("exposed").
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "ember/ember.hpp"
#include "ratio_reporter.hpp"

#if EMBER_BENCH_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#include "ember/core/check_cuda.hpp"
#include "ember/core/check_nccl.hpp"
#endif

namespace {

using namespace ember;

std::unique_ptr<dist::Communicator> g_comm;

// The same count on every rank (auto-tuned counts could differ and mismatch the collectives).
int64_t iterations_for(int64_t bytes) {
  return std::clamp<int64_t>((int64_t{256} << 20) / std::max<int64_t>(bytes, 1) / 8, 20, 2000);
}

void set_figures(benchmark::State& state, int64_t bytes) {
  const double n = g_comm->world_size();
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["algbw_GBps"] =
      benchmark::Counter(static_cast<double>(bytes) * static_cast<double>(state.iterations()) / 1e9,
                         benchmark::Counter::kIsRate);
  state.counters["busbw_GBps"] = benchmark::Counter(
      static_cast<double>(bytes) * static_cast<double>(state.iterations()) / 1e9 * 2 * (n - 1) / n,
      benchmark::Counter::kIsRate);
}

void allreduce_ember(benchmark::State& state) {
  const int64_t bytes = state.range(0);
  Stream s;
  Tensor t = Tensor::full({std::max<int64_t>(bytes / 4, 1)}, 1.0, DType::f32, s);
  g_comm->barrier();
  for (auto _ : state) g_comm->all_reduce(s, t).wait();
  set_figures(state, bytes);
}

void allreduce_mpi(benchmark::State& state) {
  const int64_t bytes = state.range(0);
  std::vector<float> v(static_cast<size_t>(std::max<int64_t>(bytes / 4, 1)), 1.0f);
  g_comm->barrier();
  for (auto _ : state) {
    MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
  }
  set_figures(state, bytes);
}

void register_sizes(const char* name, void (*fn)(benchmark::State&)) {
  // 8 B to 256 MiB: 8 B times every power of 4 (up to 128 MiB), then 256 MiB.
  std::vector<int64_t> sizes;
  for (int64_t bytes = 8; bytes <= (int64_t{128} << 20); bytes *= 4) sizes.push_back(bytes);
  sizes.push_back(int64_t{256} << 20);
  for (int64_t bytes : sizes) {
    benchmark::RegisterBenchmark(name, fn)
        ->Arg(bytes)
        ->Iterations(iterations_for(bytes))
        ->UseRealTime();
  }
}

// One data-parallel training step of a residual MLP: the share of the step spent waiting for
// all-reduces after backward ended.
void ddp_step(benchmark::State& state) {
  const int64_t width = state.range(0);
  Stream s;
  dist::DistributedDataParallel ddp(
      train::make_residual_mlp(
          {.inputs = 64, .width = width, .depth = 4, .outputs = 10, .seed = 1}),
      *g_comm, {.bucket_cap_mb = 4, .first_bucket_mb = 1});
  train::SGD sgd(ddp.parameters(), {.lr = 1e-3f});
  nn::SoftmaxCrossEntropy loss;
  nn::Context ctx{s};
  Tensor x = Tensor::empty({128, 64}, DType::f32, s);
  x.uniform_(static_cast<uint64_t>(g_comm->rank()), -1, 1);
  Tensor y = Tensor::zeros({128}, DType::i32, s);
  double exposed = 0;
  for (auto _ : state) {
    sgd.zero_grad();
    loss.forward(ctx, ddp.forward(ctx, x), y);
    ddp.backward(ctx, loss.backward(ctx));
    sgd.step(s);
    exposed += ddp.last_exposed_wait_seconds();
  }
  state.counters["exposed_s"] = benchmark::Counter(exposed, benchmark::Counter::kAvgIterations);
  state.counters["buckets"] = static_cast<double>(ddp.buckets().size());
}

#if EMBER_BENCH_NCCL
ncclComm_t g_nccl = nullptr;

Tensor gpu_buffer(int64_t bytes, Stream& s) {
  return Tensor::full({std::max<int64_t>(bytes / 4, 1)}, 1.0, DType::f32, s);
}

void allreduce_gpu_ember(benchmark::State& state) {
  const int64_t bytes = state.range(0);
  Stream s = current_stream(dist::rank_device(g_comm->launch()));
  Tensor t = gpu_buffer(bytes, s);
  g_comm->barrier();
  for (auto _ : state) g_comm->all_reduce(s, t).wait();
  set_figures(state, bytes);
}

void allreduce_gpu_nccl(benchmark::State& state) {
  const int64_t bytes = state.range(0);
  Stream s = current_stream(dist::rank_device(g_comm->launch()));
  Tensor t = gpu_buffer(bytes, s);
  const auto stream = static_cast<cudaStream_t>(s.native());
  g_comm->barrier();
  for (auto _ : state) {
    EMBER_NCCL_CHECK(ncclAllReduce(t.data(), t.data(), static_cast<size_t>(t.numel()), ncclFloat32,
                                   ncclSum, g_nccl, stream));
    EMBER_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  set_figures(state, bytes);
}

// The reference's own communicator, its id sent by MPI as ember's is.
bool register_gpu() {
  if (cuda_device_count() == 0) return false;
  const Device d = dist::rank_device(g_comm->launch());
  ncclUniqueId id{};
  if (g_comm->rank() == 0) EMBER_NCCL_CHECK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  EMBER_CUDA_CHECK(cudaSetDevice(d.index()));
  EMBER_NCCL_CHECK(ncclCommInitRank(&g_nccl, g_comm->world_size(), id, g_comm->rank()));
  register_sizes("allreduce_gpu/ember", allreduce_gpu_ember);
  register_sizes("allreduce_gpu/nccl", allreduce_gpu_nccl);
  return true;
}
#else
bool register_gpu() {
  return false;
}
#endif

class Silent : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

}  // namespace

int main(int argc, char** argv) {
  g_comm = dist::init();
  register_sizes("allreduce/ember", allreduce_ember);
  register_sizes("allreduce/mpi", allreduce_mpi);
  const bool gpu = register_gpu();
  for (int64_t width : {256, 1024}) {
    benchmark::RegisterBenchmark("ddp_step", ddp_step)->Arg(width)->Iterations(20)->UseRealTime();
  }
  int code = 0;
  if (g_comm->rank() == 0) {
    std::printf("bench_allreduce: %d ranks (%s launch)%s\n", g_comm->world_size(),
                g_comm->launch().launcher.c_str(),
                gpu ? "" : "; allreduce_gpu rows skipped: no GPU (or a build without NCCL)");
    code = ember::bench::run_with_ratios(argc, argv, {"mpi", "nccl"});
  } else {
    benchmark::Initialize(&argc, argv);
    Silent silent;
    benchmark::RunSpecifiedBenchmarks(&silent);
    benchmark::Shutdown();
  }
  g_comm->barrier();
  g_comm.reset();
  return code;
}
