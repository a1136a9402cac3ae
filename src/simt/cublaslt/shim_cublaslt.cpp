// Emulated cuBLASLt (include/ember/simt/shim/cublasLt.h): descriptors, layouts and preferences
// are plain structs; the heuristic checks the problem as cuBLASLt documents it and hands back an
// "algorithm" that records the workspace and alignments it was chosen for; cublasLtMatmul checks
// the call against that and queues the product on the stream, where it runs on the host with
// arithmetic that is valid but not ember's (fused multiply-adds, k descending, tanh-form GELU).
#include "ember/simt/shim/cublasLt.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ember/core/half.hpp"
#include "ember/simt/cuda_types.hpp"
#include "ember/simt/race_check.hpp"

struct cublasLtContext {
  int device = 0;
};

struct cublasLtMatmulDescOpaque {
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType_t scale = CUDA_R_32F;
  int32_t trans_a = CUBLAS_OP_N;
  int32_t trans_b = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  void* bias = nullptr;
  int32_t bias_type = -1;  // -1: D's type
  void* aux = nullptr;
  int64_t aux_ld = 0;
  int64_t aux_batch_stride = 0;
};

struct cublasLtMatrixLayoutOpaque {
  cudaDataType_t type = CUDA_R_32F;
  uint64_t rows = 0;
  uint64_t cols = 0;
  int64_t ld = 0;
  int32_t batch = 1;
  int64_t batch_stride = 0;
};

struct cublasLtMatmulPreferenceOpaque {
  uint64_t max_workspace = 0;
  uint32_t align[4] = {256, 256, 256, 256};  // A, B, C, D
};

namespace {

std::atomic<uint64_t> matmul_calls{0};

// What the heuristic's algorithm promises; cublasLtMatmul refuses calls outside it.
struct AlgoRecord {
  uint64_t workspace = 0;
  uint32_t align[4] = {};   // A, B, C, D: the preference's minimum alignments
  uint32_t bias_align = 0;  // the bias and aux pointers' alignments at heuristic time, which
  uint32_t aux_align = 0;   // cuBLASLt reads from the descriptor to choose the algorithm
};
static_assert(sizeof(AlgoRecord) <= sizeof(cublasLtMatmulAlgo_t));

template <class T>
bool read_attribute(T& out, const void* buffer, size_t bytes) {
  if (buffer == nullptr || bytes != sizeof(T)) return false;
  std::memcpy(&out, buffer, sizeof(T));
  return true;
}

// The Create functions: *out = a new T made from `value`.
template <class T>
cublasStatus_t create(T** out, const T& value = {}) {
  if (out == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *out = new T(value);
  return CUBLAS_STATUS_SUCCESS;
}

// The Destroy functions.
template <class T>
cublasStatus_t destroy(T* object) {
  delete object;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t status_of(bool valid) {
  return valid ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

bool known_type(cudaDataType_t t) {
  return t == CUDA_R_32F || t == CUDA_R_16F || t == CUDA_R_16BF;
}

size_t type_size(cudaDataType_t t) {
  return t == CUDA_R_32F ? 4 : 2;
}

float load(const void* base, cudaDataType_t t, int64_t i) {
  switch (t) {
    case CUDA_R_16F:
      return static_cast<float>(static_cast<const ember::half*>(base)[i]);
    case CUDA_R_16BF:
      return static_cast<float>(static_cast<const ember::bfloat16*>(base)[i]);
    default:
      return static_cast<const float*>(base)[i];
  }
}

void store(void* base, cudaDataType_t t, int64_t i, float v) {
  switch (t) {
    case CUDA_R_16F:
      static_cast<ember::half*>(base)[i] = ember::half(v);
      return;
    case CUDA_R_16BF:
      static_cast<ember::bfloat16*>(base)[i] = ember::bfloat16(v);
      return;
    default:
      static_cast<float*>(base)[i] = v;
  }
}

bool has_bias(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_RELU_BIAS ||
         e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool has_aux(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
         e == CUBLASLT_EPILOGUE_DGELU;
}
bool is_gelu(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_BIAS ||
         e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool is_relu(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_RELU || e == CUBLASLT_EPILOGUE_RELU_BIAS;
}
bool known_epilogue(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_DEFAULT || e == CUBLASLT_EPILOGUE_BGRADB || has_bias(e) ||
         has_aux(e) || is_gelu(e) || is_relu(e);
}

// GELU in the tanh form 0.5 x (1 + tanh(u)) and its derivative: the same function as ember's
// (ember/kernels/activation_math.cuh), computed another way, so the last bits differ.
float gelu_tanh(float x) {
  const float u = 0.7978845608f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + std::tanh(u));
}
float gelu_tanh_derivative(float x) {
  const float u = 0.7978845608f * (x + 0.044715f * x * x * x);
  const float t = std::tanh(u);
  const float du = 0.7978845608f * (1.0f + 3.0f * 0.044715f * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

// The problem as cublasLtMatmul will run it, checked: INVALID_VALUE for what cuBLASLt rejects,
// NOT_SUPPORTED for what it has no kernel for.
struct Problem {
  const cublasLtMatmulDescOpaque* desc;
  const cublasLtMatrixLayoutOpaque *a, *b, *c, *d;
  uint64_t m = 0, n = 0, k = 0;
  cudaDataType_t vector_type = CUDA_R_32F;
};

cublasStatus_t check(Problem& p) {
  const auto* desc = p.desc;
  if (desc == nullptr || p.a == nullptr || p.b == nullptr || p.c == nullptr || p.d == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (desc->compute != CUBLAS_COMPUTE_32F || desc->scale != CUDA_R_32F) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  const auto &a = *p.a, &b = *p.b, &c = *p.c, &d = *p.d;
  const bool ta = desc->trans_a == CUBLAS_OP_T, tb = desc->trans_b == CUBLAS_OP_T;
  p.m = d.rows;
  p.n = d.cols;
  p.k = ta ? a.rows : a.cols;
  const uint64_t a_rows = ta ? a.cols : a.rows;
  const uint64_t b_rows = tb ? b.cols : b.rows, b_cols = tb ? b.rows : b.cols;
  if (a_rows != p.m || b_rows != p.k || b_cols != p.n || c.rows != d.rows || c.cols != d.cols) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  for (const auto* l : {p.a, p.b, p.c, p.d}) {
    if (l->ld < static_cast<int64_t>(std::max<uint64_t>(l->rows, 1))) {
      return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (l->batch != d.batch) return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (d.batch > 1 && d.batch_stride == 0) return CUBLAS_STATUS_INVALID_VALUE;
  // BGRADB reduces one batch entry's B: not offered for batches.
  if (desc->epilogue == CUBLASLT_EPILOGUE_BGRADB && d.batch > 1) return CUBLAS_STATUS_NOT_SUPPORTED;
  // f32 x f32 -> f32; f16/bf16 x the same -> that type or f32 (CUBLAS_COMPUTE_32F's table).
  if (a.type != b.type || c.type != d.type) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (a.type == CUDA_R_32F && d.type != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (d.type != a.type && d.type != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  const uint32_t e = desc->epilogue;
  if (!known_epilogue(e)) return CUBLAS_STATUS_NOT_SUPPORTED;
  p.vector_type = desc->bias_type < 0 ? d.type : static_cast<cudaDataType_t>(desc->bias_type);
  if ((has_bias(e) || e == CUBLASLT_EPILOGUE_BGRADB) && p.vector_type != d.type) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (has_aux(e)) {
    if (desc->aux_ld < static_cast<int64_t>(p.m) || desc->aux_ld % 8 != 0 ||
        desc->aux_batch_stride % 8 != 0) {
      return CUBLAS_STATUS_INVALID_VALUE;
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}

// Bytes from a matrix's start to the end of its last element, over every batch entry.
size_t extent(const cublasLtMatrixLayoutOpaque& l) {
  if (l.rows == 0 || l.cols == 0) return 0;
  const int64_t last = (static_cast<int64_t>(l.batch) - 1) * l.batch_stride +
                       (static_cast<int64_t>(l.cols) - 1) * l.ld + static_cast<int64_t>(l.rows);
  return static_cast<size_t>(last) * type_size(l.type);
}

uint32_t alignment_of(const void* ptr) {
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  if (address == 0) return 256;
  const uintptr_t lowest = address & (~address + 1);
  return lowest >= 256 ? 256u : static_cast<uint32_t>(lowest);
}

// Everything the queued product needs, copied at the call (descriptors may change afterwards).
struct Launch {
  cublasLtMatmulDescOpaque desc;
  cublasLtMatrixLayoutOpaque a, b, c, d;
  uint64_t m, n, k;
  cudaDataType_t vector_type;
  float alpha, beta;
  const void *a_data, *b_data, *c_data;
  void* d_data;
  void* workspace;
  size_t workspace_bytes;
};

void run(const Launch& L) {
  const bool ta = L.desc.trans_a == CUBLAS_OP_T, tb = L.desc.trans_b == CUBLAS_OP_T;
  const uint32_t e = L.desc.epilogue;
  // The workspace is scratch: scribble on it, as a kernel would use it.
  if (L.workspace != nullptr) std::memset(L.workspace, 0xA5, L.workspace_bytes);
  for (int32_t batch = 0; batch < L.d.batch; ++batch) {
    const int64_t oa = batch * L.a.batch_stride, ob = batch * L.b.batch_stride;
    const int64_t oc = batch * L.c.batch_stride, od = batch * L.d.batch_stride;
    const int64_t oaux = batch * L.desc.aux_batch_stride;
    auto a_at = [&](uint64_t i, uint64_t kk) {  // op(A)[i, kk]
      return load(L.a_data, L.a.type,
                  oa + static_cast<int64_t>(ta ? kk + i * L.a.ld : i + kk * L.a.ld));
    };
    auto b_at = [&](uint64_t kk, uint64_t j) {  // op(B)[kk, j]
      return load(L.b_data, L.b.type,
                  ob + static_cast<int64_t>(tb ? j + kk * L.b.ld : kk + j * L.b.ld));
    };
    // D is written column by column; C may be D itself, and each element is read before its
    // own write only.
    for (uint64_t j = 0; j < L.n; ++j) {
      for (uint64_t i = 0; i < L.m; ++i) {
        float acc = 0.0f;
        for (uint64_t kk = L.k; kk-- > 0;) acc = std::fma(a_at(i, kk), b_at(kk, j), acc);
        float t = L.alpha * acc;
        if (L.beta != 0.0f) {
          t = std::fma(L.beta, load(L.c_data, L.c.type, oc + static_cast<int64_t>(i + j * L.c.ld)),
                       t);
        }
        if (has_bias(e)) t += load(L.desc.bias, L.vector_type, static_cast<int64_t>(i));
        const int64_t aux_at = oaux + static_cast<int64_t>(i + j * L.desc.aux_ld);
        if (e == CUBLASLT_EPILOGUE_DGELU) {
          t *= gelu_tanh_derivative(load(L.desc.aux, L.d.type, aux_at));
        } else {
          if (has_aux(e)) store(L.desc.aux, L.d.type, aux_at, t);
          if (is_gelu(e)) t = gelu_tanh(t);
          if (is_relu(e)) t = t < 0.0f ? 0.0f : t;  // nan stays nan
        }
        store(L.d_data, L.d.type, od + static_cast<int64_t>(i + j * L.d.ld), t);
      }
    }
  }
  if (e == CUBLASLT_EPILOGUE_BGRADB) {  // sums of op(B) over k: one per column of D
    for (uint64_t j = 0; j < L.n; ++j) {
      float sum = 0.0f;
      for (uint64_t kk = L.k; kk-- > 0;) {
        sum +=
            load(L.b_data, L.b.type, static_cast<int64_t>(tb ? j + kk * L.b.ld : kk + j * L.b.ld));
      }
      store(L.desc.bias, L.vector_type, static_cast<int64_t>(j), sum);
    }
  }
}

}  // namespace

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  return create(handle);
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  return destroy(handle);
}

const char* cublasLtGetStatusName(cublasStatus_t status) {
  return cublasGetStatusName(status);
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale_type) {
  return create(desc, {.compute = compute, .scale = scale_type});
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  return destroy(desc);
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attribute,
                                              const void* buffer, size_t bytes) {
  if (desc == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  bool ok = false;
  switch (attribute) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
      ok = read_attribute(desc->trans_a, buffer, bytes);
      break;
    case CUBLASLT_MATMUL_DESC_TRANSB:
      ok = read_attribute(desc->trans_b, buffer, bytes);
      break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      ok = read_attribute(desc->epilogue, buffer, bytes);
      break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      ok = read_attribute(desc->bias, buffer, bytes);
      break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
      ok = read_attribute(desc->aux, buffer, bytes);
      break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
      ok = read_attribute(desc->aux_ld, buffer, bytes);
      break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE:
      ok = read_attribute(desc->aux_batch_stride, buffer, bytes);
      break;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      ok = read_attribute(desc->bias_type, buffer, bytes) &&
           known_type(static_cast<cudaDataType_t>(desc->bias_type));
      break;
  }
  return status_of(ok && desc->trans_a <= CUBLAS_OP_T && desc->trans_b <= CUBLAS_OP_T);
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType_t type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  if (!known_type(type)) return CUBLAS_STATUS_INVALID_VALUE;
  return create(layout, {type, rows, cols, ld, 1, 0});
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  return destroy(layout);
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                                cublasLtMatrixLayoutAttribute_t attribute,
                                                const void* buffer, size_t bytes) {
  if (layout == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attribute) {
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
      return status_of(read_attribute(layout->batch, buffer, bytes) && layout->batch >= 1);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
      return status_of(read_attribute(layout->batch_stride, buffer, bytes));
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* preference) {
  return create(preference);
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t preference) {
  return destroy(preference);
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t preference,
                                                    cublasLtMatmulPreferenceAttributes_t attribute,
                                                    const void* buffer, size_t bytes) {
  if (preference == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attribute) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      return status_of(read_attribute(preference->max_workspace, buffer, bytes));
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      return status_of(
          read_attribute(preference->align[attribute - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES],
                         buffer, bytes));
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t preference, int requested,
                                              cublasLtMatmulHeuristicResult_t* results,
                                              int* returned) {
  if (handle == nullptr || preference == nullptr || requested < 1 || results == nullptr ||
      returned == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  Problem p{desc, a, b, c, d};
  if (const cublasStatus_t status = check(p); status != CUBLAS_STATUS_SUCCESS) return status;
  // A workspace like a split-k kernel's: some of what the preference allows, so that the caller's
  // workspace handling runs (and the race checker sees it used on the stream).
  // EMBER_SIMT_CUBLASLT_NO_ALGORITHM=1: no algorithm for anything, as a cuBLASLt that has no
  // kernel for a case answers; the callers' fallbacks run in tests.
  if (const char* none = std::getenv("EMBER_SIMT_CUBLASLT_NO_ALGORITHM");
      none != nullptr && std::string(none) == "1") {
    *returned = 0;
    return CUBLAS_STATUS_SUCCESS;
  }
  AlgoRecord record;
  record.workspace = std::min<uint64_t>(preference->max_workspace, 64 * 1024);
  std::copy(std::begin(preference->align), std::end(preference->align), record.align);
  record.bias_align = desc->bias != nullptr ? alignment_of(desc->bias) : 0;
  record.aux_align = desc->aux != nullptr ? alignment_of(desc->aux) : 0;
  results[0] = cublasLtMatmulHeuristicResult_t{};
  std::memcpy(results[0].algo.data, &record, sizeof(record));
  results[0].workspaceSize = record.workspace;
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                              const void* a, cublasLtMatrixLayout_t a_layout, const void* b,
                              cublasLtMatrixLayout_t b_layout, const void* beta, const void* c,
                              cublasLtMatrixLayout_t c_layout, void* d,
                              cublasLtMatrixLayout_t d_layout, const cublasLtMatmulAlgo_t* algo,
                              void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  if (handle == nullptr || alpha == nullptr || beta == nullptr || algo == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  Problem p{desc, a_layout, b_layout, c_layout, d_layout};
  if (const cublasStatus_t status = check(p); status != CUBLAS_STATUS_SUCCESS) return status;
  AlgoRecord record;
  std::memcpy(&record, algo->data, sizeof(record));
  // The algorithm was chosen for this much workspace and these alignments: less of either is
  // an error on a GPU (a plan reused for other pointers), so it is here.
  if (workspace_bytes < record.workspace || (workspace_bytes > 0 && workspace == nullptr)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  // In place (C == D) needs one layout for both.
  if (c == d && (c_layout->ld != d_layout->ld || c_layout->type != d_layout->type ||
                 c_layout->batch_stride != d_layout->batch_stride)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const void* operands[4] = {a, b, c, d};
  const cublasLtMatrixLayoutOpaque* layouts[4] = {a_layout, b_layout, c_layout, d_layout};
  for (int i = 0; i < 4; ++i) {
    // Less aligned than the algorithm was chosen for, or than one element: a GPU kernel faults.
    if (alignment_of(operands[i]) < record.align[i] ||
        alignment_of(operands[i]) < type_size(layouts[i]->type)) {
      return CUBLAS_STATUS_INVALID_VALUE;
    }
  }
  if (alignment_of(desc->bias) < record.bias_align || alignment_of(desc->aux) < record.aux_align) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const uint32_t e = desc->epilogue;
  if ((has_bias(e) || e == CUBLASLT_EPILOGUE_BGRADB) && desc->bias == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (has_aux(e) && desc->aux == nullptr) return CUBLAS_STATUS_INVALID_VALUE;

  Launch L{*desc,           *a_layout, *b_layout, *c_layout, *d_layout, p.m, p.n, p.k,
           p.vector_type,   0.0f,      0.0f,      a,         b,         c,   d,   workspace,
           record.workspace};
  std::memcpy(&L.alpha, alpha, sizeof(float));  // CUDA_R_32F scale, host pointer mode
  std::memcpy(&L.beta, beta, sizeof(float));

  std::vector<ember::simt::Access> accesses = {
      {a, extent(L.a), false}, {b, extent(L.b), false}, {d, extent(L.d), true}};
  if (L.beta != 0.0f && c != d) accesses.push_back({c, extent(L.c), false});
  if (workspace != nullptr && record.workspace > 0) {
    accesses.push_back({workspace, record.workspace, true});
  }
  const size_t vector_bytes =
      type_size(p.vector_type) * (e == CUBLASLT_EPILOGUE_BGRADB ? p.n : p.m);
  if (has_bias(e)) accesses.push_back({desc->bias, vector_bytes, false});
  if (e == CUBLASLT_EPILOGUE_BGRADB) accesses.push_back({desc->bias, vector_bytes, true});
  if (has_aux(e)) {
    cublasLtMatrixLayoutOpaque aux{L.d.type,     p.m,       p.n,
                                   desc->aux_ld, L.d.batch, desc->aux_batch_stride};
    accesses.push_back({desc->aux, extent(aux), e != CUBLASLT_EPILOGUE_DGELU});
  }
  ++matmul_calls;
  ember::simt::stream_submit(
      stream, [L] { run(L); }, std::move(accesses), "cublasLtMatmul");
  return CUBLAS_STATUS_SUCCESS;
}

namespace ember::simt {
uint64_t cublaslt_matmul_calls() {
  return matmul_calls.load();
}
}  // namespace ember::simt
