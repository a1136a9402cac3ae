// Embedding lookups: rows of a table picked by integer ids (GPT-2's token and position tables),
// and their deterministic backward.
#pragma once

#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"

namespace ember::ops {

// out [*ids.shape, D] = table [V, D] row ids[i] for every position i of ids (i32 or i64, any
// shape, at most 2^31 - 1 elements). table and out: f32, f16 or bf16 (out's rows are converted,
// rounding to nearest even; the same dtype copies the bits). An id outside [0, V) is an Error
// naming its row (its flat position in ids) and its value: on the CPU before out is written; on a
// CUDA device from the stream's next synchronize(), without a host wait, a bad row of out being
// nan meanwhile.
void embedding_forward(Stream& stream, const TensorView& out, const TensorView& table,
                       const TensorView& ids);

// dtable [V, D] (f32, f16 or bf16): row v = (accumulate ? row v : 0) + the rows of dout
// [*ids.shape, D] whose id is v, added in f32 in the order of their positions and rounded to
// dtable's dtype once. Rows no id names are left as they are when accumulating, else zeroed.
// Deterministic: no floating-point atomics, so the same bits on every run and at any thread
// count; the CPU and a GPU give the same bits too, except that the CPU flushes subnormal sums to
// zero by default (docs/cpu.md) and NaNs keep their NaN-ness, not their payload. Bad ids as in
// embedding_forward (their rows of dout are skipped).
void embedding_backward(Stream& stream, const TensorView& dtable, const TensorView& dout,
                        const TensorView& ids, bool accumulate = true);

}  // namespace ember::ops
