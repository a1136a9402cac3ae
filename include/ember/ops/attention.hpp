// Scaled dot-product attention, multi-head, with an optional causal mask: softmax(q k^T * scale)
// v per head, the forward saving each query row's log-sum-exp and the backward recomputing the
// probabilities from it (flash-attention style), in a fixed order: the same bits on every run.
#pragma once

#include <string>

#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"

namespace ember::ops {

// The CUDA forward's kernel. automatic: the tensor-core one (mma.sync, flash-attention 2's
// schedule: the probabilities are rounded to the operands' type before they multiply the values,
// as in every fused 16-bit attention) for f16 and bf16 with head dims 32, 64 and 128 and a
// 16-byte aligned qkv; the SIMT one (f32 arithmetic throughout) otherwise. simt forces the SIMT
// kernel; tensor_core forces the tensor-core one (an Error where it does not apply). The
// backward follows the option on tensor cores for head dims 32 and 64 (with a 16-byte aligned
// dout too; dS is rounded like the probabilities, so in f16 a |dS| beyond 65504 overflows and
// one below ~6e-8 flushes, as in other fused attention), and runs the SIMT kernels otherwise,
// forced or not; either recomputes the probabilities in f32 from the saved log-sum-exp. cudnn:
// cuDNN's fused attention (its graph API, libcudnn loaded at run time), forward and
// deterministic backward, for f16 and bf16 with 16-byte aligned tensors where cuDNN's support
// check takes the case; an Error naming why where it cannot run (cudnn_attention_unavailable()).
// cuDNN's log-sum-exp is ember's (natural log, of the scaled scores), but its arithmetic is its
// own: run the backward with the forward's kernel. automatic takes cuDNN wherever it can run the
// case's forward and backward (faster on an H100; docs/transformer.md), and ember's kernels
// elsewhere (the emulator, f32, misaligned tensors, no libcudnn).
// EMBER_ATTENTION_KERNEL=simt|tensor_core|cudnn replaces automatic for a whole run. The CPU
// ignores the option.
enum class AttentionKernel { automatic, simt, tensor_core, cudnn };

struct AttentionOptions {
  bool causal = true;  // query t sees keys 0..t (GPT); false: every key
  float scale = 0.0f;  // the scores' factor; 0 means 1 / sqrt(head dim)
  AttentionKernel kernel = AttentionKernel::automatic;
};

// qkv [B, T, 3, H, D]: the queries, keys and values of each position side by side, as one fused
// projection [B, T, 3 * H * D] writes them (f32, f16 or bf16; 1 <= D <= 256). out [B, T, H, D]
// in qkv's dtype; lse [B, H, T] f32, each query row's log-sum-exp of its scaled scores, which the
// backward needs. Arithmetic in f32 (the scores, softmax and accumulations): the CPU with GEMMs
// per head, in blocks of 64 query rows, a GPU with ember's kernels (an online softmax); the two
// agree within f32 rounding, and each gives the same bits on every run. 16-bit operands on a
// GPU's tensor cores (AttentionKernel), and on the CPU for T >= 1024 where oneDNN has native
// 16-bit kernels, multiply with the probabilities rounded to the operands' type, as fused
// attention does: they agree with the f32 arithmetic within that rounding. A row whose scores
// are all -inf comes out nan with lse -inf (no key to attend to); rows with nan inputs come out
// nan. On the CPU and on tensor cores a non-finite value can also reach what the causal mask
// hides from it within its block of 64 positions (within cuDNN's tile of 128 keys) (a masked
// weight 0 times inf or nan is nan in the products): a key's or value's, the rows before it; a
// query's or dout's, the gradients of the keys and values after it. The SIMT kernels never read
// masked positions.
void attention_forward(Stream& stream, const TensorView& out, const TensorView& lse,
                       const TensorView& qkv, const AttentionOptions& options = {});

// dqkv [B, T, 3, H, D] (qkv's dtype, written, not accumulated) from dout [B, T, H, D] (out's
// dtype), given the forward's qkv, out and lse and the same options.
void attention_backward(Stream& stream, const TensorView& dqkv, const TensorView& dout,
                        const TensorView& qkv, const TensorView& out, const TensorView& lse,
                        const AttentionOptions& options = {});

// Decoding with a key/value cache (nn::KvCache): cache [B, capacity, 3, H, D] holds the fused
// qkv of positions 0 .. length - 1; out [B, Tq, H, D] (cache's dtype) gets the attention of the
// last Tq of them (1 <= Tq <= length <= capacity), each query over the keys up to its own
// position (causal) or over all `length`. No log-sum-exp: this is inference. The same arithmetic
// as attention_forward on each backend, so a cached decode agrees with a full forward within
// rounding.
void attention_decode(Stream& stream, const TensorView& out, const TensorView& cache,
                      int64_t length, const AttentionOptions& options = {});

// Why AttentionKernel::cudnn cannot run in this process ("" when it can): a build without the
// cuDNN frontend's headers (a CPU-only or the emulated build), or libcudnn missing or older
// than 9.5. A case cuDNN does not support is found at the call.
std::string cudnn_attention_unavailable();

}  // namespace ember::ops
