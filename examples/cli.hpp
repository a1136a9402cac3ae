// Command-line helpers shared by the examples: options, numbers, the device.
#pragma once

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "ember/core/device.hpp"
#include "ember/core/error.hpp"

namespace example {

// A command-line error: reported with the usage hint, exit code 2.
struct UsageError {
  std::string message;
};

inline int64_t parse_int(std::string_view flag, const std::string& text, int64_t min) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || v < min) {
    throw UsageError{fmt::format("{} needs an integer >= {}, not '{}'", flag, min, text)};
  }
  return v;
}

// A finite number >= 0 that is also finite as a float (the optimizer's precision).
inline double parse_double(std::string_view flag, const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(v) || v < 0 ||
      !std::isfinite(static_cast<float>(v))) {
    throw UsageError{fmt::format("{} needs a finite number >= 0 (at most {:g}), not '{}'", flag,
                                 std::numeric_limits<float>::max(), text)};
  }
  return v;
}

using Setter = std::function<void(const std::string&)>;

// An integer option >= `min` (parse_int), into `out`.
template <class Int>
Setter int_option(std::string_view flag, Int& out, int64_t min) {
  return
      [flag, &out, min](const std::string& v) { out = static_cast<Int>(parse_int(flag, v, min)); };
}

// A finite number >= 0 (parse_double), into `out`.
template <class Real>
Setter number_option(std::string_view flag, Real& out) {
  return [flag, &out](const std::string& v) { out = static_cast<Real>(parse_double(flag, v)); };
}

// An option naming a file (not empty), into `out`.
inline Setter file_option(std::string_view flag, std::string& out) {
  return [flag, &out](const std::string& v) {
    if (v.empty()) throw UsageError{fmt::format("{} needs a file, not ''", flag)};
    out = v;
  };
}

// --seed: an integer >= 0, into `out`.
inline Setter seed_option(uint64_t& out) {
  return [&out](const std::string& v) { out = static_cast<uint64_t>(parse_int("--seed", v, 0)); };
}

// --device: auto or a device ember::Device::parse accepts (bad names fail here, exit code 2).
inline Setter device_option(std::string& out) {
  return [&out](const std::string& v) {
    if (v != "auto") ember::Device::parse(v);
    out = v;
  };
}

// The options every spirals example has: --steps --depth --width --batch --lr --classes --points
// --seed --log-every. An example's Config derives from it and gives its own defaults for the
// sizes, e.g. Config() : SpiralConfig{.steps = 600, .depth = 8, ...} {}.
struct SpiralConfig {
  int64_t steps = 1;
  int64_t depth = 1;
  int64_t width = 1;
  int64_t batch = 1;
  double lr = 2e-3;
  int64_t classes = 10;
  int64_t points = 2000;  // per class
  uint64_t seed = 1;
  int64_t log_every = 1;
};

// The options of SpiralConfig, into its fields.
inline void add_spiral_options(std::map<std::string_view, Setter>& options, SpiralConfig& c) {
  options["--steps"] = int_option("--steps", c.steps, 1);
  options["--depth"] = int_option("--depth", c.depth, 0);
  options["--width"] = int_option("--width", c.width, 1);
  options["--batch"] = int_option("--batch", c.batch, 1);
  options["--lr"] = number_option("--lr", c.lr);
  options["--classes"] = int_option("--classes", c.classes, 2);
  options["--points"] = int_option("--points", c.points, 1);
  options["--log-every"] = int_option("--log-every", c.log_every, 1);
  options["--seed"] = seed_option(c.seed);
}

// --batch must split into --accumulate micro-batches.
inline void check_accumulate(int64_t batch, int64_t accumulate) {
  if (batch % accumulate != 0) {
    throw UsageError{
        fmt::format("--batch ({}) must be a multiple of --accumulate ({})", batch, accumulate)};
  }
}

// --amp: f32, f16 or bf16, into `out`.
inline Setter amp_option(std::string& out) {
  return [&out](const std::string& v) {
    if (v != "f32" && v != "f16" && v != "bf16") {
      throw UsageError{fmt::format("--amp must be f32, f16 or bf16, not '{}'", v)};
    }
    out = v;
  };
}

// --checkpoint: none, full, selective or auto:<MiB> (a budget for nn::plan_checkpoints), into
// `out`.
inline Setter checkpoint_option(std::string& out) {
  return [&out](const std::string& v) {
    if (v.starts_with("auto:")) {
      const int64_t budget = parse_int("--checkpoint auto:<MiB>", v.substr(5), 1);
      if (budget > (int64_t{1} << 40)) {  // 1 EiB; and bytes must fit in 64 bits
        throw UsageError{
            fmt::format("--checkpoint auto:<MiB> is at most 2^40, not {}", v.substr(5))};
      }
    } else if (v != "none" && v != "full" && v != "selective") {
      throw UsageError{
          fmt::format("--checkpoint must be none, full, selective or auto:<MiB>, not '{}'", v)};
    }
    out = v;
  };
}

// The budget of "auto:<MiB>" in bytes (checkpoint_option checked it).
inline int64_t checkpoint_budget_bytes(const std::string& checkpoint) {
  return parse_int("--checkpoint", checkpoint.substr(5), 1) << 20;
}

// --workers: an integer >= 0, into `out`.
inline Setter workers_option(int& out) {
  return [&out](const std::string& v) {
    const int64_t n = parse_int("--workers", v, 0);
    if (n > 1024) throw UsageError{fmt::format("--workers is at most 1024, not {}", v)};
    out = static_cast<int>(n);
  };
}

// --dropout: a probability in [0, 1], into `out`.
inline Setter dropout_option(double& out) {
  return [&out](const std::string& v) {
    out = parse_double("--dropout", v);
    if (out > 1) throw UsageError{fmt::format("--dropout must be in [0, 1], not {}", v)};
  };
}

// "--name value" or "--name=value" for each option; a name in `flags` takes no value (its setter
// gets ""); -h/--help prints `usage` and exits 0.
// `positional`, when given, collects the arguments that are not options (not "--..."), in order;
// without it they are unknown options.
inline void parse_options(int argc, char** argv, const std::map<std::string_view, Setter>& options,
                          std::string_view usage, const std::set<std::string_view>& flags = {},
                          std::vector<std::string>* positional = nullptr) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::fwrite(usage.data(), 1, usage.size(), stdout);
      std::exit(0);
    }
    if (positional != nullptr && !arg.starts_with("--")) {
      positional->push_back(arg);
      continue;
    }
    std::string value;
    bool has_value = false;
    if (const size_t eq = arg.find('='); arg.starts_with("--") && eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg.resize(eq);
      has_value = true;
    }
    const auto it = options.find(arg);
    if (it == options.end()) throw UsageError{fmt::format("unknown option '{}'", arg)};
    if (flags.contains(arg)) {
      if (has_value) throw UsageError{fmt::format("{} takes no value", arg)};
      it->second("");
      continue;
    }
    if (!has_value) {
      if (i + 1 >= argc) throw UsageError{fmt::format("{} needs a value", arg)};
      value = argv[++i];
    }
    it->second(value);
  }
}

// "auto" (the GPU when ember can use one, saying why not), or a device name.
inline ember::Device choose_device(const std::string& requested) {
  if (requested != "auto") {
    const ember::Device d = ember::Device::parse(requested);
    ember::require_available(d);
    return d;
  }
  std::string why;
  const ember::Device d = ember::default_device(&why);
  if (d.is_cpu()) fmt::print("ember: running on the CPU ({})\n", why);
  return d;
}

// "12.34%", or "n/a" without samples (no accuracy to report, not 0%).
inline std::string percent_or_none(double fraction, int64_t samples) {
  return samples == 0 ? std::string("    n/a") : fmt::format("{:6.2f}%", 100 * fraction);
}

// An example's main: parse (a UsageError or a bad value: exit 2 with the usage hint), then run
// (an ember::Error: exit 1).
template <class Config, class Parse, class Run>
int run_main(const char* name, int argc, char** argv, Parse&& parse, Run&& run) {
  Config config;
  try {
    config = parse(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s (run with --help for the options)\n", name, e.message.c_str());
    return 2;
  } catch (const ember::Error& e) {
    std::fprintf(stderr, "%s: %s\n", name, e.message().c_str());
    return 2;
  }
  try {
    return run(config);
  } catch (const ember::Error& e) {
    std::fprintf(stderr, "%s: error: %s\n", name, e.what());
    return 1;
  } catch (const std::exception& e) {  // std::filesystem's errors, std::bad_alloc: not a crash
    std::fprintf(stderr, "%s: error: %s\n", name, e.what());
    return 1;
  }
}

}  // namespace example
