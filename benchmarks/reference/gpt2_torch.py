"""bench_gpt2's work in PyTorch: the same GPT-2 (pre-norm blocks, GELU tanh MLP, tied head,
nanoGPT's initialization), the same token pattern, one training step (forward, cross-entropy,
backward, fused AdamW with beta2 0.95) in f32 and under CPU bf16 autocast, with
F.scaled_dot_product_attention; eager, and torch.compile'd with --compile. Tokens/s, named as
bench_gpt2's rows. With --device cuda: bench_gpt2's GPU cases under CUDA bf16 autocast (f32 keeps
PyTorch's default: no TF32, as ember)."""
import math
import re
import sys

import torch
import torch.nn.functional as F

from common import argument_parser, emit, parse_args, seconds_per_call

# `padded`: the table's rows, as ember's make_gpt and nanoGPT pad GPT-2's 50257 tokens to 50304
# (nanoGPT trains the padding as classes no target names; ember masks them: the same products).
CONFIGS = {"small": dict(vocab=256, padded=256, context=256, layers=4, heads=4, dim=256),
           "d12": dict(vocab=50257, padded=50304, context=1024, layers=12, heads=12, dim=768)}
CASES = {"cpu": [("small", 128, 16), ("small", 256, 8), ("small", 1024, 2), ("d12", 256, 1),
                 ("d12", 1024, 1)],
         "cuda": [("small", 256, 32), ("small", 1024, 8), ("d12", 256, 32), ("d12", 1024, 8)]}


class Block(torch.nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = torch.nn.LayerNorm(dim)
        self.c_attn = torch.nn.Linear(dim, 3 * dim)
        self.attn_proj = torch.nn.Linear(dim, dim)
        self.ln_2 = torch.nn.LayerNorm(dim)
        self.c_fc = torch.nn.Linear(dim, 4 * dim)
        self.mlp_proj = torch.nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).contiguous().view(b, t, c))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class Gpt(torch.nn.Module):
    def __init__(self, vocab, padded, context, layers, heads, dim):
        super().__init__()
        self.wte = torch.nn.Embedding(padded, dim)
        self.wpe = torch.nn.Embedding(context, dim)
        self.h = torch.nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln_f = torch.nn.LayerNorm(dim)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                torch.nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers))
            elif p.dim() == 2:
                torch.nn.init.normal_(p, 0.0, 0.02)
            elif name.endswith("bias") and "ln_" not in name:
                torch.nn.init.zeros_(p)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.h:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)  # the tied head


def main():
    parser = argument_parser()
    parser.add_argument("--compile", action="store_true", help="also torch.compile'd")
    parser.add_argument("--compile-rows", default="",
                        help="a regex: compile only the rows it matches (compiling takes minutes)")
    parser.add_argument("--models", default="small|d12", help="|-separated: small, d12")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = parse_args(parser)
    dev = args.device
    for model_name, seq, batch in CASES[dev]:
        if model_name not in args.models.split("|"):
            continue
        cfg = dict(CONFIGS[model_name])
        cfg["context"] = max(cfg["context"], seq)  # the small model at T = 1024, as bench_gpt2
        tokens = (torch.arange(batch * (seq + 1)) * 7919) % cfg["vocab"]
        tokens = tokens.view(batch, seq + 1)
        x, y = tokens[:, :-1].contiguous().to(dev), tokens[:, 1:].reshape(-1).to(dev)
        for dtype in args.dtypes:
            row = f"{dev}_gpt2_{dtype}/{model_name}/T:{seq}/batch:{batch}"
            compile_it = args.compile and re.search(args.compile_rows, row)
            variants = [("eager", False)] + ([("compiled", True)] if compile_it else [])
            for variant, compiled in variants:
                torch.manual_seed(1)
                model = Gpt(**cfg).to(dev)
                opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), fused=True)
                forward = torch.compile(model) if compiled else model

                def step():
                    opt.zero_grad(set_to_none=True)
                    with torch.autocast(dev, dtype=torch.bfloat16, enabled=dtype == "bf16"):
                        logits = forward(x)
                    loss = F.cross_entropy(logits.float().view(-1, cfg["padded"]), y)
                    loss.backward()
                    opt.step()
                    return loss

                try:
                    t = seconds_per_call(lambda: step().item(), args.min_time)
                except Exception as error:  # torch.compile needs a compiler and Triton
                    if not compiled:
                        raise
                    print(f"{row}: torch.compile failed: {error}", file=sys.stderr)
                    continue
                suffix = "" if variant == "eager" else "_compiled"
                emit("gpt2", row + suffix, batch * seq / t, "tokens/s")


if __name__ == "__main__":
    main()
