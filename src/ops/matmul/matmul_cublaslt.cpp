// The cuBLASLt matmul backend: the pure mapping of a MatmulProblem onto cublasLtMatmul (every
// CUDA-enabled build), then the calls themselves (cuBLASLt, or the emulated one): one handle per
// device, a plan cache (descriptors, layouts, the heuristic's algorithm) and a workspace from
// ember's allocator.
#if EMBER_WITH_CUDA
#include "ops/matmul/matmul_cublaslt.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <limits>
#include <string>

// The emulated build compiles the same calls against ember's emulated cuBLASLt
// (include/ember/simt/shim/cublasLt.h), so the plan cache and the workspace code run in tests.
#include <cublasLt.h>

#include <map>
#include <memory>
#include <mutex>

#include "core/shared_library.hpp"
#include "ember/core/check_cuda.hpp"
#include "ember/core/scratch.hpp"

namespace ember::ops::cuda {
namespace {

using kernels::EpilogueActivation;
using kernels::MatmulProblem;
using kernels::MatrixRef;

bool present(const MatrixRef& ref) {
  return ref.data != nullptr;
}

struct NamedRef {
  const char* name;
  const MatrixRef& ref;
};

// cublasLt.h: bias, bias-gradient and GELU-aux elements have D's type (other types are documented
// for fp8 and int8 kernels only), and C has D's type; ember's operands must match.
std::string wrong_epilogue_type(const MatmulProblem& p) {
  const NamedRef operands[] = {{"bias", p.bias},
                               {"bias_grad", p.bias_grad},
                               {"pre_activation", p.pre_activation},
                               {"activation_input", p.activation_input},
                               {"residual", p.residual}};
  for (const auto& [name, ref] : operands) {
    if (present(ref) && ref.type != p.c.type) {
      return fmt::format(
          "cuBLASLt reads and writes the epilogue's {} in C's type ({}), but it is {}", name,
          dtype_name(p.c.type), dtype_name(ref.type));
    }
  }
  return {};
}

// The GELU aux matrix (pre_activation or activation_input): cublasLt.h requires its leading
// dimension and batch stride to be multiples of 8; outputs must not be shared across the batch.
std::string wrong_epilogue_layout(const MatmulProblem& p) {
  const NamedRef aux[] = {{"pre_activation", p.pre_activation},
                          {"activation_input", p.activation_input}};
  for (const auto& [name, ref] : aux) {
    if (present(ref) && (ref.ld % 8 != 0 || ref.batch_stride % 8 != 0)) {
      return fmt::format(
          "cuBLASLt needs the GELU aux matrix ({}) to have a leading dimension and batch stride "
          "that are multiples of 8, but they are {} and {}",
          name, ref.ld, ref.batch_stride);
    }
  }
  if (p.batch > 1) {
    if (p.c.batch_stride == 0) {
      return "C is written by every batch entry (batch stride 0); cuBLASLt needs one output "
             "matrix per entry";
    }
    if (present(p.pre_activation) && p.pre_activation.batch_stride == 0) {
      return "pre_activation is written by every batch entry (batch stride 0); cuBLASLt needs "
             "one aux matrix per entry";
    }
  }
  return {};
}

// Which epilogues ember's definition (ember/kernels/matmul_problem.cuh) can become in cuBLASLt.
std::string wrong_epilogue(const MatmulProblem& p) {
  const bool bias = present(p.bias);
  const bool pre = present(p.pre_activation);
  const bool residual = present(p.residual);
  const bool bias_grad = present(p.bias_grad);
  const EpilogueActivation act = p.activation;
  const EpilogueActivation grad = p.activation_grad;
  constexpr auto none = EpilogueActivation::none;

  if (grad == EpilogueActivation::relu) {
    return "activation_grad relu: cuBLASLt's DRELU reads the ReLU bit-mask its forward pass "
           "saved (RELU_AUX), not the pre-activation values ember passes";
  }
  if (grad != none) {
    if (!present(p.activation_input)) return "activation_grad gelu needs activation_input";
    if (act != none) return "cuBLASLt's DGELU cannot apply an activation after the gradient";
    if (bias) {
      return "cuBLASLt's DGELU has no bias input (ember adds the bias before multiplying by "
             "GELU')";
    }
    if (pre) return "cuBLASLt's DGELU cannot save the value before the activation";
    if (residual) return "cuBLASLt's DGELU would multiply the residual (passed as C) by GELU' too";
    if (bias_grad) {
      return "cuBLASLt's DGELU_BGRAD reduces its output over the batch rows (the previous "
             "layer's bias gradient, length n), not the row sums of op(A) (length m) that "
             "ember's bias_grad is";
    }
  }
  if (pre && act == none) {
    return "pre_activation without an activation: cuBLASLt saves the pre-activation only with "
           "GELU (GELU_AUX)";
  }
  if (pre && act == EpilogueActivation::relu) {
    return "pre_activation with relu: cuBLASLt's RELU_AUX saves a bit-mask, not the values";
  }
  if (act != none && p.output_scale != 1.0f) {
    return "output_scale != 1 after an activation: cuBLASLt has no epilogue that scales after "
           "the activation";
  }
  if (act != none && residual) {
    return "a residual after an activation: cuBLASLt has no epilogue that adds a matrix after "
           "the activation";
  }
  if (bias && p.output_scale != 1.0f) {
    return "output_scale != 1 with a bias: ember scales the bias too, cuBLASLt adds it unscaled";
  }
  if (residual && p.beta != 0.0f) {
    return "a residual with beta != 0: cuBLASLt has one C operand, and both would need it";
  }
  if (bias_grad) {
    if (p.batch != 1) return "bias_grad with batch > 1 (ember defines it for batch == 1 only)";
    if (bias || act != none) {
      return "bias_grad with a bias or an activation: cuBLASLt's BGRADB epilogue does neither";
    }
    if (p.bias_grad_beta != 0.0f) {
      return "bias_grad_beta != 0 (accumulating): cuBLASLt's BGRADB overwrites the bias gradient";
    }
    if (p.alpha * p.output_scale != 1.0f) {
      return "bias_grad with alpha * output_scale != 1: ember's bias gradient is unscaled, and "
             "cuBLASLt does not document whether BGRADB applies alpha";
    }
  }
  return {};
}

std::string why_not(const MatmulProblem& p) {
  if (p.m < 1 || p.n < 1 || p.k < 1 || p.batch < 1) {
    return fmt::format("cuBLASLt needs m, n, k and batch >= 1, not m={}, n={}, k={}, batch={}", p.m,
                       p.n, p.k, p.batch);
  }
  if (p.batch > std::numeric_limits<int32_t>::max()) {
    return fmt::format("cuBLASLt counts batch entries in int32, and batch is {}", p.batch);
  }
  if (p.a.type != p.b.type) {
    return fmt::format("cuBLASLt needs A and B of one type, not {} and {}", dtype_name(p.a.type),
                       dtype_name(p.b.type));
  }
  // cuBLASLt with CUBLAS_COMPUTE_32F and f32 scale: f32 x f32 -> f32, f16 x f16 -> f16 or f32,
  // bf16 x bf16 -> bf16 or f32.
  if (p.a.type == DType::f32 && p.c.type != DType::f32) {
    return fmt::format("cuBLASLt has no f32 x f32 product with a {} C", dtype_name(p.c.type));
  }
  if (p.c.type != p.a.type && p.c.type != DType::f32) {
    return fmt::format("cuBLASLt has no {} x {} product with a {} C (C must be {} or f32)",
                       dtype_name(p.a.type), dtype_name(p.b.type), dtype_name(p.c.type),
                       dtype_name(p.a.type));
  }
  // ember's contract (ld >= cols) is cuBLASLt's (ld >= rows of the column-major view).
  if (p.a.ld < (p.trans_a ? p.m : p.k) || p.b.ld < (p.trans_b ? p.k : p.n) || p.c.ld < p.n) {
    return fmt::format("a leading dimension is shorter than its row (lda={}, ldb={}, ldc={})",
                       p.a.ld, p.b.ld, p.c.ld);
  }
  if (std::string why = wrong_epilogue(p); !why.empty()) return why;
  if (std::string why = wrong_epilogue_type(p); !why.empty()) return why;
  return wrong_epilogue_layout(p);
}

LtEpilogue forward_epilogue(EpilogueActivation act, bool bias, bool save_pre) {
  switch (act) {
    case EpilogueActivation::relu:
      return bias ? LtEpilogue::relu_bias : LtEpilogue::relu;
    case EpilogueActivation::gelu:
      if (save_pre) return bias ? LtEpilogue::gelu_aux_bias : LtEpilogue::gelu_aux;
      return bias ? LtEpilogue::gelu_bias : LtEpilogue::gelu;
    default:
      return bias ? LtEpilogue::bias : LtEpilogue::none;
  }
}

// A row-major [rows, cols] operand as the column-major [cols, rows] matrix it also is.
LtMatrix transposed_view(const MatrixRef& ref, int64_t rows, int64_t cols) {
  return LtMatrix{
      ref.data, ref.type,        static_cast<uint64_t>(cols), static_cast<uint64_t>(rows),
      ref.ld,   ref.batch_stride};
}

}  // namespace

const char* lt_epilogue_name(LtEpilogue epilogue) {
  switch (epilogue) {
    case LtEpilogue::none:
      return "DEFAULT";
    case LtEpilogue::relu:
      return "RELU";
    case LtEpilogue::bias:
      return "BIAS";
    case LtEpilogue::relu_bias:
      return "RELU_BIAS";
    case LtEpilogue::gelu:
      return "GELU";
    case LtEpilogue::gelu_bias:
      return "GELU_BIAS";
    case LtEpilogue::gelu_aux:
      return "GELU_AUX";
    case LtEpilogue::gelu_aux_bias:
      return "GELU_AUX_BIAS";
    case LtEpilogue::dgelu:
      return "DGELU";
    case LtEpilogue::bgradb:
      return "BGRADB";
  }
  return "?";
}

CublasLtMapping map_to_cublaslt(const MatmulProblem& p) {
  CublasLtMapping lt;
  lt.unsupported = why_not(p);
  if (!lt.unsupported.empty()) return lt;

  // D^T [n, m] = op(B)^T op(A)^T: cuBLASLt's A is ember's B, its B is ember's A.
  lt.m = static_cast<uint64_t>(p.n);
  lt.n = static_cast<uint64_t>(p.m);
  lt.k = static_cast<uint64_t>(p.k);
  lt.batch = static_cast<int32_t>(p.batch);
  lt.trans_a = p.trans_b;
  lt.trans_b = p.trans_a;
  lt.a = p.trans_b ? transposed_view(p.b, p.n, p.k) : transposed_view(p.b, p.k, p.n);
  lt.b = p.trans_a ? transposed_view(p.a, p.k, p.m) : transposed_view(p.a, p.m, p.k);
  lt.d = transposed_view(p.c, p.m, p.n);

  // output_scale != 1 only where D is linear in the product (why_not): fold it into alpha, beta.
  lt.alpha = p.alpha * p.output_scale;
  if (present(p.residual)) {
    // No activation and beta == 0 (why_not): D = alpha AB + bias + residual, the residual as C.
    lt.c = transposed_view(p.residual, p.m, p.n);
    lt.c_is_d = false;
    lt.beta = 1.0f;
  } else {
    lt.c = lt.d;  // in place: beta == 0 never reads it, beta != 0 reads ember's C
    lt.c_is_d = true;
    lt.beta = p.beta * p.output_scale;
  }

  if (present(p.bias_grad)) {
    // ember: bias_grad[i] = sum_k op(A)[i, k], length m. cuBLASLt's B is ember's A with
    // op_lt(B) = op(A)^T, [k, n_lt = m]; BGRADB reduces op_lt(B) over k into a vector as long
    // as D's columns (n_lt = m): exactly ember's row sums. (BGRADA would sum op(B)'s columns.)
    lt.epilogue = LtEpilogue::bgradb;
    lt.vector = p.bias_grad.data;
    lt.vector_type = p.bias_grad.type;
  } else if (p.activation_grad == EpilogueActivation::gelu) {
    lt.epilogue = LtEpilogue::dgelu;
    lt.aux = p.activation_input.data;
    lt.aux_ld = p.activation_input.ld;
    lt.aux_batch_stride = p.activation_input.batch_stride;
  } else {
    // The bias is as long as D's rows in cuBLASLt's view (m_lt = ember's n) and broadcast over
    // its columns: ember's row vector added to every row.
    lt.epilogue = forward_epilogue(p.activation, present(p.bias), present(p.pre_activation));
    if (present(p.bias)) {
      lt.vector = p.bias.data;
      lt.vector_type = p.bias.type;
    }
    if (present(p.pre_activation)) {
      // GELU_AUX stores the GELU input, alpha AB + beta C + bias: ember's pre-activation t.
      lt.aux = p.pre_activation.data;
      lt.aux_ld = p.pre_activation.ld;
      lt.aux_batch_stride = p.pre_activation.batch_stride;
    }
  }
  return lt;
}

}  // namespace ember::ops::cuda

// ---- the cuBLASLt calls (the real library, or the emulated one) -------------------------------
namespace ember::ops::cuda {
namespace {

// cuBLASLt is loaded on first use, not linked (core/shared_library.hpp): libember.so starts on a
// machine without it. The functions ember calls, by name.
// clang-format off
#define EMBER_CUBLASLT_FUNCTIONS(X)                                              \
  X(cublasLtCreate) X(cublasLtMatmul) X(cublasLtMatmulAlgoGetHeuristic)          \
  X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy)                       \
  X(cublasLtMatmulDescSetAttribute) X(cublasLtMatrixLayoutCreate)                \
  X(cublasLtMatrixLayoutDestroy) X(cublasLtMatrixLayoutSetAttribute)             \
  X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceDestroy)           \
  X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtGetStatusName)
// clang-format on

struct CublasLtApi {
#define EMBER_DECLARE(name) decltype(&::name) name = nullptr;
  EMBER_CUBLASLT_FUNCTIONS(EMBER_DECLARE)
#undef EMBER_DECLARE
};

// The loaded library, or CublasLtNoAlgorithm (nothing enqueued: the automatic backend falls back
// to the tiled kernels; backend 'cublaslt' reports it) naming the library and why.
#if defined(EMBER_SIMT)
// The emulated build binds the emulated cuBLASLt's functions directly.
const CublasLtApi& api() {
  static const CublasLtApi table = [] {
    CublasLtApi functions;
#define EMBER_BIND(name) functions.name = &::name;
    EMBER_CUBLASLT_FUNCTIONS(EMBER_BIND)
#undef EMBER_BIND
    return functions;
  }();
  return table;
}
#else
const CublasLtApi& api() {
  static const detail::SharedLibrary library("libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR));
  static const CublasLtApi* const table = []() -> const CublasLtApi* {
    if (!library.loaded()) return nullptr;
    auto* functions = new CublasLtApi();  // never freed: handles made through it live on
#define EMBER_BIND(name) library.bind(#name, functions->name);
    EMBER_CUBLASLT_FUNCTIONS(EMBER_BIND)
#undef EMBER_BIND
    return functions;
  }();
  if (table == nullptr) {
    throw CublasLtNoAlgorithm(fmt::format(
        "ops::matmul: cuBLASLt is not available ({}); install NVIDIA's cuBLASLt {} runtime "
        "library, or use the tiled backend",
        library.error(), CUBLAS_VER_MAJOR));
  }
  return *table;
}
#endif

#define EMBER_CUBLASLT_CHECK(expr)                                                              \
  do {                                                                                          \
    const cublasStatus_t ember_status_ = (expr);                                                \
    if (ember_status_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                                    \
      EMBER_THROW("cuBLASLt call '{}' failed: {} ({})", #expr,                                  \
                  api().cublasLtGetStatusName(ember_status_), static_cast<int>(ember_status_)); \
  } while (0)

static_assert(static_cast<uint32_t>(LtEpilogue::none) == CUBLASLT_EPILOGUE_DEFAULT);
static_assert(static_cast<uint32_t>(LtEpilogue::relu) == CUBLASLT_EPILOGUE_RELU);
static_assert(static_cast<uint32_t>(LtEpilogue::bias) == CUBLASLT_EPILOGUE_BIAS);
static_assert(static_cast<uint32_t>(LtEpilogue::relu_bias) == CUBLASLT_EPILOGUE_RELU_BIAS);
static_assert(static_cast<uint32_t>(LtEpilogue::gelu) == CUBLASLT_EPILOGUE_GELU);
static_assert(static_cast<uint32_t>(LtEpilogue::gelu_bias) == CUBLASLT_EPILOGUE_GELU_BIAS);
static_assert(static_cast<uint32_t>(LtEpilogue::gelu_aux) == CUBLASLT_EPILOGUE_GELU_AUX);
static_assert(static_cast<uint32_t>(LtEpilogue::gelu_aux_bias) == CUBLASLT_EPILOGUE_GELU_AUX_BIAS);
static_assert(static_cast<uint32_t>(LtEpilogue::dgelu) == CUBLASLT_EPILOGUE_DGELU);
static_assert(static_cast<uint32_t>(LtEpilogue::bgradb) == CUBLASLT_EPILOGUE_BGRADB);

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kMaxPlans = 1024;  // beyond this the cache starts over (plans in use live on)

cudaDataType_t cuda_type(DType type) {
  switch (type) {
    case DType::f16:
      return CUDA_R_16F;
    case DType::bf16:
      return CUDA_R_16BF;
    default:
      return CUDA_R_32F;
  }
}

// The largest power of two dividing the address, up to cuBLASLt's default preference (256).
uint32_t alignment_of(const void* ptr) {
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  if (address == 0) return 256;
  const uintptr_t lowest_bit = address & (~address + 1);
  return lowest_bit >= 256 ? 256u : static_cast<uint32_t>(lowest_bit);
}

// Makes `device` current for a scope (cuBLASLt works on the current device).
class DeviceScope {
 public:
  explicit DeviceScope(int device) : device_(device) {
    EMBER_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device_) EMBER_CUDA_CHECK(cudaSetDevice(device_));
  }
  ~DeviceScope() {
    if (previous_ != device_) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int device_;
  int previous_ = 0;
};

// One cuBLASLt handle per device, created on first use (with that device current).
// Process-lifetime on purpose, like the plan cache below: static destructors run at exit after
// the CUDA runtime may have torn its contexts down, so destroying handles then is unsafe; the
// driver reclaims everything when the process ends.
struct DeviceContext {
  cublasLtHandle_t handle = nullptr;
  size_t max_workspace = 0;
};

const DeviceContext& device_context(int device) {
  static std::mutex mutex;
  static auto* contexts = new std::map<int, DeviceContext>();
  std::lock_guard lock(mutex);
  if (auto it = contexts->find(device); it != contexts->end()) return it->second;
  int major = 0;
  EMBER_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  DeviceContext context;
  // cuBLAS's recommended workspace: 32 MiB from Hopper (sm_90) on, 4 MiB before.
  context.max_workspace = major >= 9 ? 32 * kMiB : 4 * kMiB;
  EMBER_CUBLASLT_CHECK(api().cublasLtCreate(&context.handle));
  return contexts->emplace(device, context).first->second;
}

// Everything the descriptors, layouts and the heuristic's choice depend on. The bias and aux
// pointers' alignments are in it because the heuristic reads those pointers from the descriptor.
struct PlanKey {
  uintptr_t stream = 0;
  int device = 0;
  uint64_t m = 0, n = 0, k = 0;
  int32_t batch = 1;
  bool trans_a = false, trans_b = false, c_is_d = true;
  DType a_type{}, b_type{}, c_type{}, d_type{}, vector_type{};
  int64_t lda = 0, ldb = 0, ldc = 0, ldd = 0;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0, stride_d = 0;
  uint32_t epilogue = 0;
  bool has_vector = false, has_aux = false;
  int64_t aux_ld = 0, aux_stride = 0;
  uint32_t align_a = 0, align_b = 0, align_c = 0, align_d = 0, align_vector = 0, align_aux = 0;
  auto operator<=>(const PlanKey&) const = default;
};

PlanKey plan_key(const CublasLtMapping& lt, cudaStream_t stream, int device) {
  PlanKey key;
  key.stream = reinterpret_cast<uintptr_t>(stream);
  key.device = device;
  key.m = lt.m;
  key.n = lt.n;
  key.k = lt.k;
  key.batch = lt.batch;
  key.trans_a = lt.trans_a;
  key.trans_b = lt.trans_b;
  key.c_is_d = lt.c_is_d;
  key.a_type = lt.a.type;
  key.b_type = lt.b.type;
  key.c_type = lt.c.type;
  key.d_type = lt.d.type;
  key.vector_type = lt.vector_type;
  key.lda = lt.a.ld;
  key.ldb = lt.b.ld;
  key.ldc = lt.c.ld;
  key.ldd = lt.d.ld;
  key.stride_a = lt.a.batch_stride;
  key.stride_b = lt.b.batch_stride;
  key.stride_c = lt.c.batch_stride;
  key.stride_d = lt.d.batch_stride;
  key.epilogue = static_cast<uint32_t>(lt.epilogue);
  key.has_vector = lt.vector != nullptr;
  key.has_aux = lt.aux != nullptr;
  key.aux_ld = lt.aux_ld;
  key.aux_stride = lt.aux_batch_stride;
  key.align_a = alignment_of(lt.a.data);
  key.align_b = alignment_of(lt.b.data);
  key.align_c = alignment_of(lt.c.data);
  key.align_d = alignment_of(lt.d.data);
  key.align_vector = alignment_of(lt.vector);
  key.align_aux = alignment_of(lt.aux);
  return key;
}

// A cached matmul: its descriptor, layouts and algorithm. The bias and aux pointers live in the
// descriptor, so a call sets them and runs the matmul under `mutex`.
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace_bytes = 0;
  std::mutex mutex;

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {  // host-only calls; their status cannot be acted on here
    if (c != nullptr && c != d) api().cublasLtMatrixLayoutDestroy(c);
    if (d != nullptr) api().cublasLtMatrixLayoutDestroy(d);
    if (b != nullptr) api().cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) api().cublasLtMatrixLayoutDestroy(a);
    if (desc != nullptr) api().cublasLtMatmulDescDestroy(desc);
  }
};

template <class T>
void set_attribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute,
                   const T& value) {
  EMBER_CUBLASLT_CHECK(
      api().cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof(value)));
}

template <class T>
void set_attribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attribute,
                   const T& value) {
  EMBER_CUBLASLT_CHECK(
      api().cublasLtMatrixLayoutSetAttribute(layout, attribute, &value, sizeof(value)));
}

template <class T>
void set_attribute(cublasLtMatmulPreference_t preference,
                   cublasLtMatmulPreferenceAttributes_t attribute, const T& value) {
  EMBER_CUBLASLT_CHECK(
      api().cublasLtMatmulPreferenceSetAttribute(preference, attribute, &value, sizeof(value)));
}

void set_pointers(const Plan& plan, const CublasLtMapping& lt) {
  if (lt.vector != nullptr) set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, lt.vector);
  if (lt.aux != nullptr)
    set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, lt.aux);
}

// Writes the layout into `out` as soon as it exists, so the plan's destructor frees it on error.
void make_layout(cublasLtMatrixLayout_t& out, const LtMatrix& matrix, int32_t batch) {
  EMBER_CUBLASLT_CHECK(api().cublasLtMatrixLayoutCreate(&out, cuda_type(matrix.type), matrix.rows,
                                                        matrix.cols, matrix.ld));
  if (batch > 1) {
    set_attribute(out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, batch);
    set_attribute(out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, matrix.batch_stride);
  }
}

class Preference {
 public:
  Preference() { EMBER_CUBLASLT_CHECK(api().cublasLtMatmulPreferenceCreate(&preference_)); }
  ~Preference() { api().cublasLtMatmulPreferenceDestroy(preference_); }
  Preference(const Preference&) = delete;
  Preference& operator=(const Preference&) = delete;
  cublasLtMatmulPreference_t get() const { return preference_; }

 private:
  cublasLtMatmulPreference_t preference_ = nullptr;
};

std::shared_ptr<Plan> build_plan(const CublasLtMapping& lt, const PlanKey& key,
                                 const DeviceContext& context) {
  auto plan = std::make_shared<Plan>();
  // CUBLAS_COMPUTE_32F, not CUBLAS_COMPUTE_32F_FAST_TF32: f32 operands keep exact FP32 products,
  // like ember's own kernels; f16/bf16 operands accumulate in f32. alpha and beta are f32.
  EMBER_CUBLASLT_CHECK(api().cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const int32_t op_a = lt.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int32_t op_b = lt.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, op_a);
  set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, op_b);
  set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<uint32_t>(lt.epilogue));
  if (lt.vector != nullptr) {
    const int32_t vector_type = cuda_type(lt.vector_type);
    set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, vector_type);
  }
  if (lt.aux != nullptr) {  // aux elements default to D's type, which they are (why_not)
    set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, lt.aux_ld);
    if (lt.batch > 1) {
      set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE,
                    lt.aux_batch_stride);
    }
  }
  set_pointers(*plan, lt);  // the heuristic reads their alignment

  make_layout(plan->a, lt.a, lt.batch);
  make_layout(plan->b, lt.b, lt.batch);
  make_layout(plan->d, lt.d, lt.batch);
  if (lt.c_is_d) {
    plan->c = plan->d;
  } else {
    make_layout(plan->c, lt.c, lt.batch);
  }

  Preference preference;
  const uint64_t max_workspace = context.max_workspace;
  set_attribute(preference.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, max_workspace);
  set_attribute(preference.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_a);
  set_attribute(preference.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_b);
  set_attribute(preference.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c);
  set_attribute(preference.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_d);

  cublasLtMatmulHeuristicResult_t result{};
  int count = 0;
  const cublasStatus_t status =
      api().cublasLtMatmulAlgoGetHeuristic(context.handle, plan->desc, plan->a, plan->b, plan->c,
                                           plan->d, preference.get(), 1, &result, &count);
  // INVALID_VALUE: a combination this cuBLASLt rejects (some epilogue/layout/type mixes do)
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE ||
      (status == CUBLAS_STATUS_SUCCESS && count == 0)) {
    throw CublasLtNoAlgorithm(fmt::format(
        "ops::matmul: cuBLASLt has no algorithm for this product on cuda:{} (cuBLASLt m={}, "
        "n={}, k={}, batch={}, transa={}, transb={}, A/B {}, C {}, epilogue {}); use the tiled "
        "backend",
        key.device, lt.m, lt.n, lt.k, lt.batch, lt.trans_a, lt.trans_b, dtype_name(lt.a.type),
        dtype_name(lt.d.type), lt_epilogue_name(lt.epilogue)));
  }
  EMBER_CUBLASLT_CHECK(status);
  plan->algo = result.algo;
  plan->workspace_bytes = result.workspaceSize;
  return plan;
}

std::shared_ptr<Plan> find_plan(const CublasLtMapping& lt, const PlanKey& key,
                                const DeviceContext& context) {
  static std::mutex mutex;
  static auto* plans = new std::map<PlanKey, std::shared_ptr<Plan> >();  // see DeviceContext
  {
    std::lock_guard lock(mutex);
    if (auto it = plans->find(key); it != plans->end()) return it->second;
  }
  std::shared_ptr<Plan> plan = build_plan(lt, key, context);  // unlocked: the heuristic is slow
  std::lock_guard lock(mutex);
  if (plans->size() >= kMaxPlans) plans->clear();
  return plans->emplace(key, std::move(plan)).first->second;  // another thread's plan if first
}

}  // namespace

std::string cublaslt_unsupported_reason(const kernels::MatmulProblem& problem) {
  return map_to_cublaslt(problem).unsupported;
}

void matmul_cublaslt(const kernels::MatmulProblem& problem, cudaStream_t stream, int device) {
  const CublasLtMapping lt = map_to_cublaslt(problem);
  EMBER_CHECK(lt.unsupported.empty(), "ops::matmul: backend 'cublaslt' cannot run this product: {}",
              lt.unsupported);
  const DeviceScope scope(device);
  const DeviceContext& context = device_context(device);
  const PlanKey key = plan_key(lt, stream, device);
  const std::shared_ptr<Plan> plan = find_plan(lt, key, context);
  // Stream-ordered (ember/core/scratch.hpp): back to the allocator once the matmul is enqueued.
  const Scratch workspace(Device::cuda(device), reinterpret_cast<StreamId>(stream),
                          plan->workspace_bytes);
  std::lock_guard lock(plan->mutex);
  set_pointers(*plan, lt);
  const cublasStatus_t status =
      api().cublasLtMatmul(context.handle, plan->desc, &lt.alpha, lt.a.data, plan->a, lt.b.data,
                           plan->b, &lt.beta, lt.c.data, plan->c, const_cast<void*>(lt.d.data),
                           plan->d, &plan->algo, workspace.data(), plan->workspace_bytes, stream);
  if (status == CUBLAS_STATUS_INVALID_VALUE || status == CUBLAS_STATUS_NOT_SUPPORTED) {
    // Rejected before anything was enqueued: the automatic backend runs the tiled kernels.
    throw CublasLtNoAlgorithm(fmt::format(
        "ops::matmul: cuBLASLt rejected this product on cuda:{} ({}; cuBLASLt m={}, n={}, k={}, "
        "epilogue {}); use the tiled backend",
        device, api().cublasLtGetStatusName(status), lt.m, lt.n, lt.k,
        lt_epilogue_name(lt.epilogue)));
  }
  EMBER_CUBLASLT_CHECK(status);
}

}  // namespace ember::ops::cuda

#endif  // EMBER_WITH_CUDA
