// A Google Benchmark console reporter that, after the usual table, prints the
// ratio of each ember benchmark to its reference measured in the same run.
// Benchmarks pair up by name: "<group>/ember/<args>" against "<group>/<reference>/<args>" for
// each of the references (e.g. "blas" for the CPU groups, "cublas" for the GPU ones). Group
// pairs compare two of ember's own groups: {"cpu_bf16", "cpu_f32"} prints the speed of
// "cpu_bf16/ember/<args>" relative to "cpu_f32/ember/<args>".
#pragma once

#include <benchmark/benchmark.h>

#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace ember::bench {

class RatioReporter : public benchmark::ConsoleReporter {
 public:
  using GroupPair = std::pair<std::string, std::string>;
  explicit RatioReporter(std::vector<std::string> references, std::vector<GroupPair> groups = {})
      : references_(std::move(references)), groups_(std::move(groups)) {}

  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      if (run.run_type == Run::RT_Iteration && !run.error_occurred) {
        seconds_[run.benchmark_name()] = run.GetAdjustedRealTime();
        const auto memory = run.counters.find("step_MiB");
        if (memory != run.counters.end()) step_mib_[run.benchmark_name()] = memory->second.value;
      }
    }
  }

  void Finalize() override {
    ConsoleReporter::Finalize();
    const std::string ours = "/ember/";
    for (const std::string& reference : references_) {
      const std::string theirs = "/" + reference + "/";
      bool header = false;
      for (const auto& [name, time] : seconds_) {
        const size_t at = name.find(ours);
        if (at == std::string::npos) continue;
        std::string other = name;
        other.replace(at, ours.size(), theirs);
        const auto it = seconds_.find(other);
        if (it == seconds_.end()) continue;
        if (!header) {
          std::printf("\nspeed of ember relative to %s, same run (>1: ember is faster)\n",
                      reference.c_str());
          header = true;
        }
        std::printf("  %-48s %6.3f\n", name.c_str(), it->second / time);
      }
    }
    for (const auto& [group, reference] : groups_) {
      const std::string prefix = group + "/ember/";
      bool header = false;
      for (const auto& [name, time] : seconds_) {
        if (name.rfind(prefix, 0) != 0) continue;
        const auto it = seconds_.find(reference + "/ember/" + name.substr(prefix.size()));
        if (it == seconds_.end()) continue;
        if (!header) {
          std::printf("\nspeed of ember's %s relative to its %s, same run (>1: %s is faster)%s\n",
                      group.c_str(), reference.c_str(), group.c_str(),
                      step_mib_.count(name) ? "; memory: its step memory / the reference's" : "");
          header = true;
        }
        std::printf("  %-48s %6.3f", name.c_str(), it->second / time);
        const auto ours_mib = step_mib_.find(name), theirs_mib = step_mib_.find(it->first);
        if (ours_mib != step_mib_.end() && theirs_mib != step_mib_.end() &&
            theirs_mib->second > 0) {
          std::printf("  memory %6.3f", ours_mib->second / theirs_mib->second);
        }
        std::printf("\n");
      }
    }
  }

 private:
  std::vector<std::string> references_;
  std::vector<GroupPair> groups_;
  std::map<std::string, double> seconds_;
  std::map<std::string, double> step_mib_;  // the "step_MiB" counter, where a benchmark sets it
};

// Runs the registered benchmarks with a RatioReporter; use as main's body.
inline int run_with_ratios(int argc, char** argv, std::vector<std::string> references,
                           std::vector<RatioReporter::GroupPair> groups = {}) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  RatioReporter reporter(std::move(references), std::move(groups));
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}

}  // namespace ember::bench
