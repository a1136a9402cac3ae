"""bench_train_step's work in PyTorch: one MLP training step (64 inputs, depth 4, 10 classes,
ReLU, cross-entropy, AdamW with fused=True, as the issue's goal names) at the same widths and
batches, f32 and bf16 autocast, in samples/s."""
import argparse

import torch

from common import emit, seconds_per_call, setup_threads
from models import mlp, optimizer_variant, train_step_fn

SIZES = [(256, 4, 128), (512, 4, 256), (1024, 4, 512), (2048, 4, 512)]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--min-time", type=float, default=0.5)
    parser.add_argument("--optimizer", default="fused", choices=["fused", "foreach", "forloop"])
    args = parser.parse_args()
    setup_threads()
    for width, depth, batch in SIZES:
        for dtype in ("f32", "bf16"):
            torch.manual_seed(1)
            model = mlp(64, width, depth, 10)
            step = train_step_fn(model, optimizer_variant(model.parameters(), args.optimizer),
                                 dtype)
            x = torch.empty(batch, 64).uniform_(-1, 1)
            y = torch.arange(batch) % 10
            t = seconds_per_call(lambda: step(x, y).item(), args.min_time)
            emit("train_step", f"cpu_step_{dtype}/width:{width}/depth:{depth}/batch:{batch}",
                 batch / t, "samples/s")


if __name__ == "__main__":
    main()
