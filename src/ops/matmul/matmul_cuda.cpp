// ops::matmul on CUDA devices: turns checked tensors into a MatmulProblem and runs it on the
// chosen backend (ember's tiled kernels or cuBLASLt).
#if EMBER_WITH_CUDA
#include "ops/matmul/matmul_cuda.hpp"

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "ember/core/check_cuda.hpp"
#include "ember/core/scratch.hpp"
#include "ember/ops/elementwise.hpp"
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

// EMBER_MATMUL_BACKEND steers the automatic choice on CUDA devices: auto (the default) or
// cublaslt (the same rules: cuBLASLt where it applies), or tiled (ember's kernels only). Tests use
// it to run every case on each backend; a user may, to compare them in a real job.
MatmulBackend automatic_choice() {
  const char* value = std::getenv("EMBER_MATMUL_BACKEND");
  if (value == nullptr || *value == '\0' || std::string_view(value) == "auto") {
    return MatmulBackend::automatic;
  }
  if (std::string_view(value) == "tiled") return MatmulBackend::tiled;
  if (std::string_view(value) == "cublaslt") return MatmulBackend::cublaslt;
  EMBER_THROW("{}: EMBER_MATMUL_BACKEND must be auto, tiled or cublaslt, not '{}'", kOp, value);
}

// Runs the product on cuBLASLt; false, with nothing enqueued, where cuBLASLt cannot express it or
// finds no algorithm for the layout.
bool ran_on_cublaslt(const kernels::MatmulProblem& problem, cudaStream_t stream, int device) {
  if (!cublaslt_unsupported_reason(problem).empty()) return false;
  try {
    matmul_cublaslt(problem, stream, device);
  } catch (const CublasLtNoAlgorithm&) {
    return false;
  }
  return true;
}

// GELU is one function in ember: ops::gelu_forward's, which the CPU and the tiled kernels'
// epilogue compute bit for bit. cuBLASLt's GELU epilogue computes it with other arithmetic, so the
// automatic backend runs an f32 GELU product as cuBLASLt's product (with its bias) into the
// pre-activation (or C), then ember's GELU: a remade output (selective checkpointing recomputes
// gelu_forward(pre)) is then bitwise the forward's on every backend. 16-bit outputs take
// sixteen_bit_output_after_cublaslt (the GELU of the f32 sum, one rounding). False when this
// does not apply or cuBLASLt cannot run the product (nothing enqueued then).
bool gelu_after_cublaslt(Stream& stream, const TensorView& c, const TensorView& a,
                         const TensorView& b, const detail::MatmulDims& dims,
                         const MatmulOptions& options) {
  if (options.activation != Activation::gelu || c.dtype != DType::f32) return false;
  // A residual and output_scale come after the activation: not part of the product.
  if (options.residual.data != nullptr || options.output_scale != 1.0f) return false;
  const bool separate_pre = options.pre_activation.data != nullptr;
  if (separate_pre && options.beta != 0.0f) return false;  // the product would read pre, not C
  MatmulOptions product = options;
  product.activation = Activation::none;
  product.pre_activation = TensorView();
  const TensorView& pre = separate_pre ? options.pre_activation : c;
  if (!ran_on_cublaslt(make_problem(pre, a, b, dims, product),
                       static_cast<cudaStream_t>(stream.native()), stream.device().index())) {
    return false;
  }
  gelu_forward(stream, c, pre);
  return true;
}

// A bias gradient (Linear's backward: dW += dY^T X with db += row sums of dY^T): cuBLASLt runs
// the product, ember's row-sum kernel the bias gradient, accumulated (which cuBLASLt's BGRADB
// cannot do) or written: the same sums either way, so a gradient written after zero_grad is
// bitwise the one accumulated into zeros. (BGRADB runs with backend cublaslt.) False, with
// nothing enqueued, when cuBLASLt cannot run the product.
bool bias_grad_after_cublaslt(const kernels::MatmulProblem& problem, cudaStream_t stream,
                              int device) {
  if (problem.bias_grad.data == nullptr || problem.n == 0) return false;
  // With an activation too (an unusual mix): the tiled kernels, whose GELU is ember's.
  if (problem.activation != kernels::EpilogueActivation::none) return false;
  kernels::MatmulProblem product = problem;
  product.bias_grad = kernels::MatrixRef{};
  if (!ran_on_cublaslt(product, stream, device)) return false;
  matmul_row_sums(problem, stream);
  return true;
}

// A 16-bit output whose epilogue cuBLASLt cannot run as ember does: an f32 bias (cuBLASLt's bias
// has D's type), or a GELU (cuBLASLt's GELU is not ember's). cuBLASLt's product goes into an f32
// scratch, then ember's bias_activation_forward adds the bias in f32, saves the rounded
// pre-activation if asked, and applies the activation in f32 before rounding once: the tiled
// kernels' epilogue arithmetic, in one pass (without a bias: ops::cast and ops::gelu_forward).
// A bias in the output's dtype without an activation (a Linear's under autocast) needs none of
// this: cuBLASLt adds it in f32 and rounds once into the 16-bit output. The first H100 run of
// GPT-2 d12 found these products on the tiled kernels at 8.5 of 58 ms per step. False, with
// nothing enqueued, where this does not apply or cuBLASLt cannot run the product.
bool sixteen_bit_output_after_cublaslt(Stream& stream, const TensorView& c, const TensorView& a,
                                       const TensorView& b, const detail::MatmulDims& dims,
                                       const MatmulOptions& options) {
  if (c.dtype == DType::f32 || a.dtype == DType::f32) return false;
  const bool bias = options.bias.data != nullptr;
  if (options.activation == Activation::none) {
    if (!bias || options.bias.dtype == c.dtype) return false;
  } else if (options.activation != Activation::gelu) {
    return false;
  }
  if (options.beta != 0.0f || options.residual.data != nullptr || options.output_scale != 1.0f ||
      options.activation_grad != Activation::none || options.bias_grad.data != nullptr) {
    return false;
  }
  MatmulOptions product = options;
  product.bias = TensorView();
  product.activation = Activation::none;
  product.pre_activation = TensorView();
  // Whether cuBLASLt takes the product, asked before the scratch is allocated (an allocator's
  // 256-byte aligned address stands in for it), so that a refusal falls back without allocating.
  TensorView sum{reinterpret_cast<void*>(uintptr_t{256}), DType::f32, c.shape, c.device};
  if (!cublaslt_unsupported_reason(make_problem(sum, a, b, dims, product)).empty()) return false;
  const Scratch scratch(stream, static_cast<size_t>(c.numel()) * sizeof(float));
  sum.data = scratch.data();
  if (!ran_on_cublaslt(make_problem(sum, a, b, dims, product),
                       static_cast<cudaStream_t>(stream.native()), stream.device().index())) {
    return false;
  }
  if (bias) {
    bias_activation_forward(stream, c, sum, options.bias, options.activation,
                            options.pre_activation);
  } else {
    if (options.pre_activation.data != nullptr) cast(stream, options.pre_activation, sum);
    gelu_forward(stream, c, sum);
  }
  return true;
}

}  // namespace

void matmul(Stream& stream, const TensorView& c, const TensorView& a, const TensorView& b,
            const detail::MatmulDims& dims, const MatmulOptions& options) {
  const int device = stream.device().index();
  EMBER_CHECK(options.backend != MatmulBackend::cpu,
              "{}: backend 'cpu' needs CPU tensors, but the operands are on {}", kOp,
              stream.device().to_string());
  const MatmulBackend steer = automatic_choice();  // a bad EMBER_MATMUL_BACKEND fails every call
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
      if (steer == MatmulBackend::tiled) break;
      if (gelu_after_cublaslt(stream, c, a, b, dims, options)) return;
      if (sixteen_bit_output_after_cublaslt(stream, c, a, b, dims, options)) return;
      // Any other GELU product: ember's tiled kernels, never cuBLASLt's own GELU epilogue.
      if (options.activation == Activation::gelu) break;
      if (bias_grad_after_cublaslt(problem, handle, device)) return;
      if (ran_on_cublaslt(problem, handle, device)) return;
  }
  run_tiled(problem, handle, device);
}

}  // namespace ember::ops::cuda
#endif  // EMBER_WITH_CUDA
