// Model FLOPs utilization (MFU): the FLOPs a training step's model arithmetic needs, per second,
// over the device's peak, as PaLM's appendix and nanoGPT/llm.c count them (recomputation by
// checkpointing is not counted: it is not model arithmetic).
#pragma once

#include <cstdint>
#include <optional>

#include "ember/core/device.hpp"
#include "ember/nn/module.hpp"
#include "ember/train/gpt.hpp"

namespace ember::train {

// FLOPs per trained token of a GPT (forward and backward): 6 per weight of every matrix product
// (the blocks' Linears and the tied head over `vocab`, not its padding; the position table is a
// lookup) plus the attention's
// scores and weighted sums, 12 x layers x seq x width (nanoGPT's count: causal masking is not
// subtracted).
double gpt_flops_per_token(const GptConfig& config, int64_t seq);

// The dense peak FLOP/s of `device` for products in `precision` (f16/bf16: tensor cores; f32:
// CUDA cores, no TF32, as ember's f32 matmul computes), from NVIDIA's datasheets for the GPUs
// ember is measured on: H100 SXM (and H200, GH200), H100 PCIe, A100. Unknown devices and the CPU:
// nullopt (pass a peak of your own, e.g. train_gpt2 --peak-tflops).
std::optional<double> peak_flops(const Device& device, nn::Precision precision);

}  // namespace ember::train
