// memory_snapshot_svg: draws a CachingAllocator snapshot (CachingAllocator::snapshot(), saved to
// a file, or the allocator's EMBER_OOM_SNAPSHOT) as an SVG picture: one row per segment, each
// block colored by state, sizes in the tooltips (memory::snapshot_svg). With --trace, memory over
// time of a replayed allocation trace (memory::timeline_svg).
//
//   memory_snapshot_svg snapshot.json -o snapshot.svg
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "ember/core/error.hpp"
#include "ember/memory/config.hpp"
#include "ember/memory/replay.hpp"
#include "ember/memory/snapshot_svg.hpp"
#include "ember/memory/trace.hpp"

namespace {

std::string mib(uint64_t bytes) {
  char out[32];
  std::snprintf(out, sizeof out, "%.2f MiB", static_cast<double>(bytes) / (1 << 20));
  return out;
}

// memory_snapshot_svg --trace: replays the trace and writes the timeline.
int draw_trace(const std::string& path, std::string output, std::string title,
               const std::string& conf) {
  using namespace ember::memory;
  try {
    const AllocatorConfig config = conf.empty() ? AllocatorConfig{} : parse_allocator_config(conf);
    const std::vector<TraceEvent> events = read_trace(path);
    std::vector<MemoryPoint> points;
    points.reserve(events.size());
    const ReplayResult result = replay(events, config, 0, PhysicalGranularity::map_call, &points);
    if (output.empty()) {
      std::string stem = path;
      for (const char* suffix : {".gz", ".trace"}) {
        if (stem.ends_with(suffix)) stem.resize(stem.size() - std::string_view(suffix).size());
      }
      output = stem + ".svg";
    }
    if (title.empty()) title = path.substr(path.find_last_of('/') + 1);
    std::ofstream out(output, std::ios::binary);
    out << timeline_svg(points, title, "ember allocator: " + to_string(config));
    out.close();
    if (!out) {
      std::fprintf(stderr, "memory_snapshot_svg: cannot write '%s'; check the directory\n",
                   output.c_str());
      return 1;
    }
    std::printf("wrote %s: %zu events, peak requested %s, peak reserved %s\n", output.c_str(),
                points.size(), mib(result.peak_requested).c_str(),
                mib(result.peak_reserved).c_str());
    if (!result.completed) {
      std::fprintf(stderr,
                   "memory_snapshot_svg: the replay stopped after %zu of %zu events (drawn up to "
                   "there): %s\n",
                   result.events_applied, events.size(), result.failure.c_str());
      return 1;
    }
    return 0;
  } catch (const ember::Error& e) {
    std::fprintf(stderr, "memory_snapshot_svg: %s\n", e.message().c_str());
    return 1;
  }
}

void usage(std::FILE* out) {
  std::fprintf(
      out,
      "usage: memory_snapshot_svg SNAPSHOT.json [-o OUT.svg] [--title TEXT] "
      "[--scale segment|global]\n"
      "Draws a CachingAllocator::snapshot() JSON file as an SVG: one row per segment,\n"
      "blocks colored allocated (blue), fragmented = free in a segment that holds\n"
      "allocated blocks (orange), free = an entirely free cached segment (green),\n"
      "inactive = freed, waiting for stream events (purple), unmapped = a hole of an\n"
      "expandable segment, no memory behind it (hatched grey gap); sizes in the tooltips.\n"
      "  -o OUT.svg      output file (default: SNAPSHOT with .svg in place of .json)\n"
      "  --title TEXT    the picture's title (default: the snapshot's file name)\n"
      "  --scale S       segment: every row full width (default); global: rows to scale\n"
      "       memory_snapshot_svg --trace TRACE[.gz] [-o OUT.svg] [--title TEXT] [--conf "
      "key:value,...]\n"
      "Replays an allocation trace (record_allocations) through ember's allocator (config as\n"
      "EMBER_ALLOC_CONF) and draws memory over time: requested, allocated and reserved bytes.\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::string input, output, title, trace, conf;
  bool global_scale = false;
  std::vector<std::string_view> args(argv + 1, argv + argc);
  if (args.empty()) {
    usage(stderr);
    return 2;
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string_view arg = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) {
        std::fprintf(stderr, "memory_snapshot_svg: %.*s needs a value\n",
                     static_cast<int>(arg.size()), arg.data());
        std::exit(2);
      }
      return std::string(args[++i]);
    };
    if (arg == "--help" || arg == "-h") {
      usage(stdout);
      return 0;
    } else if (arg == "-o" || arg == "--output") {
      output = value();
    } else if (arg == "--title") {
      title = value();
    } else if (arg == "--trace") {
      trace = value();
      if (trace.empty()) {
        std::fprintf(stderr, "memory_snapshot_svg: --trace needs a trace file, not ''\n");
        return 2;
      }
    } else if (arg == "--conf") {
      conf = value();
    } else if (arg == "--scale") {
      const std::string scale = value();
      if (scale != "segment" && scale != "global") {
        std::fprintf(stderr, "memory_snapshot_svg: --scale needs 'segment' or 'global', not '%s'\n",
                     scale.c_str());
        return 2;
      }
      global_scale = scale == "global";
    } else if (arg.starts_with("-")) {
      std::fprintf(stderr, "memory_snapshot_svg: unknown option '%.*s'; see --help\n",
                   static_cast<int>(arg.size()), arg.data());
      return 2;
    } else if (input.empty()) {
      input = std::string(arg);
    } else {
      std::fprintf(stderr,
                   "memory_snapshot_svg: expected one snapshot file, found a second: '%.*s'\n",
                   static_cast<int>(arg.size()), arg.data());
      return 2;
    }
  }
  if (trace.empty() && !conf.empty()) {
    std::fprintf(stderr,
                 "memory_snapshot_svg: --conf configures the replay of --trace; give a "
                 "trace\n");
    return 2;
  }
  if (!trace.empty()) {
    if (!input.empty()) {
      std::fprintf(stderr, "memory_snapshot_svg: give a snapshot or --trace, not both\n");
      return 2;
    }
    return draw_trace(trace, output, title, conf);
  }
  if (input.empty()) {
    std::fprintf(stderr, "memory_snapshot_svg: expected a snapshot file; see --help\n");
    return 2;
  }
  if (output.empty()) {
    output = input.ends_with(".json") ? input.substr(0, input.size() - 5) : input;
    output += ".svg";
  }
  if (title.empty()) title = input.substr(input.find_last_of('/') + 1);

  struct stat info {};
  if (::stat(input.c_str(), &info) == 0 && !S_ISREG(info.st_mode)) {
    std::fprintf(stderr,
                 "memory_snapshot_svg: '%s' is not a regular file (a directory, FIFO or "
                 "device); expected a snapshot JSON file\n",
                 input.c_str());
    return 1;
  }
  std::ifstream in(input, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "memory_snapshot_svg: cannot open '%s'; check the path\n", input.c_str());
    return 1;
  }
  std::ostringstream text;
  text << in.rdbuf();
  std::string svg;
  try {
    svg = ember::memory::snapshot_svg(text.str(), title, global_scale);
  } catch (const ember::Error& e) {
    const bool json = e.message().starts_with("not valid JSON");
    std::fprintf(stderr, "memory_snapshot_svg: '%s' is %s%s\n", input.c_str(), e.message().c_str(),
                 json ? "" : "; write it with CachingAllocator::snapshot()");
    return 1;
  }
  std::ofstream out(output, std::ios::binary);
  out << svg;
  out.close();
  if (!out) {
    std::fprintf(stderr, "memory_snapshot_svg: cannot write '%s'; check the directory\n",
                 output.c_str());
    return 1;
  }
  size_t segments = 0, blocks = 0;
  for (size_t at = 0; (at = svg.find("<rect class=\"segment\"", at)) != std::string::npos; ++at) {
    ++segments;
  }
  for (size_t at = 0; (at = svg.find("<rect class=\"block ", at)) != std::string::npos; ++at) {
    ++blocks;
  }
  std::printf("wrote %s: %zu segments, %zu blocks\n", output.c_str(), segments, blocks);
  return 0;
}
