// bench_gpt2: one GPT-2 training step (forward, cross-entropy, backward, AdamW) in f32 and under
// bf16 autocast, tokens per second, the model's TFLOP/s and (on known GPUs) MFU: the small
// byte-level model (its context widened to T where T is longer) and GPT-2 small (d12), at T = 256
// and 1024 (and the small model at 128), on the CPU and on cuda:0 when a GPU is usable. Its PyTorch
// twin is benchmarks/reference/gpt2_torch.py (compare.py --only gpt2 prints the ratios, same rows).
// The trace_overhead rows and op_range measure profile::Trace's overhead: recording (overhead%,
// traced and plain steps interleaved) and off (op_range/off's time times ranges/step).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "bench_support.hpp"
#include "ember/ember.hpp"
#include "ratio_reporter.hpp"

namespace {

using namespace ember;

struct Case {
  std::string model;  // "small" or "d12"
  int64_t seq, batch;
};

// traced_host: a trace of host ranges only (Trace::start(false)), to tell the host ranges' cost
// from the device collector's (CUPTI's) on a GPU.
enum class Mode { plain, traced, traced_host, graph };

void gpt2_step(benchmark::State& state, Device device, Case c, nn::Precision precision, Mode mode) {
  Stream stream = current_stream(device);
  train::GptConfig config = train::gpt_config(c.model);
  config.context = std::max(config.context, c.seq);  // the small model at T = 1024
  config.seed = 1;
  config.device = device;
  auto model = train::make_gpt(config);
  train::AdamW optimizer(model->parameters(), {.lr = 1e-4f, .beta2 = 0.95f});
  nn::SoftmaxCrossEntropy criterion({.fused = true, .classes = config.vocab});  // in place
  nn::Context ctx{stream, /*training=*/true, precision};
  std::vector<int32_t> tokens(static_cast<size_t>(c.batch * (c.seq + 1)));
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<int32_t>((i * 7919) % config.vocab);
  const Tensor all = Tensor::from_vector(tokens, Shape{c.batch, c.seq + 1});
  std::vector<int32_t> in, out;
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t t = 0; t < c.seq; ++t) {
      in.push_back(tokens[b * (c.seq + 1) + t]);
      out.push_back(tokens[b * (c.seq + 1) + t + 1]);
    }
  }
  const Tensor x = Tensor::from_vector(in, Shape{c.batch, c.seq}).to(stream);
  const Tensor y = Tensor::from_vector(out, Shape{c.batch * c.seq}).to(stream);
  auto step = [&] {
    optimizer.zero_grad();
    const Tensor logits = model->forward(ctx, x);
    const Tensor loss =
        criterion.forward(ctx, logits.reshape({c.batch * c.seq, config.padded_vocab()}), y);
    model->backward(ctx, criterion.backward(ctx).reshape({c.batch, c.seq, config.padded_vocab()}));
    optimizer.step(stream);
    return loss;
  };
  // Graph rows: the step captured once (train::CapturedStep, after the warm-up step) and
  // replayed as one launch per step (issue goal: the small model at 1.3x ember eager).
  bench::GraphableStep graphable(stream, optimizer, mode == Mode::graph, step);
  graphable.warm_up();
  if (graphable.graph() && !graphable.graph()->captured()) {
    state.SkipWithError(("not captured: " + graphable.graph()->eager_reason()).c_str());
    return;
  }
  if (mode != Mode::traced && mode != Mode::traced_host) {
    for (auto _ : state) benchmark::DoNotOptimize(graphable.run().item());
  } else {
    // The trace's overhead, interleaved so that a noisy machine's drift falls on both: each
    // iteration times a block of steps with a profile::Trace recording (host ranges of the
    // step's ops and modules, and device intervals where the build has a collector, as --trace)
    // and a block without, in alternating order. Starting and stopping the trace (CUPTI's
    // enabling, and the flush that waits for the device) happen once per --trace window, outside
    // the steps: they are timed apart (start_stop_ms).
    constexpr int kBlock = 4;
    profile::Trace trace;
    double plain = 0, recorded = 0, start_stop = 0;
    size_t events = 0;
    int64_t n = 0;
    using Clock = std::chrono::steady_clock;
    const auto seconds_since = [](Clock::time_point start) {
      return std::chrono::duration<double>(Clock::now() - start).count();
    };
    const auto timed = [&](bool record) {
      if (record) {
        const auto start = Clock::now();
        trace.start(mode == Mode::traced);
        start_stop += seconds_since(start);
      }
      const auto start = Clock::now();
      for (int i = 0; i < kBlock; ++i) step().item();
      (record ? recorded : plain) += seconds_since(start);
      if (record) {
        const auto stop = Clock::now();
        trace.stop();
        start_stop += seconds_since(stop);
        events += trace.events().size();
      }
    };
    for (auto _ : state) {
      timed(n % 2 == 0);
      timed(n % 2 != 0);
      ++n;
    }
    const double steps = static_cast<double>(n * kBlock);
    state.counters["plain_ms"] = 1e3 * plain / steps;
    state.counters["traced_ms"] = 1e3 * recorded / steps;
    state.counters["overhead%"] = 100 * (recorded / plain - 1);
    state.counters["ranges/step"] = static_cast<double>(events) / steps;
    state.counters["start_stop_ms"] = 1e3 * start_stop / static_cast<double>(n);
    return;
  }
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(c.batch * c.seq),
                                                  benchmark::Counter::kIsIterationInvariantRate);
  // The model's FLOPs (train/mfu.hpp), and MFU where the device's peak is known (GPUs).
  const double flops =
      train::gpt_flops_per_token(config, c.seq) * static_cast<double>(c.batch * c.seq);
  state.counters["TFLOP/s"] =
      benchmark::Counter(flops / 1e12, benchmark::Counter::kIsIterationInvariantRate);
  if (const auto peak = train::peak_flops(device, precision)) {
    state.counters["MFU%"] =
        benchmark::Counter(100 * flops / *peak, benchmark::Counter::kIsIterationInvariantRate);
  }
}

void register_all(Device device, const std::string& prefix, const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    for (nn::Precision p : {nn::Precision::f32, nn::Precision::bf16}) {
      // "<prefix><group>_<precision>/<who><model>/T:<seq>/batch:<batch>"
      const auto add = [&](const char* group, const char* who, Mode mode) {
        bench::register_ms(fmt::format("{}{}_{}/{}{}/T:{}/batch:{}", prefix, group,
                                       nn::precision_name(p), who, c.model, c.seq, c.batch),
                           gpt2_step, device, c, p, mode);
      };
      add("gpt2", "ember/", Mode::plain);
      if (device.is_cuda()) add("gpt2_graph", "ember/", Mode::graph);
      if (c.model != "small" || c.seq > 256) continue;
      // The trace's overhead: the same step with and without a trace recording.
      add("gpt2_trace_overhead", "", Mode::traced);
      if (device.is_cuda()) add("gpt2_trace_overhead_host_only", "", Mode::traced_host);
    }
  }
}

// An op's range with no trace recording and no NVTX tool attached (what every op pays when
// tracing is off), and with a trace recording.
void op_range(benchmark::State& state, bool recording) {
  profile::Trace trace;
  if (recording) trace.start();
  for (auto _ : state) {
    EMBER_OP_RANGE("op");
    benchmark::ClobberMemory();
  }
  if (recording) trace.stop();
}

}  // namespace

int main(int argc, char** argv) {
  // d12 on the CPU: one sequence per step (seconds each); filter with --benchmark_filter.
  register_all(Device::cpu(), "cpu_",
               {{"small", 128, 16},
                {"small", 256, 8},
                {"small", 1024, 2},
                {"d12", 256, 1},
                {"d12", 1024, 1}});
  benchmark::RegisterBenchmark("op_range/off", op_range, false);
  benchmark::RegisterBenchmark("op_range/recording", op_range, true)->Iterations(200000);
  if (bench::gpu_usable()) {
    register_all(Device::cuda(0), "cuda_",
                 {{"small", 256, 32}, {"small", 1024, 8}, {"d12", 256, 32}, {"d12", 1024, 8}});
  }
  return ember::bench::run_with_ratios(argc, argv, {},
                                       {{"cpu_gpt2_bf16", "cpu_gpt2_f32"},
                                        {"cuda_gpt2_bf16", "cuda_gpt2_f32"},
                                        {"cuda_gpt2_graph_f32", "cuda_gpt2_f32"},
                                        {"cuda_gpt2_graph_bf16", "cuda_gpt2_bf16"}});
}
