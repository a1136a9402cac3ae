#!/usr/bin/env bash
# Records the "checkpointed variable shape" allocation traces (bench_allocator --all) from
# train_gpt2: GPT-2 d12 (124M, vocab 50257), batch 4, each step's sequence length drawn from
# 256/512/768/1024, with each activation-checkpointing mode, bf16 and f16 autocast, gradient
# accumulation and DDP. Runs on the CPU (about 10 minutes on 2 cores); a GPU run records the
# same allocations with the CUDA backend's workspaces.
#
#   benchmarks/traces/record_gpt2_varlen.sh BUILD_DIR [OUT_DIR] [STEPS]
#
# A trace already in OUT_DIR is kept (delete it to record it again).
set -euo pipefail
build=${1:?usage: record_gpt2_varlen.sh BUILD_DIR [OUT_DIR] [STEPS]}
out=${2:-$(dirname "$0")/checkpointed_varlen}
steps=${3:-6}
mkdir -p "$out"
export OMP_WAIT_POLICY=passive
train="$build/examples/train_gpt2"
common=(--model d12 --seq 1024 --seq-lengths 256,512,768,1024 --batch 4 --steps "$steps"
        --log-every 1 --eval-every 1000 --eval-batches 2 --sample-tokens 0 --device cpu)

record() {  # record NAME [train_gpt2 options]
  local name=$1
  shift
  if [ -s "$out/$name.trace.gz" ]; then
    echo "== $name: kept"
    return 0
  fi
  echo "== $name: $*"
  "$train" "${common[@]}" "$@" --record-allocations "$out/$name.trace.gz"
}

record gpt2d12_varlen_none_bf16 --amp bf16 --checkpoint none
record gpt2d12_varlen_full_bf16 --amp bf16 --checkpoint full
record gpt2d12_varlen_selective_bf16 --amp bf16 --checkpoint selective
record gpt2d12_varlen_auto_bf16 --amp bf16 --checkpoint auto:2000
record gpt2d12_varlen_full_f16 --amp f16 --checkpoint full
record gpt2d12_varlen_accumulate_full_bf16 --amp bf16 --checkpoint full --batch 8 --accumulate 2
# DDP: rank 0's trace (each rank's is alike); the rank-1 file is removed.
ddp=gpt2d12_varlen_ddp_selective_bf16
if [ -s "$out/$ddp.trace.gz" ]; then
  echo "== $ddp: kept"
  exit 0
fi
echo "== $ddp (2 ranks)"
OMP_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe -np 2 "$train" "${common[@]}" \
  --amp bf16 --checkpoint selective \
  --record-allocations "$out/$ddp.trace.gz"
rm -f "$out/$ddp.rank1.trace.gz"
