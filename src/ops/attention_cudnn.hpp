// cuDNN's fused scaled dot-product attention (AttentionKernel::cudnn), for ops/attention.cu: the
// forward (saving the log-sum-exp, as ember's kernels do) and the deterministic backward, on
// ember's layouts (qkv [B, T, 3, H, D], out [B, T, H, D], lse [B, H, T] f32).
#pragma once

#include <cstdint>
#include <string>

#include "ember/core/dtype.hpp"
#include "ember/core/stream.hpp"

namespace ember::ops::cudnn_attention {

struct Case {
  int64_t batch = 0, seq = 0, heads = 0, dim = 0;
  DType dtype = DType::bf16;
  bool causal = true;
  float scale = 0;  // the scores' factor (resolved: never 0)
};

// Why cuDNN cannot run attention here ("" when it can): a build without the cuDNN frontend (the
// emulated build never has it), libcudnn missing or too old, or no GPU.
std::string unavailable();

// Why cuDNN cannot run this case on the stream's device ("" when it can): its dtype, or what
// cuDNN's own support check says (head dims, sizes, the GPU). The plan is built and cached here.
std::string unsupported(Stream& stream, const Case& c, bool backward);

// The calls; each throws an ember::Error naming cuDNN's message when cuDNN fails. The pointers
// are 16-byte aligned (the caller checks).
void forward(Stream& stream, const Case& c, const void* qkv, void* out, float* lse);
void backward(Stream& stream, const Case& c, const void* qkv, const void* out, const float* lse,
              const void* dout, void* dqkv);

}  // namespace ember::ops::cudnn_attention
