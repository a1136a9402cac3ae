// multi_tensor: one kernel launch applies a per-element update to many tensors at once (the
// optimizers' "fused"/"foreach" updates), as PyTorch's multi_tensor_apply does.
//
// Each tensor has kDepth f32 operands of the same length (slot 0 the parameter, slot 1 its
// gradient, then optimizer state). Tensors are cut into chunks of kMultiTensorChunk elements;
// one block updates one chunk. A MultiTensorBatch, passed by value in the kernel's parameter
// space (4 KiB on every architecture), holds up to kMaxTensors tensors' pointers and a table
// mapping each block to (tensor, chunk); plan_multi_tensor_batches fills batches and starts a
// new one only when a batch's tensor list or block table is full.
//
// Slot 1 (the gradient) is read-only: the kernel writes back every other slot. A batch with
// copies (kCopies: the optimizers' steps) also writes each tensor's 16-bit copy of slot 0 where
// it has one (copy[t], rounded as ops::cast rounds: autocast's working copy of a weight), so that
// the copy is current after the step without a cast of its own.
//
// The op (ember/train/step_op.hpp's StepOp) has begin() -> a Block of per-launch values that
// every thread derives at its block's start (Block::skip: do nothing), publish(block), called
// once by the first thread of the first block, and op(block, x) per element.
#pragma once

#include <cstdint>
#include <utility>

#include "ember/core/dtype.hpp"
#include "ember/core/launch.hpp"
#include "ember/core/macros.hpp"
#include "ember/kernels/map.cuh"  // map_detail::encode: 16-bit rounding as ops::cast

namespace ember::kernels {

constexpr int kMultiTensorThreads = 256;
constexpr int64_t kMultiTensorChunk = 32768;  // elements per block: 128 per thread
constexpr int kMultiTensorMaxBlocks = 320;

// Tensors per batch for kDepth operand slots (and a copy each with kCopies), chosen to keep a
// batch under 4 KiB.
template <int kDepth, bool kCopies = false>
constexpr int multi_tensor_capacity() {
  static_assert(kDepth >= 2 && kDepth <= 5, "multi_tensor: 2 to 5 operands per tensor");
  if constexpr (kCopies) return kDepth == 2 ? 64 : kDepth == 3 ? 56 : kDepth == 4 ? 48 : 36;
  return kDepth == 2 ? 96 : kDepth == 3 ? 64 : kDepth == 4 ? 48 : 36;
}

template <int kDepth, bool kCopies = false>
struct MultiTensorBatch {
  static constexpr int kMaxTensors = multi_tensor_capacity<kDepth, kCopies>();
  static constexpr int kCopySlots = kCopies ? kMaxTensors : 1;
  float* data[kDepth][kMaxTensors];
  int64_t numel[kMaxTensors];
  void* copy[kCopySlots];                      // kCopies: tensor t's 16-bit copy of slot 0, or null
  DType copy_dtype[kCopySlots];                // and its dtype (bf16 or f16)
  int32_t block_chunk[kMultiTensorMaxBlocks];  // which chunk of its tensor block b updates
  uint8_t block_tensor[kMultiTensorMaxBlocks];  // which tensor of the batch block b updates
};

// CUDA's limit on a kernel's parameters is 4 KiB before CUDA 12.1; leave room for the update's
// own scalars.
template <bool kCopies>
constexpr bool multi_tensor_batches_fit() {
  return sizeof(MultiTensorBatch<2, kCopies>) <= 3968 &&
         sizeof(MultiTensorBatch<3, kCopies>) <= 3968 &&
         sizeof(MultiTensorBatch<4, kCopies>) <= 3968 &&
         sizeof(MultiTensorBatch<5, kCopies>) <= 3968;
}
static_assert(multi_tensor_batches_fit<false>() && multi_tensor_batches_fit<true>(),
              "a MultiTensorBatch must fit CUDA's 4 KiB of kernel parameters");

// Packs `count` tensors into batches and calls launch(batch, blocks) for each: tensor t has
// operands pointers(t)[0..kDepth) and numel(t) elements (empty tensors are skipped), and with
// kCopies the copy copy_of(t) (a std::pair<void*, DType>, null for none). A tensor that does not
// fit a batch's block table continues in the next batch. max_tensors and max_blocks (at most the
// batch's capacities) let tests exercise the packing with small numbers; chunk is the elements
// per block.
template <int kDepth, bool kCopies, class Pointers, class Numel, class CopyOf, class Launch>
void plan_multi_tensor_batches_with(int64_t count, Pointers&& pointers, Numel&& numel,
                                    CopyOf&& copy_of, Launch&& launch, int max_tensors,
                                    int max_blocks, int64_t chunk) {
  MultiTensorBatch<kDepth, kCopies> batch{};
  int tensors = 0, blocks = 0;
  for (int64_t t = 0; t < count; ++t) {
    const int64_t n = numel(t);
    if (n == 0) continue;
    const auto& ptrs = pointers(t);
    auto add_tensor = [&] {
      for (int d = 0; d < kDepth; ++d) batch.data[d][tensors] = ptrs[d];
      batch.numel[tensors] = n;
      if constexpr (kCopies) {
        const auto [copy, dtype] = copy_of(t);
        batch.copy[tensors] = copy;
        batch.copy_dtype[tensors] = dtype;
      }
      ++tensors;
    };
    add_tensor();
    const int64_t chunks = (n + chunk - 1) / chunk;
    for (int64_t c = 0; c < chunks; ++c) {
      batch.block_tensor[blocks] = static_cast<uint8_t>(tensors - 1);
      batch.block_chunk[blocks] = static_cast<int32_t>(c);
      ++blocks;
      const bool last_chunk = c == chunks - 1;
      if (blocks == max_blocks || (tensors == max_tensors && last_chunk)) {
        launch(batch, blocks);
        blocks = 0;
        tensors = 0;
        if (!last_chunk) add_tensor();  // the rest of this tensor goes in the next batch
      }
    }
  }
  if (blocks > 0) launch(batch, blocks);
}

template <int kDepth, class Pointers, class Numel, class Launch>
void plan_multi_tensor_batches(int64_t count, Pointers&& pointers, Numel&& numel, Launch&& launch,
                               int max_tensors = MultiTensorBatch<kDepth>::kMaxTensors,
                               int max_blocks = kMultiTensorMaxBlocks,
                               int64_t chunk = kMultiTensorChunk) {
  plan_multi_tensor_batches_with<kDepth, false>(
      count, pointers, numel, [](int64_t) { return std::pair<void*, DType>{}; }, launch,
      max_tensors, max_blocks, chunk);
}

// 16 bytes, aligned: nvcc turns a load of one into a single 128-bit global load.
struct alignas(16) Float4 {
  float v[4];
};

// Four f32 values into 16-bit elements at p (8-byte aligned), as ops::cast rounds them.
__device__ __forceinline__ void store_copy4(uint16_t* p, DType dtype, const Float4& v) {
  map_detail::Bits64 w;
  w.x = map_detail::encode(dtype, v.v[0]) | (map_detail::encode(dtype, v.v[1]) << 16);
  w.y = map_detail::encode(dtype, v.v[2]) | (map_detail::encode(dtype, v.v[3]) << 16);
  *reinterpret_cast<map_detail::Bits64*>(p) = w;
}

// Block b updates chunk block_chunk[b] of tensor block_tensor[b]: op(block, x) on the kDepth values
// x[0..kDepth) of each element. 128-bit loads and stores when every operand of the tensor is
// 16-byte aligned (chunks start at multiples of 4 elements, so they stay aligned), else scalar.
template <class Op, int kDepth, bool kCopies = false>
__global__ void __launch_bounds__(kMultiTensorThreads)
    multi_tensor_kernel(MultiTensorBatch<kDepth, kCopies> batch, int64_t chunk, Op op) {
  const auto block = op.begin();
  if (blockIdx.x == 0 && threadIdx.x == 0) op.publish(block);
  if (block.skip) return;
  const int t = batch.block_tensor[blockIdx.x];
  const int64_t begin = static_cast<int64_t>(batch.block_chunk[blockIdx.x]) * chunk;
  const int64_t left = batch.numel[t] - begin;
  const int64_t n = left < chunk ? left : chunk;
  float* ptr[kDepth];
  bool aligned = true;
  EMBER_PRAGMA_UNROLL_HOST(4)
  for (int d = 0; d < kDepth; ++d) {
    ptr[d] = batch.data[d][t] + begin;
    aligned = aligned && reinterpret_cast<uintptr_t>(ptr[d]) % 16 == 0;
  }
  // kCopies: the tensor's 16-bit copy of slot 0 (null: none), 8-byte aligned with the rest.
  uint16_t* copy = nullptr;
  DType copy_dtype = DType::bf16;
  if constexpr (kCopies) {
    copy = static_cast<uint16_t*>(batch.copy[t]);
    copy_dtype = batch.copy_dtype[t];
    if (copy != nullptr) {
      copy += begin;
      aligned = aligned && reinterpret_cast<uintptr_t>(copy) % 8 == 0;
    }
  }
  const int64_t vector_end = aligned ? n / 4 * 4 : 0;
  for (int64_t i = 4 * static_cast<int64_t>(threadIdx.x); i < vector_end;
       i += 4 * static_cast<int64_t>(blockDim.x)) {
    Float4 v[kDepth];
    EMBER_PRAGMA_UNROLL_HOST(4)
    for (int d = 0; d < kDepth; ++d) v[d] = *reinterpret_cast<const Float4*>(ptr[d] + i);
    EMBER_PRAGMA_UNROLL_HOST(4)
    for (int e = 0; e < 4; ++e) {
      float x[kDepth];
      EMBER_PRAGMA_UNROLL_HOST(4)
      for (int d = 0; d < kDepth; ++d) x[d] = v[d].v[e];
      op(block, x);
      EMBER_PRAGMA_UNROLL_HOST(4)
      for (int d = 0; d < kDepth; ++d) v[d].v[e] = x[d];
    }
    EMBER_PRAGMA_UNROLL_HOST(4)
    for (int d = 0; d < kDepth; ++d) {
      if (d != 1) *reinterpret_cast<Float4*>(ptr[d] + i) = v[d];
    }
    if constexpr (kCopies) {
      if (copy != nullptr) store_copy4(copy + i, copy_dtype, v[0]);
    }
  }
  for (int64_t i = vector_end + threadIdx.x; i < n; i += blockDim.x) {
    float x[kDepth];
    EMBER_PRAGMA_UNROLL_HOST(4)
    for (int d = 0; d < kDepth; ++d) x[d] = ptr[d][i];
    op(block, x);
    EMBER_PRAGMA_UNROLL_HOST(4)
    for (int d = 0; d < kDepth; ++d) {
      if (d != 1) ptr[d][i] = x[d];
    }
    if constexpr (kCopies) {
      if (copy != nullptr) copy[i] = static_cast<uint16_t>(map_detail::encode(copy_dtype, x[0]));
    }
  }
}

// Elements per block for an elementwise op over `total` elements: about 256 blocks, so that a
// small model's step spreads over the GPU (200 k parameters in chunks of 32768 made 14 blocks
// whose threads looped 32 times: 70 us on an H100, latency, not bandwidth), at most
// kMultiTensorChunk (large models: as many blocks as before, one launch up to 8 M elements), a
// multiple of 4 x kMultiTensorThreads (whole 128-bit rounds of a block). The result of an
// elementwise op does not depend on it.
inline int64_t multi_tensor_chunk(int64_t total) {
  constexpr int64_t kRound = 4 * kMultiTensorThreads, kTargetBlocks = 256;
  const int64_t per_block = (total + kTargetBlocks - 1) / kTargetBlocks;
  const int64_t chunk = (per_block + kRound - 1) / kRound * kRound;
  return chunk < kRound ? kRound : (chunk > kMultiTensorChunk ? kMultiTensorChunk : chunk);
}

// Enqueues op (elementwise: each element's update independent of the others) over every element
// of `count` tensors (see plan_multi_tensor_batches_with for pointers, numel and copy_of), in
// chunks of multi_tensor_chunk: one launch per batch, usually one in all, and one empty block
// when every tensor is empty (so that the op's publish() still runs). Returns the launches made.
template <int kDepth, bool kCopies, class Op, class Pointers, class Numel, class CopyOf>
int launch_multi_tensor_with(int64_t count, Pointers&& pointers, Numel&& numel, CopyOf&& copy_of,
                             const Op& op, cudaStream_t stream) {
  using Batch = MultiTensorBatch<kDepth, kCopies>;
  int64_t total = 0;
  for (int64_t t = 0; t < count; ++t) total += numel(t);
  const int64_t chunk = multi_tensor_chunk(total);
  int launches = 0;
  plan_multi_tensor_batches_with<kDepth, kCopies>(
      count, pointers, numel, copy_of,
      [&](const Batch& batch, int blocks) {
        launch(multi_tensor_kernel<Op, kDepth, kCopies>, dim3(static_cast<unsigned>(blocks)),
               dim3(kMultiTensorThreads), 0, stream, batch, chunk, op);
        ++launches;
      },
      Batch::kMaxTensors, kMultiTensorMaxBlocks, chunk);
  if (launches == 0) {  // nothing to update: one empty block still runs begin() and publish()
    launch(multi_tensor_kernel<Op, kDepth, kCopies>, dim3(1), dim3(kMultiTensorThreads), 0, stream,
           Batch{}, kMultiTensorChunk, op);
    launches = 1;
  }
  return launches;
}

template <int kDepth, class Op, class Pointers, class Numel>
int launch_multi_tensor(int64_t count, Pointers&& pointers, Numel&& numel, const Op& op,
                        cudaStream_t stream) {
  return launch_multi_tensor_with<kDepth, false>(
      count, pointers, numel, [](int64_t) { return std::pair<void*, DType>{}; }, op, stream);
}

}  // namespace ember::kernels
