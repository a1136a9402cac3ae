// ops::matmul on CUDA devices: turns checked tensors into a MatmulProblem and runs it on the
// chosen backend (ember's tiled kernels or cuBLASLt).
#if EMBER_WITH_CUDA
#include "ops/matmul/matmul_cuda.hpp"

#include <cuda_runtime.h>

#include <string>

#include "ember/core/check_cuda.hpp"
#include "ops/common/element_type.hpp"
#include "ops/matmul/matmul_cublaslt.hpp"
#include "ops/matmul/matmul_launchers.hpp"

namespace ember::ops::cuda {
namespace {

constexpr const char* kOp = "ops::matmul";

kernels::EpilogueActivation epilogue_activation(Activation activation) {
  switch (activation) {
    case Activation::relu:
      return kernels::EpilogueActivation::relu;
    case Activation::gelu:
      return kernels::EpilogueActivation::gelu;
    default:
      return kernels::EpilogueActivation::none;
  }
}

// A contiguous tensor as a MatrixRef: rows of its last dimension, batch entries of rows x cols.
kernels::MatrixRef matrix_ref(const TensorView& t, bool batched) {
  kernels::MatrixRef ref;
  if (t.data == nullptr) return ref;
  ref.data = t.data;
  ref.type = element_type(t.dtype);
  const int r = t.rank();
  ref.ld = r >= 1 ? t.shape[r - 1] : 1;
  ref.batch_stride = batched && r == 3 ? t.shape[1] * t.shape[2] : 0;
  return ref;
}

kernels::MatmulProblem make_problem(const TensorView& c, const TensorView& a, const TensorView& b,
                                    const detail::MatmulDims& dims, const MatmulOptions& o) {
  kernels::MatmulProblem p;
  p.m = dims.m;
  p.n = dims.n;
  p.k = dims.k;
  p.batch = dims.batch;
  p.a = matrix_ref(a, dims.a_batched);
  p.b = matrix_ref(b, dims.b_batched);
  p.trans_a = o.transpose_a;
  p.trans_b = o.transpose_b;
  p.c = matrix_ref(c, true);
  p.alpha = o.alpha;
  p.beta = o.beta;
  p.bias = matrix_ref(o.bias, false);
  p.activation = epilogue_activation(o.activation);
  p.activation_grad = epilogue_activation(o.activation_grad);
  p.activation_input = matrix_ref(o.activation_input, true);
  p.pre_activation = matrix_ref(o.pre_activation, true);
  p.residual = matrix_ref(o.residual, true);
  p.output_scale = o.output_scale;
  p.bias_grad = matrix_ref(o.bias_grad, false);
  p.bias_grad_beta = o.bias_grad_beta;
  return p;
}

void run_tiled(const kernels::MatmulProblem& p, cudaStream_t stream, int device) {
  if (p.a.type == DType::f32) {
    matmul_simt_f32(p, stream);
    return;
  }
  int major = 0;
  EMBER_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  EMBER_CHECK(major >= 8,
              "{}: the tiled backend's f16/bf16 kernel needs tensor cores of sm_80 or newer; "
              "cuda:{} is sm_{}x (use backend cublaslt, or f32 operands)",
              kOp, device, major);
  matmul_tensor_core(p, stream);
}

}  // namespace

void matmul(Stream& stream, const TensorView& c, const TensorView& a, const TensorView& b,
            const detail::MatmulDims& dims, const MatmulOptions& options) {
  const int device = stream.device().index();
  EMBER_CHECK(options.backend != MatmulBackend::cpu,
              "{}: backend 'cpu' needs CPU tensors, but the operands are on {}", kOp,
              stream.device().to_string());
  const kernels::MatmulProblem problem = make_problem(c, a, b, dims, options);
  if (problem.m == 0 || problem.batch == 0 ||
      (problem.n == 0 && problem.bias_grad.data == nullptr)) {
    return;
  }
  EMBER_CUDA_CHECK(cudaSetDevice(device));
  auto handle = static_cast<cudaStream_t>(stream.native());

  switch (options.backend) {
    case MatmulBackend::cublaslt: {
      const std::string why = cublaslt_unsupported_reason(problem);
      EMBER_CHECK(why.empty(), "{}: backend 'cublaslt' cannot run this product: {}", kOp, why);
      matmul_cublaslt(problem, handle, device);
      return;
    }
    case MatmulBackend::tiled:
      run_tiled(problem, handle, device);
      return;
    default:
      // cuBLASLt is the faster choice wherever it can express the epilogue (see README); where
      // it cannot, or finds no algorithm for the layout, ember's kernels run the product.
      if (cublaslt_unsupported_reason(problem).empty()) {
        try {
          matmul_cublaslt(problem, handle, device);
          return;
        } catch (const CublasLtNoAlgorithm&) {
          // nothing was enqueued: fall through to the tiled kernels
        }
      }
      run_tiled(problem, handle, device);
  }
}

}  // namespace ember::ops::cuda
#endif  // EMBER_WITH_CUDA
