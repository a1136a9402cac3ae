// The CPU backend's f32 GEMM engine: oneDNN's JIT sgemm or OpenBLAS's sgemm.
//
// Why a choice: Debian's OpenBLAS 0.3.21 picks its kernel from a table of CPU models. It does not
// know Intel Sapphire Rapids (family 6, model 143/207) and falls back to its SSE3 "Prescott"
// kernel there, 4.5x slower than oneDNN on the same tiles, and OPENBLAS_CORETYPE cannot be set
// once the library is loaded. oneDNN picks its JIT kernels from the CPU's feature bits (AVX2,
// AVX-512), so it needs no model table. Measured on an Intel Xeon (Sapphire Rapids class, 2
// cores), ember's tiles, GFLOP/s at 256^3 / 1024^3 / 2048^3: OpenBLAS 29 / 31 / 41, OpenBLAS
// forced to SkylakeX 78 / 126 / 139, oneDNN 138 / 155 / 184.
//
// On AMD Zen the other way round: OpenBLAS has Zen kernels, and oneDNN's sgemm (2.6) there runs
// at 45-60 % of its speed when A, B and C share their offset within a 4 KiB page, as ember's
// allocator's page-aligned tensors do (Zen 3, 2 threads, 1024^3 in 256^2 tiles, GFLOP/s by the
// operands' offset from a page: 0 B: 88, 16 B: 141, 32 B: 64, 64 B: 79; OpenBLAS 140-149 at
// each). `automatic` therefore takes OpenBLAS on an AMD (or Hygon) CPU that OpenBLAS runs with
// kernels of its own for AVX2 or wider (Zen; SkylakeX or Cooperlake on AVX-512 Zen 4, where
// OpenBLAS was about even with PyTorch and oneDNN is unmeasured), else oneDNN wherever its
// kernels use AVX2 or wider, OpenBLAS elsewhere (no oneDNN in the build, an older x86 CPU,
// another architecture) or when EMBER_ONEDNN=0.
#include "ops/matmul/cpu_gemm.hpp"

#include <cblas.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <atomic>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <mutex>
#include <string>
#include <string_view>

#include "ember/core/enum_name.hpp"
#include "ember/core/error.hpp"
#include "ops/matmul/matmul_onednn.hpp"

#if EMBER_WITH_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace ember::ops {
namespace {

// Whether oneDNN can run f32 products here with vector kernels at least as wide as AVX2.
bool onednn_has_wide_kernels() {
#if EMBER_WITH_ONEDNN
  if (cpu::onednn_disabled_by_environment()) return false;
  // ISA values are bit sets, each containing the ISAs it extends (AVX-512 contains AVX2's bits).
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto avx2 = static_cast<unsigned>(dnnl_cpu_isa_avx2);
  return (isa & avx2) == avx2;
#else
  return false;
#endif
}

bool onednn_usable() {
#if EMBER_WITH_ONEDNN
  return !cpu::onednn_disabled_by_environment();
#else
  return false;
#endif
}

// Whether this is an AMD (or Hygon) CPU that OpenBLAS runs with kernels for AVX2 or wider
// (openblas_get_corename(): "Zen", or "SkylakeX"/"Cooperlake" on Zen 4; "ZEN" in a build without
// DYNAMIC_ARCH; an unknown model would be "Prescott" or the like).
bool openblas_has_zen_kernels() {
#if defined(__x86_64__)
  unsigned max_leaf = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0, &max_leaf, &ebx, &ecx, &edx) == 0) return false;
  char vendor[13] = {};
  std::memcpy(vendor, &ebx, 4);
  std::memcpy(vendor + 4, &edx, 4);
  std::memcpy(vendor + 8, &ecx, 4);
  const std::string_view vendor_name(vendor);
  if (vendor_name != "AuthenticAMD" && vendor_name != "HygonGenuine") return false;
  const char* core = openblas_get_corename();
  std::string name = core != nullptr ? core : "";
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name == "zen" || name == "haswell" || name == "skylakex" || name == "cooperlake";
#else
  return false;
#endif
}

CpuGemmEngine parse_environment() {
  const char* v = std::getenv("EMBER_CPU_GEMM");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "auto") == 0) return CpuGemmEngine::automatic;
  if (std::strcmp(v, "onednn") == 0) return CpuGemmEngine::onednn;
  if (std::strcmp(v, "openblas") == 0) return CpuGemmEngine::openblas;
  EMBER_THROW("EMBER_CPU_GEMM='{}': expected auto, onednn or openblas", v);
}

void check_available(CpuGemmEngine engine, const char* where) {
#if EMBER_WITH_ONEDNN
  constexpr const char* kWhyNot = "EMBER_ONEDNN=0 is set";
#else
  constexpr const char* kWhyNot = "this ember was built without oneDNN (libdnnl-dev)";
#endif
  EMBER_CHECK(engine != CpuGemmEngine::onednn || onednn_usable(),
              "{}: the oneDNN GEMM engine is not available: {}", where, kWhyNot);
}

CpuGemmEngine resolve(CpuGemmEngine engine) {
  if (engine != CpuGemmEngine::automatic) return engine;
  if (openblas_has_zen_kernels()) return CpuGemmEngine::openblas;
  return onednn_has_wide_kernels() ? CpuGemmEngine::onednn : CpuGemmEngine::openblas;
}

// The engine set by set_cpu_gemm_engine, else from EMBER_CPU_GEMM (read once).
std::atomic<int> g_engine{-1};

}  // namespace

void set_cpu_gemm_engine(CpuGemmEngine engine) {
  check_available(engine, "set_cpu_gemm_engine");
  g_engine.store(static_cast<int>(resolve(engine)));
}

CpuGemmEngine cpu_gemm_engine() {
  int e = g_engine.load();
  if (e < 0) {
    static std::once_flag once;
    std::call_once(once, [] {
      const CpuGemmEngine requested = parse_environment();
      check_available(requested, "EMBER_CPU_GEMM");
      int expected = -1;
      g_engine.compare_exchange_strong(expected, static_cast<int>(resolve(requested)));
    });
    e = g_engine.load();
  }
  return static_cast<CpuGemmEngine>(e);
}

const char* cpu_gemm_engine_name(CpuGemmEngine engine) {
  static constexpr const char* kNames[] = {"automatic", "onednn", "openblas"};
  static_assert(std::size(kNames) == static_cast<size_t>(CpuGemmEngine::openblas) + 1);
  return enum_name(engine, kNames);
}

namespace cpu {

void sgemm_tile(CpuGemmEngine engine, bool transpose_a, bool transpose_b, int64_t rows,
                int64_t cols, int64_t k, float alpha, const float* a, int64_t lda, const float* b,
                int64_t ldb, float beta, float* c, int64_t ldc) {
#if EMBER_WITH_ONEDNN
  if (engine == CpuGemmEngine::onednn) {
    const dnnl_status_t status = dnnl_sgemm(transpose_a ? 'T' : 'N', transpose_b ? 'T' : 'N', rows,
                                            cols, k, alpha, a, lda, b, ldb, beta, c, ldc);
    EMBER_CHECK(status == dnnl_success, "matmul: oneDNN's sgemm failed ({}) on a {}x{}x{} tile",
                static_cast<int>(status), rows, cols, k);
    return;
  }
#endif
  (void)engine;
  cblas_sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans,
              transpose_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(rows),
              static_cast<blasint>(cols), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
              static_cast<blasint>(ldc));
}

}  // namespace cpu
}  // namespace ember::ops
