// bench_loader: how much of a training step waits for data, with data::Loader's workers.
//
//   bench_loader [--device cpu|cuda[:N]] [--decode-ms 2] [--step-ms 5] [--steps 200]
//                [--batch-mib 8]
//
// A deliberately slow producer (--decode-ms of CPU work per batch, as decoding or augmenting
// costs) feeds a training loop whose step takes --step-ms (the host busy for that long, as a
// CPU step is; on a GPU the step's kernels would run meanwhile). For 0, 1, 2 and 4 workers it
// prints the time next() waited as a fraction of the step time: with no worker every batch is
// made inside next(); with enough workers the wait is the hand-over alone (goal: under 1 % of
// the step). On a GPU it also times the loader's host-to-device copies (pinned buffers, its
// copy stream) against a plain copy of the same bytes from pinned memory in the same run
// (goal: 0.8 or more of it).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ember/core/error.hpp"
#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"
#include "ember/data/loader.hpp"
#include "ember/memory/pinned_host_upstream.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  ember::Device device = ember::Device::cpu();
  double decode_ms = 2, step_ms = 5;
  int steps = 200;
  double batch_mib = 8;
};

// Busy for `ms` milliseconds of this thread's time (decoding; a CPU step).
void spin(double ms) {
  const auto until = Clock::now() + std::chrono::duration<double, std::milli>(ms);
  volatile double sink = 0;
  while (Clock::now() < until) {
    for (int i = 0; i < 256; ++i) sink = sink + 1e-9;
  }
}

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr,
               "bench_loader: %s\nusage: bench_loader [--device D] [--decode-ms X] "
               "[--step-ms X] [--steps N] [--batch-mib X]\n",
               message.c_str());
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::printf(
          "usage: bench_loader [--device cpu|cuda[:N]] [--decode-ms 2] [--step-ms 5] "
          "[--steps 200] [--batch-mib 8]\n");
      std::exit(0);
    }
    if (i + 1 >= argc) usage_error(std::string(arg) + " needs a value");
    const std::string value = argv[++i];
    char* end = nullptr;
    const double number = std::strtod(value.c_str(), &end);
    const bool numeric = !value.empty() && *end == '\0' && std::isfinite(number) && number >= 0;
    const bool whole = numeric && number == std::floor(number) && number <= 1e7;
    if (arg == "--device") {
      try {
        o.device = ember::Device::parse(value);
      } catch (const ember::Error& e) {
        usage_error(e.message());
      }
    } else if (arg == "--decode-ms" && numeric) {
      o.decode_ms = number;
    } else if (arg == "--step-ms" && numeric) {
      o.step_ms = number;
    } else if (arg == "--steps" && whole && number >= 1) {
      o.steps = static_cast<int>(number);
    } else if (arg == "--batch-mib" && numeric && number > 0) {
      o.batch_mib = number;
    } else {
      usage_error(fmt::format("bad option or value: {} {}", arg, value));
    }
  }
  return o;
}

struct Run {
  double step_seconds = 0;  // the loop's wall time per step
  double wait_seconds = 0;  // next()'s waiting, per step
};

Run run(const Options& o, int workers) {
  const int64_t floats = std::max<int64_t>(1, static_cast<int64_t>(o.batch_mib * (1 << 20) / 4));
  ember::data::Loader loader({{ember::Shape{floats}, ember::DType::f32}},
                             [&](int64_t index, std::span<const ember::TensorView> host) {
                               spin(o.decode_ms);
                               auto* x = host[0].as<float>();
                               x[0] = static_cast<float>(index);
                             },
                             o.device, {.workers = workers, .prefetch = 2});
  ember::Stream stream(o.device);
  loader.next(stream);  // the workers start; the first batch is not timed
  const double waited_before = loader.wait_seconds();
  const auto start = Clock::now();
  double made_inline = 0;
  for (int s = 0; s < o.steps; ++s) {
    const auto before = Clock::now();
    loader.next(stream);
    if (workers == 0) made_inline += std::chrono::duration<double>(Clock::now() - before).count();
    spin(o.step_ms);
  }
  stream.synchronize();
  Run r;
  r.step_seconds = std::chrono::duration<double>(Clock::now() - start).count() / o.steps;
  // Without workers next() makes the batch itself: all of that is waiting for data.
  r.wait_seconds = (workers == 0 ? made_inline : loader.wait_seconds() - waited_before) / o.steps;
  return r;
}

// Host-to-device bytes per second: the loader's copies (producers that do nothing) against
// cudaMemcpyAsync-equivalent copies from one pinned buffer, in the same run.
void copy_rates(const Options& o) {
  const int64_t floats = std::max<int64_t>(1, static_cast<int64_t>(o.batch_mib * (1 << 20) / 4));
  const size_t bytes = static_cast<size_t>(floats) * 4;
  ember::Stream stream(o.device);
  const int n = 50;
  ember::data::Loader loader({{ember::Shape{floats}, ember::DType::f32}},
                             [](int64_t, std::span<const ember::TensorView>) {}, o.device,
                             {.workers = 2, .prefetch = 4});
  loader.next(stream);
  stream.synchronize();
  auto start = Clock::now();
  for (int i = 0; i < n; ++i) loader.next(stream);
  stream.synchronize();
  const double loader_rate =
      n * bytes / std::chrono::duration<double>(Clock::now() - start).count();

  ember::memory::PinnedHostUpstream pinned;
  void* host = pinned.allocate(bytes);
  EMBER_CHECK(host != nullptr, "cannot pin {} bytes", bytes);
  ember::Tensor device = ember::Tensor::empty({floats}, ember::DType::f32, stream);
  start = Clock::now();
  for (int i = 0; i < n; ++i) {
    ember::copy_bytes(device.data(), o.device, host, ember::Device::cpu(), bytes, stream);
  }
  stream.synchronize();
  const double plain_rate = n * bytes / std::chrono::duration<double>(Clock::now() - start).count();
  pinned.deallocate(host, bytes);
  std::printf(
      "\nhost-to-device, %.1f MiB batches: loader %.2f GB/s, plain pinned copy %.2f GB/s: "
      "ratio %.2f (goal: 0.8 or more)\n",
      o.batch_mib, loader_rate / 1e9, plain_rate / 1e9, loader_rate / plain_rate);
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  try {
    std::printf(
        "bench_loader on %s: a producer busy %.1f ms per batch of %.1f MiB, steps of %.1f "
        "ms, %d steps\n\n",
        o.device.to_string().c_str(), o.decode_ms, o.batch_mib, o.step_ms, o.steps);
    std::printf("  %-8s %12s %14s %16s\n", "workers", "ms/step", "data wait ms", "data wait %");
    for (const int workers : {0, 1, 2, 4}) {
      const Run r = run(o, workers);
      std::printf("  %-8d %12.2f %14.3f %15.2f%%\n", workers, 1e3 * r.step_seconds,
                  1e3 * r.wait_seconds, 100 * r.wait_seconds / r.step_seconds);
    }
    std::printf("goal: data wait under 1 %% of the step once the workers suffice\n");
    if (o.device.is_cuda()) copy_rates(o);
  } catch (const ember::Error& e) {
    std::fprintf(stderr, "bench_loader: %s\n", e.message().c_str());
    return 1;
  }
  return 0;
}
