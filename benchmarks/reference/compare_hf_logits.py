#!/usr/bin/env python3
"""ember's GPT-2 against Hugging Face transformers' on the same weights, both ways.

A random GPT2LMHeadModel (transformers' own initialization) is saved with save_pretrained;
ember's gpt2_logits loads that model.safetensors, runs a token sequence and writes its logits,
and exports the model back in transformers' layout; transformers loads the export. Both sets of
logits must agree with transformers' to f32 rounding (max |difference| <= 1e-4 x the logits'
largest magnitude).

usage: compare_hf_logits.py GPT2_LOGITS [--device cpu|cuda] [--layers N] [--width N] [--heads N]
                            [--vocab N] [--tokens N]

PyTorch and transformers are not build dependencies: without them this prints why and exits 77
(ctest's skip). Set EMBER_REFERENCE_PYTHON to a Python that has them (a venv) to run it there.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

SKIP = 77


def reexec_or_skip(why):
    python = os.environ.get("EMBER_REFERENCE_PYTHON")
    if python and not os.environ.get("EMBER_REFERENCE_PYTHON_RUNNING"):
        os.environ["EMBER_REFERENCE_PYTHON_RUNNING"] = "1"  # once: no loop
        os.execv(python, [python, *sys.argv])
    print(f"skipped: {why} (set EMBER_REFERENCE_PYTHON to a Python with torch and transformers)")
    sys.exit(SKIP)


try:
    import torch
    import transformers
    from safetensors.torch import load_file
except ImportError as e:
    reexec_or_skip(f"cannot import {e.name}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tool", help="ember's gpt2_logits")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=300)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=48)
    a = ap.parse_args()

    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=a.vocab, n_positions=a.context, n_embd=a.width,
                                     n_layer=a.layers, n_head=a.heads,
                                     activation_function="gelu_new", resid_pdrop=0.0,
                                     embd_pdrop=0.0, attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(config).eval()
    # transformers' initialization leaves biases and LayerNorm at 0 and 1: give them values, so
    # that a bias or norm read from the wrong place shows.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    tokens = torch.randint(0, a.vocab, (a.tokens,), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = model(tokens[None]).logits[0].float()
    scale = want.abs().max().item()

    work = tempfile.mkdtemp(prefix="ember_hf_")
    try:
        hf_dir = os.path.join(work, "hf")
        model.save_pretrained(hf_dir, safe_serialization=True)
        out = os.path.join(work, "logits.safetensors")
        export_dir = os.path.join(work, "export")
        os.makedirs(export_dir)
        shutil.copy(os.path.join(hf_dir, "config.json"), export_dir)
        run = subprocess.run([a.tool, "--device", a.device, "--export",
                              os.path.join(export_dir, "model.safetensors"),
                              os.path.join(hf_dir, "model.safetensors"),
                              ",".join(str(t) for t in tokens.tolist()), out],
                             capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(f"gpt2_logits failed:\n{run.stdout}{run.stderr}")
        print(run.stdout.strip())
        got = load_file(out)["logits"]
        exported = transformers.GPT2LMHeadModel.from_pretrained(export_dir).eval()
        with torch.no_grad():
            again = exported(tokens[None]).logits[0].float()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    failed = False
    for what, logits in (("ember's logits", got), ("transformers on ember's export", again)):
        diff = (logits - want).abs().max().item()
        ok = logits.shape == want.shape and diff <= 1e-4 * max(scale, 1.0)
        failed |= not ok
        print(f"{what}: max |difference| {diff:.3g} (logits up to {scale:.3g}, "
              f"{list(logits.shape)}): {'ok' if ok else 'MISMATCH'}")
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    sys.exit(1 if failed else 0)


main()
