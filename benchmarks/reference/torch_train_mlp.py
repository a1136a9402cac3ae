"""train_mlp's default run in PyTorch: 10-class spirals (2 inputs; 16000 training samples),
an MLP of 4 x 256 ReLU layers, batch 128, AdamW (lr 2e-3, weight decay 1e-4) with cosine decay
to lr / 10 over 2000 steps, shuffled each epoch. Samples/s over the training steps, as
train_mlp reports them (validation excluded), for each PyTorch variant: eager with the default
(foreach) AdamW, eager with fused AdamW, and torch.compile'd model + fused AdamW."""
import argparse
import math
import time

import torch

from common import add_dtypes, emit, parse_args
from models import mlp, optimizer_variant, train_step_fn


def spirals(classes=10, points=2000, seed=1):
    g = torch.Generator().manual_seed(seed)
    n = classes * points
    t = torch.rand(n, generator=g)
    arm = torch.arange(n) // points
    angle = arm * (2 * math.pi / classes) + t * 3.0 + 0.2 * torch.randn(n, generator=g)
    x = torch.stack([t * torch.cos(angle), t * torch.sin(angle)], dim=1)
    return x, arm


def run(variant, dtype, steps):
    torch.manual_seed(1)
    x, y = spirals()
    order = torch.randperm(len(x))
    train = order[: int(0.8 * len(x))]
    model = mlp(2, 256, 4, 10)
    opt = optimizer_variant(model.parameters(), "foreach" if variant == "eager" else "fused",
                            lr=2e-3, weight_decay=1e-4)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps, eta_min=2e-4)
    if variant == "compiled":
        model = torch.compile(model)
    step = train_step_fn(model, opt, dtype)
    batch, cursor, total, perm = 128, 0, 0.0, torch.randperm(len(train))
    for s in range(1, steps + 1):
        if cursor + batch > len(train):
            perm, cursor = torch.randperm(len(train)), 0
        idx = train[perm[cursor:cursor + batch]]
        cursor += batch
        start = time.perf_counter()
        loss = step(x[idx], y[idx]).item()
        schedule.step()
        if s > 1 or variant != "compiled":  # the first compiled step compiles
            total += time.perf_counter() - start
    counted = steps if variant != "compiled" else steps - 1
    return batch * counted / total, loss


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--variants", default="eager,fused,compiled")
    add_dtypes(parser)
    args = parse_args(parser)
    for dtype in args.dtypes:
        for variant in args.variants.split(","):
            rate, loss = run(variant, dtype, args.steps)
            emit("train_mlp", f"train_mlp_{dtype}/torch_{variant}", rate, "samples/s")


if __name__ == "__main__":
    main()
