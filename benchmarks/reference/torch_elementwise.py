"""bench_elementwise's work in PyTorch: y = relu(x * 0.5 + bias) over [N / 1024, 1024] f32, bias a
row; eager (three kernels) and torch.compile'd (one fused loop), and y.copy_(x), in GB/s counting
8 bytes per element (4 read, 4 written) as bench_elementwise does."""

import torch

from common import argument_parser, emit, parse_args, seconds_per_call

SIZES = [1 << 18, 1 << 22, 1 << 24, 1 << 26]


def main():
    parser = argument_parser()
    parser.add_argument("--no-compile", action="store_true")
    args = parse_args(parser)
    compiled = None if args.no_compile else torch.compile(lambda x, b: torch.relu(x * 0.5 + b))
    for n in SIZES:
        x = torch.empty(n // 1024, 1024).uniform_(-1, 1)
        bias = torch.empty(1024).uniform_(-1, 1)
        y = torch.empty_like(x)
        rate = lambda t: 8.0 * n / t / 1e9
        emit("elementwise", f"chain/torch_eager/{n}",
             rate(seconds_per_call(lambda: torch.relu(x * 0.5 + bias), args.min_time)), "GB/s")
        if compiled is not None:
            emit("elementwise", f"chain/torch_compiled/{n}",
                 rate(seconds_per_call(lambda: compiled(x, bias), args.min_time)), "GB/s")
        emit("elementwise", f"chain/torch_copy/{n}",
             rate(seconds_per_call(lambda: y.copy_(x), args.min_time)), "GB/s")


if __name__ == "__main__":
    main()
