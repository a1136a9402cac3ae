// The cuBLASLt matmul backend: runs a MatmulProblem as one cublasLtMatmul call with a fused
// epilogue, when cuBLASLt can express that epilogue exactly. The mapping from ember's row-major
// problem to cuBLASLt's column-major one is a pure function (map_to_cublaslt), tested on the CPU.
// The emulated-CUDA build runs it on the emulated cuBLASLt (include/ember/simt/shim/cublasLt.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "ember/core/error.hpp"
// By path, not by name: tests include this header without src/ on their include path.
#include "ember/kernels/matmul_problem.cuh"

namespace ember::ops::cuda {

// cuBLASLt's epilogues that ember uses; the values are cublasLtEpilogue_t's (static_assert-ed
// where cublasLt.h is available).
enum class LtEpilogue : uint32_t {
  none = 1,             // CUBLASLT_EPILOGUE_DEFAULT
  relu = 2,             // RELU
  bias = 4,             // BIAS
  relu_bias = 6,        // RELU_BIAS
  gelu = 32,            // GELU
  gelu_bias = 36,       // GELU_BIAS
  gelu_aux = 160,       // GELU_AUX: also stores the GELU input
  gelu_aux_bias = 164,  // GELU_AUX_BIAS
  dgelu = 192,          // DGELU: multiplies by GELU'(aux)
  bgradb = 512,         // BGRADB: bias gradient = sums of op(B) over k
};

const char* lt_epilogue_name(LtEpilogue epilogue);

// A column-major matrix as cuBLASLt sees it: rows x cols with leading dimension ld.
struct LtMatrix {
  const void* data = nullptr;
  DType type = DType::f32;
  uint64_t rows = 0;
  uint64_t cols = 0;
  int64_t ld = 0;
  int64_t batch_stride = 0;  // elements; 0 with batch > 1 broadcasts (inputs only)
};

// cuBLASLt's view of a MatmulProblem: D = epilogue(alpha op(A) op(B) + beta C), column-major.
// A row-major [r, c] matrix with leading dimension ld is the column-major [c, r] matrix with the
// same ld, so ember's D = op(A) op(B) is computed as D^T = op(B)^T op(A)^T: cuBLASLt's A is
// ember's B, its B is ember's A, the transpose flags stay with their operands, and its m, n are
// ember's n, m.
struct CublasLtMapping {
  std::string unsupported;  // empty: cuBLASLt runs the problem as described below
  uint64_t m = 0, n = 0, k = 0;
  int32_t batch = 1;
  bool trans_a = false;  // op(A) = A^T, for cuBLASLt's A (ember's B)
  bool trans_b = false;
  LtMatrix a, b;
  LtMatrix c;          // ember's C (beta != 0), its residual (folded in as C with beta 1),
  bool c_is_d = true;  // or D itself when beta == 0 (cuBLASLt then never reads C)
  LtMatrix d;          // ember's C, written
  float alpha = 1.0f;  // output_scale folded in where it is linear
  float beta = 0.0f;
  LtEpilogue epilogue = LtEpilogue::none;
  void* vector = nullptr;  // bias (read) or bias gradient (written), CUBLASLT_MATMUL_DESC_BIAS_*
  DType vector_type = DType::f32;
  void* aux = nullptr;  // GELU input: pre_activation (written) or activation_input (read)
  int64_t aux_ld = 0;
  int64_t aux_batch_stride = 0;
};

// Pure: no cuBLASLt call, no device access. Available in every CUDA-enabled build.
CublasLtMapping map_to_cublaslt(const kernels::MatmulProblem& problem);

// Empty when matmul_cublaslt can run the problem with its epilogue; otherwise a sentence naming
// what cuBLASLt cannot do (ops::matmul's automatic backend then uses ember's tiled kernels).
std::string cublaslt_unsupported_reason(const kernels::MatmulProblem& problem);

// Thrown by matmul_cublaslt when cuBLASLt's heuristic offers no algorithm for a problem that
// cublaslt_unsupported_reason accepted, or cuBLASLt rejects the plan as NOT_SUPPORTED or
// INVALID_VALUE (a limit of this cuBLASLt version or GPU). Nothing has been enqueued then, so a
// caller may fall back to another backend.
class CublasLtNoAlgorithm : public ember::Error {
 public:
  using ember::Error::Error;
};

// Enqueues the problem on `stream` of cuda:`device` (pointers are that device's memory).
// Throws ember::Error with cublaslt_unsupported_reason's sentence for a problem it cannot run.
void matmul_cublaslt(const kernels::MatmulProblem& problem, cudaStream_t stream, int device);

}  // namespace ember::ops::cuda
