// ptxas_report: compiles CUDA translation units with `nvcc -Xptxas -v` for each architecture
// and prints, per kernel, registers, shared memory, stack frame, spill bytes and the occupancy
// on a reference GPU of that architecture (A100 for sm_80, H100 SXM for sm_90), computed with
// cuda_occupancy.h. It fails (exit 1) when a checked kernel spills or has a stack frame, or when
// a kernel's SASS lacks required instructions or has local-memory loads or stores.
//
//   ptxas_report --nvcc PATH [--cuobjdump PATH] --arch 80 --arch 90 --flag -I... ...
//                --source file.cu ... [--no-spill REGEX] [--sass REGEX=HMMA,LDSM ...]
//                [--dynamic-smem REGEX=BYTES ...]
// Block sizes come from each kernel's __launch_bounds__ (.maxntid in the PTX).
#include <cuda_occupancy.h>
#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Options {
  std::string nvcc, cuobjdump;
  std::vector<std::string> archs, flags, sources;
  std::string no_spill = ".*";
  std::vector<std::pair<std::regex, std::vector<std::string>>> sass;  // kernel -> instructions
  std::vector<std::pair<std::regex, size_t>> dynamic_smem;
};

struct Kernel {
  std::string mangled, arch;
  int registers = 0, stack = 0, spill_stores = 0, spill_loads = 0, threads = 0;
  size_t smem = 0;
};

std::string run(const std::string& command, int* status) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen((command + " 2>&1").c_str(), "r"), pclose);
  std::string out;
  char buffer[4096];
  while (pipe && fgets(buffer, sizeof buffer, pipe.get())) out += buffer;
  *status = pipe ? pclose(pipe.release()) : -1;
  return out;
}

std::string demangle(const std::string& name) {
  int status = 0;
  char* d = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
  std::string out = status == 0 && d ? d : name;
  std::free(d);
  return out;
}

// A short display name: the demangled name without namespaces' return types and arguments.
std::string short_name(const std::string& mangled) {
  std::string d = demangle(mangled);
  if (auto paren = d.rfind('('); paren != std::string::npos) d = d.substr(0, paren);
  if (d.rfind("void ", 0) == 0) d = d.substr(5);
  return std::regex_replace(d, std::regex("ember::(kernels::)?"), "");
}

std::string nvcc_command(const Options& o, const std::string& source, const std::string& mode) {
  std::string cmd = o.nvcc + " -std=c++20 --expt-relaxed-constexpr";
  for (const auto& f : o.flags) cmd += " " + f;
  return cmd + " " + mode + " " + source;
}

// `ptxas info : Used N registers, ... M bytes smem` lines following each function's header.
std::vector<Kernel> parse_ptxas(const std::string& log, const std::string& arch) {
  std::vector<Kernel> kernels;
  const std::regex entry(R"(Compiling entry function '(\w+)' for 'sm_(\d+)')");
  const std::regex frame(
      R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
  const std::regex used(R"(Used (\d+) registers)");
  const std::regex smem(R"((\d+) bytes smem)");
  std::istringstream in(log);
  std::string line;
  Kernel* current = nullptr;
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_search(line, m, entry)) {
      if (m[2] != arch) {
        current = nullptr;
        continue;
      }
      kernels.push_back({m[1], arch});
      current = &kernels.back();
    } else if (current && std::regex_search(line, m, frame)) {
      current->stack = std::stoi(m[1]);
      current->spill_stores = std::stoi(m[2]);
      current->spill_loads = std::stoi(m[3]);
    } else if (current && std::regex_search(line, m, used)) {
      current->registers = std::stoi(m[1]);
      if (std::regex_search(line, m, smem)) current->smem = std::stoul(m[1]);
    }
  }
  return kernels;
}

// .entry NAME( ... ) .maxntid X, Y, Z in the PTX: the block size from __launch_bounds__.
std::map<std::string, int> parse_maxntid(const std::string& ptx) {
  std::map<std::string, int> threads;
  const std::regex entry(R"(\.entry\s+(\w+)\()");
  const std::regex maxntid(R"(\.maxntid\s+(\d+),\s*(\d+),\s*(\d+))");
  std::string current;
  std::istringstream in(ptx);
  std::string line;
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_search(line, m, entry)) current = m[1];
    if (!current.empty() && std::regex_search(line, m, maxntid)) {
      threads[current] = std::stoi(m[1]) * std::stoi(m[2]) * std::stoi(m[3]);
    }
  }
  return threads;
}

cudaOccDeviceProp reference_gpu(const std::string& arch) {
  cudaOccDeviceProp p;
  p.computeMajor = std::stoi(arch) / 10;
  p.computeMinor = std::stoi(arch) % 10;
  p.maxThreadsPerBlock = 1024;
  p.maxThreadsPerMultiprocessor = 2048;
  p.regsPerBlock = 65536;
  p.regsPerMultiprocessor = 65536;
  p.warpSize = 32;
  p.sharedMemPerBlock = 48 * 1024;
  p.reservedSharedMemPerBlock = 1024;
  if (arch == "90") {  // H100 SXM: 132 SMs, 228 KiB shared memory per SM, 227 KiB per block
    p.numSms = 132;
    p.sharedMemPerMultiprocessor = 228 * 1024;
    p.sharedMemPerBlockOptin = 227 * 1024;
  } else {  // A100: 108 SMs, 164 KiB per SM, 163 KiB per block
    p.numSms = 108;
    p.sharedMemPerMultiprocessor = 164 * 1024;
    p.sharedMemPerBlockOptin = 163 * 1024;
  }
  return p;
}

std::pair<int, double> occupancy(const Kernel& k, size_t dynamic_smem) {
  if (k.threads == 0) return {0, 0.0};
  const cudaOccDeviceProp props = reference_gpu(k.arch);
  cudaOccFuncAttributes attributes;
  attributes.maxThreadsPerBlock = k.threads;
  attributes.numRegs = k.registers;
  attributes.sharedSizeBytes = k.smem;
  attributes.maxDynamicSharedSizeBytes = props.sharedMemPerBlockOptin - k.smem;
  attributes.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN;  // launchers opt in above 48 KiB
  cudaOccDeviceState state;
  cudaOccResult result;
  if (cudaOccMaxActiveBlocksPerMultiprocessor(&result, &props, &attributes, &state, k.threads,
                                              dynamic_smem) != CUDA_OCC_SUCCESS) {
    return {0, 0.0};
  }
  const int blocks = result.activeBlocksPerMultiprocessor;
  return {blocks, 100.0 * blocks * k.threads / props.maxThreadsPerMultiprocessor};
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::istringstream in(s);
  for (std::string part; std::getline(in, part, sep);) parts.push_back(part);
  return parts;
}

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i], value = argv[i + 1];
    if (key == "--nvcc")
      o.nvcc = value;
    else if (key == "--cuobjdump")
      o.cuobjdump = value;
    else if (key == "--arch")
      o.archs.push_back(value);
    else if (key == "--flag")
      o.flags.push_back(value);
    else if (key == "--source")
      o.sources.push_back(value);
    else if (key == "--no-spill")
      o.no_spill = value;
    else if (key == "--sass" || key == "--dynamic-smem") {
      const auto eq = value.rfind('=');
      if (eq == std::string::npos) {
        std::fprintf(stderr, "ptxas_report: %s needs REGEX=VALUE, not '%s'\n", key.c_str(),
                     value.c_str());
        std::exit(2);
      }
      const std::regex re(value.substr(0, eq));
      if (key == "--sass")
        o.sass.emplace_back(re, split(value.substr(eq + 1), ','));
      else
        o.dynamic_smem.emplace_back(re, std::stoul(value.substr(eq + 1)));
    } else {
      std::fprintf(stderr, "ptxas_report: unknown option '%s'\n", key.c_str());
      std::exit(2);
    }
  }
  if (o.nvcc.empty() || o.archs.empty() || o.sources.empty()) {
    std::fprintf(stderr, "usage: ptxas_report --nvcc PATH --arch SM --source FILE.cu ...\n");
    std::exit(2);
  }
  return o;
}

// SASS per kernel from `cuobjdump -sass`: "Function : NAME" starts each kernel's listing.
std::map<std::string, std::string> sass_by_kernel(const std::string& dump,
                                                  const std::string& arch) {
  std::map<std::string, std::string> out;
  std::string current, current_arch;
  std::istringstream in(dump);
  std::string line;
  std::smatch m;
  const std::regex arch_line(R"(arch = sm_(\d+))"), function(R"(Function : (\w+))");
  while (std::getline(in, line)) {
    if (std::regex_search(line, m, arch_line))
      current_arch = m[1];
    else if (std::regex_search(line, m, function))
      current = m[1];
    else if (!current.empty() && current_arch == arch)
      out[current] += line + "\n";
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse_args(argc, argv);
  const std::regex no_spill(o.no_spill);
  int failures = 0;
  std::printf("%-6s %-70s %5s %8s %8s %6s %7s %7s %7s %9s\n", "arch", "kernel", "regs", "smem",
              "dyn", "stack", "spill", "threads", "blk/SM", "occupancy");
  for (const std::string& source : o.sources) {
    std::string gencode;
    for (const auto& a : o.archs) gencode += " -gencode arch=compute_" + a + ",code=sm_" + a;
    const std::string object =
        "ptxas_report_" + std::to_string(std::hash<std::string>{}(source)) + ".o";
    int status = 0;
    const std::string log =
        run(nvcc_command(o, source, gencode + " -Xptxas -v -c -o " + object), &status);
    if (status != 0) {
      std::fprintf(stderr, "ptxas_report: nvcc failed on %s:\n%s\n", source.c_str(), log.c_str());
      return 1;
    }
    std::string dump;
    if (!o.cuobjdump.empty()) dump = run(o.cuobjdump + " -sass " + object, &status);
    for (const std::string& arch : o.archs) {
      const std::string ptx =
          run(nvcc_command(o, source, "-arch=compute_" + arch + " -ptx -o - "), &status);
      const auto threads = parse_maxntid(ptx);
      const auto sass = sass_by_kernel(dump, arch);
      for (Kernel k : parse_ptxas(log, arch)) {
        const std::string name = short_name(k.mangled);
        if (auto t = threads.find(k.mangled); t != threads.end()) k.threads = t->second;
        size_t dynamic = 0;
        for (const auto& [re, bytes] : o.dynamic_smem) {
          if (std::regex_search(name, re)) dynamic = bytes;
        }
        const auto [blocks, percent] = occupancy(k, dynamic);
        std::printf("sm_%-3s %-70.70s %5d %8zu %8zu %6d %3d/%-3d", arch.c_str(), name.c_str(),
                    k.registers, k.smem, dynamic, k.stack, k.spill_stores, k.spill_loads);
        if (k.threads > 0) {
          std::printf(" %7d %7d %8.0f%%\n", k.threads, blocks, percent);
        } else {  // no __launch_bounds__: the block size is the launcher's choice
          std::printf(" %7s %7s %9s\n", "-", "-", "-");
        }
        if (std::regex_search(name, no_spill) && (k.stack || k.spill_stores || k.spill_loads)) {
          std::printf("  FAIL: %s has a stack frame or spills on sm_%s\n", name.c_str(),
                      arch.c_str());
          ++failures;
        }
        for (const auto& [re, instructions] : o.sass) {
          if (!std::regex_search(name, re)) continue;
          if (o.cuobjdump.empty()) {
            std::printf("  SASS check skipped: no cuobjdump\n");
            continue;
          }
          const std::string& code = sass.count(k.mangled) ? sass.at(k.mangled) : std::string();
          for (const auto& instruction : instructions) {
            const bool found = code.find(instruction) != std::string::npos;
            std::printf("  SASS %-6s %s\n", instruction.c_str(), found ? "present" : "MISSING");
            failures += !found;
          }
          const bool local = std::regex_search(code, std::regex(R"(\b(LDL|STL)\b)"));
          std::printf("  SASS local memory (LDL/STL) %s\n", local ? "PRESENT" : "none");
          failures += local;
        }
      }
    }
    std::remove(object.c_str());
  }
  std::printf("ptxas_report: %s\n", failures ? "FAILED" : "all checks passed");
  return failures ? 1 : 0;
}
