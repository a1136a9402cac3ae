// bench_allocator: the CachingAllocator's speed and memory efficiency.
//
//   bench_allocator --trace FILE [--capacity BYTES] [--conf key:value,...]
//                   [--no-compare-pytorch] [--no-smallest] [--repetitions N]
//                   [--physical map-call|page] [--device cuda:N]
//   bench_allocator --all [DIR]          every trace of both categories, or of DIR: "shared"
//                                        (../shared/traces) and "checkpointed variable shape"
//                                        (benchmarks/traces/checkpointed_varlen, recorded by
//                                        benchmarks/traces/record_gpt2_varlen.sh)
//   bench_allocator --micro [--benchmark_...]   Google Benchmark microbenchmarks
//
// Trace mode replays an allocation trace (docs/allocation_traces.md) over
// simulated upstreams (address ranges, no memory; 2 MiB pages; physical memory
// as the CUDA driver hands it out: one allocation per map call, freed only
// whole, unless --physical page) and prints the
// figures of docs/allocation_traces.md for ember's configuration and, unless --no-compare-pytorch,
// for PyTorch's default policy and for PyTorch's policy with expandable
// segments, side by side with the ratios ember / PyTorch.
//
// "PyTorch's default policy" is pytorch_default_policy() (config.hpp): the
// constants of c10/cuda/CUDACachingAllocator.cpp - 512-byte rounding
// (kMinBlockSize), requests <= 1 MiB (kSmallSize) from 2 MiB segments
// (kSmallBuffer), requests < 10 MiB (kMinLargeAlloc) from 20 MiB segments
// (kLargeBuffer), larger ones in segments rounded up to 2 MiB (kRoundLarge);
// no max_split_size, no roundup_power2_divisions, no garbage collection, no
// expandable segments. "PyTorch expandable" is the same with
// expandable_segments:true (2 MiB pages). Both are ember's allocator run
// with those settings: a model of PyTorch's placement policy, not PyTorch.
//
// Microbenchmark mode times a cached malloc+free pair (single thread, cache
// hit: the block is in the cache before the timed loop) for ember's
// CachingAllocator and for the C library's malloc/free, and prints the median
// of the repetitions and the ratio between them.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "allocator_device_replay.hpp"
#include "ember/core/device.hpp"
#include "ember/core/error.hpp"
#include "ember/memory/caching_allocator.hpp"
#include "ember/memory/config.hpp"
#include "ember/memory/replay.hpp"
#include "ember/memory/simulated_upstream.hpp"
#include "ember/memory/trace.hpp"

namespace {

using namespace ember::memory;
constexpr double kMiB = 1024.0 * 1024.0;

// ---- microbenchmarks -----------------------------------------------------------

void BM_PairEmber(benchmark::State& state) {
  const auto bytes = static_cast<size_t>(state.range(0));
  CachingAllocator allocator(
      std::make_shared<SimulatedUpstream>(size_t{1} << 34),
      std::make_shared<SimulatedVirtualUpstream>(size_t{2} << 20, size_t{1} << 34));
  allocator.free(allocator.allocate(bytes, 0));  // now cached
  for (auto _ : state) {
    void* ptr = allocator.allocate(bytes, 0);
    benchmark::DoNotOptimize(ptr);
    allocator.free(ptr);
  }
  if (allocator.stats().segment_allocs > 1) state.SkipWithError("not a cache hit");
}

void BM_PairMalloc(benchmark::State& state) {
  const auto bytes = static_cast<size_t>(state.range(0));
  std::free(std::malloc(bytes));
  for (auto _ : state) {
    void* ptr = std::malloc(bytes);
    benchmark::DoNotOptimize(ptr);
    std::free(ptr);
  }
}

void register_microbenchmarks() {
  for (const int64_t bytes : {int64_t{512}, int64_t{4096}, int64_t{1} << 20, int64_t{16} << 20}) {
    for (auto [who, fn] :
         {std::pair{"ember", &BM_PairEmber}, std::pair{"malloc", &BM_PairMalloc}}) {
      std::string name = "malloc_free_pair/";
      name.append(who).append("/").append(std::to_string(bytes));
      benchmark::RegisterBenchmark(name.c_str(), fn)
          ->Arg(bytes)
          ->Repetitions(9)
          ->ReportAggregatesOnly(true);
    }
  }
}

// Like ratio_reporter.hpp's RatioReporter, but over the medians of the repetitions.
class MedianRatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      if (run.run_type == Run::RT_Aggregate && run.aggregate_name == "median" &&
          !run.error_occurred) {
        seconds_[run.run_name.function_name] = run.GetAdjustedRealTime();
      }
    }
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    std::printf("\nmedian ns per cached malloc+free pair (single thread), same run\n");
    std::printf("  %-34s %10s %10s %8s\n", "benchmark", "ember", "malloc", "speedup");
    double worst = 0;
    for (const auto& [name, ns] : seconds_) {
      const size_t at = name.find("/ember/");
      if (at == std::string::npos) continue;
      std::string other = name;
      other.replace(at, 7, "/malloc/");
      const auto it = seconds_.find(other);
      if (it == seconds_.end()) continue;
      std::printf("  %-34s %10.1f %10.1f %8.3f\n", name.c_str(), ns, it->second, it->second / ns);
      worst = std::max(worst, ns);
    }
    std::printf("goal: median <= 100 ns per cached pair; slowest ember size: %.1f ns (%s)\n", worst,
                worst <= 100 ? "met" : "NOT met");
  }

 private:
  std::map<std::string, double> seconds_;  // ns: the benchmarks report in nanoseconds
};

int run_microbenchmarks(int argc, char** argv) {
  register_microbenchmarks();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  MedianRatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}

// ---- trace mode -----------------------------------------------------------------

struct TraceFile {
  std::string path;
  std::string category;  // "" for --trace
};

struct Options {
  std::vector<TraceFile> traces;
  size_t capacity = 0;
  AllocatorConfig config;
  std::string conf_text = "(defaults)";
  bool compare_pytorch = true;
  bool smallest = true;
  int repetitions = 5;
  PhysicalGranularity physical = PhysicalGranularity::map_call;
  int device = -1;  // --device cuda:N: replay through the real upstreams
  bool repetitions_given = false;
};

struct Column {
  std::string name;
  AllocatorConfig config;
  ReplayResult unlimited;
  ReplayResult limited;  // only with --capacity
  double ns_per_pair = 0;
  size_t smallest = 0;
  CapacitySearch search;
  ReplayResult at_smallest;  // replayed within `smallest`
};

std::string mib(uint64_t bytes) {
  char out[32];
  std::snprintf(out, sizeof out, "%.1f MiB", static_cast<double>(bytes) / kMiB);
  return out;
}

void print_row(const char* label, const std::vector<Column>& columns,
               const auto& value /* (const Column&) -> std::string */) {
  std::printf("  %-34s", label);
  for (const Column& c : columns) std::printf(" %16s", value(c).c_str());
  std::printf("\n");
}

std::string fmt_double(double value, const char* format = "%.3f") {
  char out[32];
  std::snprintf(out, sizeof out, format, value);
  return out;
}

// One trace's figures for the summary at the end.
struct Summary {
  std::string trace, category;
  double reserved[3] = {0, 0, 0};  // ember, pytorch, pytorch+expand.: reserved / requested
  double smallest[3] = {0, 0, 0};  // smallest capacity / peak requested
  int64_t calls[3] = {0, 0, 0};    // upstream calls (segment allocations + map calls)
  bool complete = false;           // every column and figure below was computed
  bool pytorch = false, smallest_computed = false;
};

int run_trace(const std::string& path, const Options& options, Summary& summary) {
  const auto events = read_trace(path);
  size_t allocations = 0;
  for (const TraceEvent& e : events) allocations += e.kind == TraceEvent::allocate;

  std::vector<Column> columns;
  columns.push_back({"ember", options.config, {}, {}, 0, 0, {}, {}});
  if (options.compare_pytorch) {
    AllocatorConfig pytorch = pytorch_default_policy();
    columns.push_back({"pytorch", pytorch, {}, {}, 0, 0, {}, {}});
    pytorch.expandable_segments = true;
    columns.push_back({"pytorch+expand.", pytorch, {}, {}, 0, 0, {}, {}});
  }
  bool all_completed = true;
  for (Column& c : columns) {
    c.unlimited = replay(events, c.config, 0, options.physical);
    if (options.capacity != 0)
      c.limited = replay(events, c.config, options.capacity, options.physical);
    // A trace that does not complete even without a limit keeps the figures of the events
    // that did run; the timing and the capacity search need the whole trace.
    if (!c.unlimited.completed) {
      all_completed = false;
      continue;
    }
    c.ns_per_pair = replay_ns_per_pair(events, c.config, options.repetitions);
    if (options.smallest) {
      c.smallest = smallest_capacity(events, c.config, &c.search, options.physical);
      c.at_smallest = replay(events, c.config, c.smallest, options.physical);
    }
  }

  std::printf("\ntrace %s: %zu events, %zu allocations\n", path.c_str(), events.size(),
              allocations);
  std::printf("  ember config: %s\n", to_string(options.config).c_str());
  std::printf("  physical memory: %s\n",
              options.physical == PhysicalGranularity::map_call
                  ? "one allocation per map call, freed only whole (the CUDA driver's rules)"
                  : "page-granular (OPTIMISTIC: every unmapped page is freed; not a GPU)");
  std::printf("  %-34s", "");
  for (const Column& c : columns) std::printf(" %16s", c.name.c_str());
  std::printf("\n");
  const auto bytes = [](uint64_t v) { return mib(v); };
  print_row("peak requested", columns,
            [&](const Column& c) { return bytes(c.unlimited.peak_requested); });
  print_row("peak allocated", columns,
            [&](const Column& c) { return bytes(c.unlimited.peak_allocated); });
  print_row("peak reserved", columns,
            [&](const Column& c) { return bytes(c.unlimited.peak_reserved); });
  print_row("reserved / requested (ratio)", columns,
            [](const Column& c) { return fmt_double(c.unlimited.ratio); });
  print_row("ext. fragmentation @peak requested", columns, [](const Column& c) {
    return fmt_double(c.unlimited.fragmentation_at_peak_requested);
  });
  print_row("ext. fragmentation @peak reserved", columns,
            [](const Column& c) { return fmt_double(c.unlimited.fragmentation_at_peak_reserved); });
  // A count of the replay without a limit: `count` is a field of ReplayResult or a method.
  const auto count_row = [&](const char* label, auto count) {
    print_row(label, columns,
              [&](const Column& c) { return std::to_string(std::invoke(count, c.unlimited)); });
  };
  count_row("segment allocations", &ReplayResult::segment_allocs);
  count_row("segment frees", &ReplayResult::segment_frees);
  count_row("page maps (calls)", &ReplayResult::page_maps);
  count_row("pages mapped (2 MiB)", &ReplayResult::pages_mapped);
  count_row("page unmaps (calls)", &ReplayResult::page_unmaps);
  count_row("physical allocations", &ReplayResult::physical_allocations);
  // The comparable count: one segment allocation or one map call is one physical
  // allocation upstream (cudaMalloc; cuMemCreate for an upstream that backs a map
  // call with one handle). "pages mapped" counts 2 MiB pages.
  count_row("upstream calls (seg allocs + maps)", &ReplayResult::upstream_acquisitions);
  count_row("upstream calls (all)", &ReplayResult::upstream_calls);
  count_row("retries", &ReplayResult::retries);
  const auto unless_incomplete = [](const Column& c, const std::string& text) {
    return c.unlimited.completed ? text : std::string("n/a");
  };
  print_row("ns per malloc+free (median)", columns, [&](const Column& c) {
    return unless_incomplete(c, fmt_double(c.ns_per_pair, "%.1f"));
  });
  if (options.smallest) {
    print_row("smallest capacity (2 MiB steps)", columns,
              [&](const Column& c) { return unless_incomplete(c, bytes(c.smallest)); });
    print_row("smallest capacity / peak requested", columns, [&](const Column& c) {
      return unless_incomplete(c, fmt_double(static_cast<double>(c.smallest) /
                                             static_cast<double>(c.unlimited.peak_requested)));
    });
    print_row("  seg allocs + maps within it", columns, [&](const Column& c) {
      return unless_incomplete(c, std::to_string(c.at_smallest.upstream_acquisitions()));
    });
    print_row("  unmaps within it (calls)", columns, [&](const Column& c) {
      return unless_incomplete(c, std::to_string(c.at_smallest.page_unmaps));
    });
    print_row("  physical allocations within it", columns, [&](const Column& c) {
      return unless_incomplete(c, std::to_string(c.at_smallest.physical_allocations));
    });
    print_row("  peak physical within it", columns, [&](const Column& c) {
      return unless_incomplete(c, bytes(c.at_smallest.peak_backed));
    });
    print_row("  replays in the search", columns, [](const Column& c) {
      return std::to_string(c.search.replays) + (c.search.non_monotonic ? " (non-monotonic)" : "");
    });
  }
  if (options.capacity != 0) {
    const std::string label = "completes within " + mib(options.capacity);
    print_row(label.c_str(), columns, [](const Column& c) {
      return c.limited.completed
                 ? std::string("yes")
                 : "no (event " + std::to_string(c.limited.events_applied + 1) + ")";
    });
    print_row("  retries within capacity", columns,
              [](const Column& c) { return std::to_string(c.limited.retries); });
  }
  if (columns.size() == 3 && all_completed) {
    for (size_t i = 1; i < columns.size(); ++i) {  // pytorch, pytorch+expand.
      const Column& pytorch = columns[i];
      std::printf(
          "  ember / %s: reserved %.3f, smallest capacity %.3f, upstream calls %.3f\n",
          pytorch.name.c_str(),
          static_cast<double>(columns[0].unlimited.peak_reserved) / pytorch.unlimited.peak_reserved,
          options.smallest ? static_cast<double>(columns[0].smallest) / pytorch.smallest : 0.0,
          static_cast<double>(columns[0].unlimited.upstream_acquisitions()) /
              std::max<int64_t>(1, pytorch.unlimited.upstream_acquisitions()));
    }
  }
  summary.trace = std::filesystem::path(path).filename().string();
  summary.complete = all_completed && columns.size() == 3 && options.smallest;
  summary.pytorch = columns.size() == 3;
  summary.smallest_computed = options.smallest;
  for (size_t i = 0; i < columns.size(); ++i) {
    const double requested = static_cast<double>(columns[i].unlimited.peak_requested);
    summary.reserved[i] = columns[i].unlimited.ratio;
    summary.smallest[i] = requested > 0 ? static_cast<double>(columns[i].smallest) / requested : 0;
    summary.calls[i] = columns[i].unlimited.upstream_acquisitions();
  }
  if (options.capacity != 0 && !columns[0].limited.completed) {
    std::printf("  ember ran out of memory within %s: %s\n", mib(options.capacity).c_str(),
                columns[0].limited.failure.c_str());
  }
  for (const Column& c : columns) {
    if (c.unlimited.completed) continue;
    std::printf(
        "  %s: the trace does not complete even without a capacity limit (%zu of %zu "
        "events ran; the figures above cover those): %s\n",
        c.name.c_str(), static_cast<size_t>(c.unlimited.events_applied), events.size(),
        c.unlimited.failure.c_str());
  }
  return all_completed ? 0 : 1;
}

void usage(std::FILE* out) {
  std::fprintf(
      out,
      "usage: bench_allocator --trace FILE [--capacity BYTES] [--conf key:value,...]\n"
      "                       [--no-compare-pytorch] [--no-smallest] [--repetitions N]\n"
      "                       [--physical map-call|page]\n"
      "       bench_allocator --all [DIR] [same options]\n"
      "       bench_allocator --micro [--benchmark_filter=... and other Google Benchmark flags]\n"
      "Replays allocation traces (docs/allocation_traces.md; .gz read through gzip) over\n"
      "simulated upstreams and prints peak requested/allocated/reserved, reserved/requested,\n"
      "external fragmentation, upstream calls, retries, ns per malloc+free, and the smallest\n"
      "capacity (2 MiB steps) the trace completes in; for ember's config (--conf, default\n"
      "EMBER_ALLOC_CONF or the defaults), PyTorch's default policy and PyTorch's policy with\n"
      "expandable segments.\n"
      "  --trace FILE          a trace (repeatable)\n"
      "  --all [DIR]           every *.trace and *.trace.gz in DIR (default: both categories, the\n"
      "                        shared traces and benchmarks/traces/checkpointed_varlen), then a\n"
      "                        summary\n"
      "  --capacity BYTES      also replay within this many bytes (suffixes K, M, G, KiB, MiB, "
      "GiB)\n"
      "  --conf TEXT           ember's config, as EMBER_ALLOC_CONF (e.g. max_split_size_mb:64)\n"
      "  --no-compare-pytorch  ember's config only\n"
      "  --no-smallest         skip the smallest-capacity search\n"
      "  --physical MODEL      map-call (default: one physical allocation per map call,\n"
      "                        freed only whole, as the CUDA driver does) or page (optimistic:\n"
      "                        every unmapped page is freed at once; for comparison only)\n"
      "  --repetitions N       replays timed for ns per malloc+free (median; default 5)\n"
      "  --device cuda:N       replay on that GPU through the real upstreams (cudaMalloc;\n"
      "                        cuMemCreate/cuMemMap), timing each kind of upstream call; the\n"
      "                        smallest capacity is searched as a budget (max_reserved)\n"
      "  --micro               microbenchmarks: cached malloc+free pair, ember vs malloc\n");
}

[[noreturn]] void bad_arguments(const std::string& message) {
  std::fprintf(stderr, "bench_allocator: %s; see --help\n", message.c_str());
  std::exit(2);
}

size_t parse_bytes(std::string_view text) {
  uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  const std::string_view suffix(end, static_cast<size_t>(text.data() + text.size() - end));
  uint64_t unit = 0;
  if (suffix.empty() || suffix == "B")
    unit = 1;
  else if (suffix == "K" || suffix == "KiB")
    unit = uint64_t{1} << 10;
  else if (suffix == "M" || suffix == "MiB")
    unit = uint64_t{1} << 20;
  else if (suffix == "G" || suffix == "GiB")
    unit = uint64_t{1} << 30;
  if (ec != std::errc() || unit == 0 || value == 0)
    bad_arguments("--capacity needs a positive byte count such as 17179869184 or 16GiB, not '" +
                  std::string(text) + "'");
  if (value > std::numeric_limits<uint64_t>::max() / unit)
    bad_arguments("--capacity '" + std::string(text) + "' is more than 2^64 bytes");
  return value * unit;
}

std::string default_trace_dir(const char* argv0) {
  // <build>/benchmarks/bench_allocator -> <source>/../shared/traces is not known
  // here; try the usual places: $EMBER_TRACES, ../shared/traces from the working
  // directory and from the source tree this was built from.
  if (const char* env = std::getenv("EMBER_TRACES")) return env;
  for (const std::string& candidate :
       {std::string(EMBER_SOURCE_DIR) + "/../shared/traces", std::string("../shared/traces")}) {
    if (std::filesystem::is_directory(candidate)) return candidate;
  }
  (void)argv0;
  return std::string(EMBER_SOURCE_DIR) + "/../shared/traces";
}

// The category of the traces in `dir`: its name, or the checkpointed traces' own.
std::string category_of(const std::string& dir) {
  std::filesystem::path p(dir);
  if (!p.has_filename()) p = p.parent_path();  // "traces/"
  const std::string name = p.filename().string();
  return name == "checkpointed_varlen" ? "checkpointed variable shape" : name;
}

// Every *.trace and *.trace.gz in `dir`, as `category`; `required`: a missing or empty directory
// is a usage error (else it is skipped).
void add_directory(Options& options, const std::string& dir, const std::string& category,
                   bool required) {
  if (!std::filesystem::is_directory(dir)) {
    if (required)
      bad_arguments("--all: '" + dir + "' is not a directory; pass the traces' directory");
    return;
  }
  std::vector<std::string> found;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().string();
    if (name.ends_with(".trace") || name.ends_with(".trace.gz")) found.push_back(name);
  }
  if (found.empty() && required)
    bad_arguments("--all: no *.trace or *.trace.gz files in '" + dir + "'");
  std::sort(found.begin(), found.end());
  for (const std::string& path : found) options.traces.push_back({path, category});
}

// One line per trace, by category. The checkpointed variable-shape traces have goals (the
// allocator issue): reserved <= 1.03 and smallest capacity <= 1.02 x peak requested, each at least
// 0.02 below PyTorch's policy with expandable segments.
void print_summary(const std::vector<Summary>& summaries) {
  std::printf(
      "\nsummary (reserved / requested; smallest capacity / peak requested; upstream calls)\n");
  std::printf("  %-46s %8s %8s %8s   %8s %8s %8s   %6s %7s  %s\n", "trace", "ember", "pytorch",
              "pt+exp.", "ember", "pytorch", "pt+exp.", "ember", "pt+exp.",
              "goals: <= 1.03 and 1.02; 0.02 below pt+exp.");
  std::string category = "-";
  for (const Summary& s : summaries) {
    if (s.category != category) {
      category = s.category;
      std::printf("  [%s]\n", category.empty() ? "traces" : category.c_str());
    }
    std::string goals = "-";
    if (s.category == "checkpointed variable shape" && s.complete) {
      const bool bounds = s.reserved[0] <= 1.03 && s.smallest[0] <= 1.02;
      const bool below =
          s.reserved[0] <= s.reserved[2] - 0.02 && s.smallest[0] <= s.smallest[2] - 0.02;
      goals = std::string(bounds ? "met" : "NOT MET") + ", " + (below ? "met" : "not met");
    }
    // "-" for what was not computed (--no-smallest, --no-compare-pytorch).
    auto cell = [](double v, bool present) { return present ? fmt_double(v) : std::string("-"); };
    const bool pt = s.pytorch, sm = s.smallest_computed;
    std::printf("  %-46s %8s %8s %8s   %8s %8s %8s   %6lld %7s  %s\n", s.trace.c_str(),
                cell(s.reserved[0], true).c_str(), cell(s.reserved[1], pt).c_str(),
                cell(s.reserved[2], pt).c_str(), cell(s.smallest[0], sm).c_str(),
                cell(s.smallest[1], sm && pt).c_str(), cell(s.smallest[2], sm && pt).c_str(),
                static_cast<long long>(s.calls[0]), pt ? std::to_string(s.calls[2]).c_str() : "-",
                goals.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string_view> args(argv + 1, argv + argc);
  if (args.empty()) {
    usage(stdout);
    return 0;
  }
  const bool micro = std::any_of(args.begin(), args.end(), [](std::string_view a) {
    return a == "--micro" || a.starts_with("--benchmark_");
  });
  if (micro) {
    std::vector<char*> rest = {argv[0]};
    for (int i = 1; i < argc; ++i)
      if (std::string_view(argv[i]) != "--micro") rest.push_back(argv[i]);
    int rest_argc = static_cast<int>(rest.size());
    return run_microbenchmarks(rest_argc, rest.data());
  }

  Options options;
  try {
    options.config = allocator_config_from_env();
    if (std::getenv("EMBER_ALLOC_CONF") != nullptr)
      options.conf_text = std::getenv("EMBER_ALLOC_CONF");
  } catch (const ember::Error& e) {
    bad_arguments(e.message());
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string_view arg = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size() || args[i + 1].starts_with("--"))
        bad_arguments(std::string(arg) + " needs a value");
      return std::string(args[++i]);
    };
    if (arg == "--help" || arg == "-h") {
      usage(stdout);
      return 0;
    } else if (arg == "--trace") {
      options.traces.push_back({value(), ""});
    } else if (arg == "--all") {
      if (i + 1 < args.size() && !args[i + 1].starts_with("--")) {
        const std::string dir(args[++i]);
        add_directory(options, dir, category_of(dir), true);
      } else {
        add_directory(options, default_trace_dir(argv[0]), "shared", false);
        add_directory(options,
                      std::string(EMBER_SOURCE_DIR) + "/benchmarks/traces/checkpointed_varlen",
                      "checkpointed variable shape", false);
        if (options.traces.empty())
          bad_arguments(
              "--all: no traces found in ../shared/traces or "
              "benchmarks/traces/checkpointed_varlen; pass the traces' directory");
      }
    } else if (arg == "--capacity") {
      options.capacity = parse_bytes(value());
    } else if (arg == "--conf") {
      options.conf_text = value();
      try {
        options.config = parse_allocator_config(options.conf_text);
      } catch (const ember::Error& e) {
        bad_arguments("--conf: " + e.message());
      }
    } else if (arg == "--compare-pytorch") {
      options.compare_pytorch = true;
    } else if (arg == "--no-compare-pytorch") {
      options.compare_pytorch = false;
    } else if (arg == "--physical") {
      const std::string model = value();
      if (model == "map-call")
        options.physical = PhysicalGranularity::map_call;
      else if (model == "page")
        options.physical = PhysicalGranularity::page;
      else
        bad_arguments("--physical needs 'map-call' or 'page', not '" + model + "'");
    } else if (arg == "--device") {
      const std::string text = value();
      try {
        const ember::Device device = ember::Device::parse(text);
        if (!device.is_cuda()) bad_arguments("--device needs cuda or cuda:N, not '" + text + "'");
        options.device = device.index();
      } catch (const ember::Error& e) {
        bad_arguments("--device: " + e.message());
      }
    } else if (arg == "--no-smallest") {
      options.smallest = false;
    } else if (arg == "--repetitions") {
      const std::string text = value();
      int n = 0;
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
      if (ec != std::errc() || end != text.data() + text.size() || n < 1)
        bad_arguments("--repetitions needs an integer >= 1, not '" + text + "'");
      options.repetitions = n;
      options.repetitions_given = true;
    } else {
      bad_arguments("unknown option '" + std::string(arg) + "'");
    }
  }
  if (options.traces.empty()) bad_arguments("expected --trace FILE, --all [DIR] or --micro");
  if (options.device >= 0 &&
      (options.capacity != 0 || options.physical != PhysicalGranularity::map_call ||
       options.repetitions_given)) {
    bad_arguments(
        "--capacity, --physical and --repetitions are for the simulated replay; with "
        "--device the device is the capacity (a budget: --conf max_reserved_mb:N)");
  }

  int status = 0;
  std::vector<Summary> summaries;
  for (const TraceFile& trace : options.traces) {
    Summary summary;
    summary.category = trace.category;
    try {
      if (options.device >= 0) {
        const bench::DeviceReplayOptions device{.device = options.device,
                                                .smallest = options.smallest,
                                                .compare_pytorch = options.compare_pytorch};
        status = std::max(status, bench::replay_on_device(trace.path, read_trace(trace.path),
                                                          options.config, device));
        continue;
      }
      status = std::max(status, run_trace(trace.path, options, summary));
      summaries.push_back(summary);
    } catch (const ember::Error& e) {  // this trace fails; the others still run
      std::fprintf(stderr, "bench_allocator: %s\n", e.message().c_str());
      status = 1;
    }
  }
  if (summaries.size() > 1) print_summary(summaries);
  return status;
}
