// MatmulProblem: one (batched) GEMM and its fused epilogue, as every matmul kernel and backend
// receives it. Plain data, usable from host code and device code alike; ops::matmul builds it
// from tensors after checking them.
//
// For each batch entry b in [0, batch), with op(A) [m, k] and op(B) [k, n]:
//   t   = alpha * op(A_b) op(B_b) + beta * C_b + bias     beta == 0: C is never read
//   t   = t * act'(activation_input_b)                    if activation_grad != none (backward)
//   pre = t                                               if pre_activation.data (saved, [m, n])
//   D_b = output_scale * act(t) + residual_b              written over C_b
//   bias_grad[i] = sum_k op(A)[i, k] + bias_grad_beta * bias_grad[i]
//                                                         if bias_grad.data (batch == 1 only)
// bias_grad is Linear's bias gradient when op(A) = dY^T: it is computed by a separate
// deterministic reduction in the tiled backend and by cuBLASLt's BGRAD epilogue there.
// All arithmetic in f32; each operand is read and written in its own element type.
#pragma once

#include <cstdint>

#include "ember/core/dtype.hpp"

#if defined(EMBER_SIMT)
#include <vector>

#include "ember/simt/race_check.hpp"
#endif

namespace ember::kernels {

enum class EpilogueActivation : int32_t { none, relu, gelu };

// A row-major [rows, cols] matrix per batch entry. data == nullptr: the operand is absent.
struct MatrixRef {
  void* data = nullptr;
  DType type = DType::f32;
  int64_t ld = 0;            // elements between consecutive rows (>= cols)
  int64_t batch_stride = 0;  // elements between batch entries; 0: one matrix shared by all
};

struct MatmulProblem {
  int64_t m = 0, n = 0, k = 0;
  int64_t batch = 1;
  MatrixRef a;  // [m, k], or [k, m] when trans_a
  MatrixRef b;  // [k, n], or [n, k] when trans_b
  bool trans_a = false;
  bool trans_b = false;
  MatrixRef c;  // [m, n]: read when beta != 0, always written
  float alpha = 1.0f;
  float beta = 0.0f;
  MatrixRef bias;  // a row vector [n] (ld and batch_stride ignored)
  EpilogueActivation activation = EpilogueActivation::none;
  EpilogueActivation activation_grad = EpilogueActivation::none;
  MatrixRef activation_input;  // [m, n]: the forward pre-activation, read by activation_grad
  MatrixRef pre_activation;    // [m, n]: receives t before the activation
  MatrixRef residual;          // [m, n]: added after the activation and the output scale
  float output_scale = 1.0f;
  MatrixRef bias_grad;          // [m]: receives the row sums of op(A)
  float bias_grad_beta = 0.0f;  // 1: accumulate into bias_grad; 0: overwrite (never read)
};

#if defined(EMBER_SIMT)
// For the emulator's stream-race checker: what a kernel given this problem reads and writes.
inline void simt_accesses(const MatmulProblem& p, std::vector<simt::Access>& out) {
  auto add = [&](const MatrixRef& r, bool write) {
    if (r.data != nullptr) out.push_back({r.data, 0, write});
  };
  add(p.a, false);
  add(p.b, false);
  add(p.bias, false);
  add(p.activation_input, false);
  add(p.residual, false);
  if (p.beta != 0.0f) add(p.c, false);
  add(p.c, true);
  add(p.pre_activation, true);
  add(p.bias_grad, true);
}
#endif

}  // namespace ember::kernels
