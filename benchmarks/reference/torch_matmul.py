"""PyTorch's CPU GEMM on bench_matmul's CPU shapes (C = A @ B, A [M, K], B [K, N]) in GFLOP/s:
f32 (MKL or oneDNN, whichever PyTorch dispatches to) and bf16 (oneDNN)."""

import torch

from common import argument_parser, emit, parse_args, seconds_per_call

SHAPES = [(256, 256, 256), (512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048),
          (1024, 768, 3072), (4096, 1024, 256)]


def main():
    args = parse_args(argument_parser())
    torch.manual_seed(0)
    for name in args.dtypes:
        dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[name]
        for m, n, k in SHAPES:
            a = torch.empty(m, k).uniform_(-1, 1).to(dtype)
            b = torch.empty(k, n).uniform_(-1, 1).to(dtype)
            c = torch.empty(m, n, dtype=dtype)
            t = seconds_per_call(lambda: torch.mm(a, b, out=c), args.min_time)
            emit("matmul", f"cpu_{name}/{m}x{n}x{k}", 2.0 * m * n * k / t / 1e9, "GFLOP/s")


if __name__ == "__main__":
    main()
