#!/usr/bin/env python3
"""ember's CPU backend against PyTorch on the same work, in interleaved rounds on this machine.

Runs ember's benchmark (or example) and its PyTorch twin in this directory one after the other,
--rounds times, and prints the median of each and ember's ratio (>1: ember is faster):

  matmul       bench_matmul's cpu_f32 / cpu_bf16 rows  vs  torch_matmul.py (torch.mm)
  train_step   bench_train_step's cpu f32 / bf16 rows   vs  torch_train_step.py (fused AdamW)
  gpt2         bench_gpt2's cpu rows                      vs  gpt2_torch.py (eager; --compile too)
  elementwise  bench_elementwise's fused chain          vs  its own copy, and PyTorch's eager,
                                                            compiled chain and copy_
  train_mlp    train_mlp's default run, f32 and bf16    vs  torch_train_mlp.py's best variant
                                                            (eager, fused AdamW, compiled);
               and train_mlp with subnormals flushed against kept (the step-time cliff)

On a CPU without native bf16 arithmetic (neither avx512_bf16 nor amx_bf16 in /proc/cpuinfo:
AMD before Zen 4, most Intel CPUs before Sapphire Rapids) only the f32 rows run by default:
PyTorch's bf16 there is emulated, minutes per row, and a ratio to it measures nothing ember
should be held to (--dtypes f32,bf16 runs them anyway).

PyTorch is not a build dependency: run this with a Python that has it (python3 -m venv v;
v/bin/pip install torch; v/bin/python benchmarks/reference/compare.py --build build/release).

With --device cuda (on a GPU machine; tools/gpu_check runs it) the same for the GPU rows:
  train_step   bench_train_step's cuda f32 / bf16 rows, eager and CUDA graph  vs  PyTorch's
               eager step with fused AdamW, and its whole step in a CUDA graph
  gpt2         bench_gpt2's cuda rows  vs  gpt2_torch.py --device cuda (eager; --compile too)
--bin DIR takes the benchmarks from one directory (the GPU check's bin/), and
EMBER_BENCH_LD_LIBRARY_PATH, when set, is their LD_LIBRARY_PATH (PyTorch runs without it).
"""
import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def native_bf16():
    """Whether this CPU has bf16 dot products (AVX-512 BF16 or AMX), as /proc/cpuinfo says."""
    try:
        with open("/proc/cpuinfo") as f:
            return re.search(r"\b(avx512_bf16|amx_bf16)\b", f.read()) is not None
    except OSError:
        return True  # unknown: measure everything


def run(cmd, env=None):
    full_env = dict(os.environ, OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY", "passive"))
    full_env.update(env or {})
    out = subprocess.run(cmd, capture_output=True, text=True, env=full_env)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return out.stdout


def gbench(binary, pattern, counter, min_time, env=None, strip="/ember"):
    """Google Benchmark rows matching pattern: {name without `strip` and /real_time: counter}."""
    if "EMBER_BENCH_LD_LIBRARY_PATH" in os.environ:
        env = dict(env or {}, LD_LIBRARY_PATH=os.environ["EMBER_BENCH_LD_LIBRARY_PATH"])
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        run([binary, f"--benchmark_filter={pattern}", f"--benchmark_out={out.name}",
             "--benchmark_out_format=json", f"--benchmark_min_time={min_time}"], env)
        rows = json.load(open(out.name))["benchmarks"]
    return {r["name"].replace(strip, "").replace("/real_time", ""): float(r[counter])
            for r in rows if counter in r and not r.get("error_occurred")}


def torch_script(python, script, *args):
    text = run([python, os.path.join(HERE, script), *args])
    return {r["name"]: r["value"] for r in map(json.loads, text.splitlines()) if r}


def train_mlp_rate(binary, amp, env=None):
    text = run([binary, "--amp", amp, "--log-every", "100000"], env)
    return float(re.search(r"\((\d+) samples/s\)", text).group(1))


def collect(rounds, measure):
    """measure() -> {name: value}, called `rounds` times; the median per name."""
    samples = {}
    for _ in range(rounds):
        for k, v in measure().items():
            samples.setdefault(k, []).append(v)
    return {k: statistics.median(v) for k, v in samples.items()}


def table(title, unit, rows):
    print(f"\n{title}")
    print(f"  {'work':<44} {'ember':>10} {'reference':>10}  {'ratio':>6}   ({unit})")
    for name, ours, ref, ref_name in rows:
        print(f"  {name:<44} {ours:10.1f} {ref:10.1f}  {ours / ref:6.2f}x  {ref_name}")


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build/release", help="ember's build directory")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--min-time", type=float, default=0.5, help="seconds per measurement")
    parser.add_argument("--only", default="matmul,train_step,elementwise,train_mlp,gpt2")
    parser.add_argument("--compile", action="store_true",
                        help="gpt2: also torch.compile'd (minutes of compiling per row)")
    parser.add_argument("--python", default=sys.executable, help="a Python with torch")
    parser.add_argument("--gpt2-models", default="small",
                        help="gpt2: the models, |-separated: small, d12 (seconds per step)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--bin", help="the benchmarks' directory (instead of --build's)")
    parser.add_argument("--dtypes", help="comma-separated, f32 and/or bf16 (default: both on a "
                        "GPU or a CPU with native bf16, else f32)")
    args = parser.parse_args()
    if args.dtypes is None:
        args.dtypes = "f32,bf16" if args.device == "cuda" or native_bf16() else "f32"
        if args.dtypes == "f32":
            print("bf16 rows skipped: this CPU has no native bf16 (--dtypes f32,bf16 runs them)")
    dtypes = args.dtypes.split(",")
    if any(d not in ("f32", "bf16") for d in dtypes) or len(set(dtypes)) != len(dtypes):
        parser.error(f"--dtypes {args.dtypes}: expected f32 and/or bf16, comma-separated")
    args.dtype_pattern = "|".join(dtypes)
    only = set(args.only.split(","))
    if args.device == "cuda":
        return compare_gpu(args, only)
    dt = args.dtype_pattern
    bench = lambda name: os.path.join(args.build, "benchmarks", name)
    example = lambda name: os.path.join(args.build, "examples", name)
    version = run([args.python, "-c", "import torch; print(torch.__version__, torch.get_num_threads())"])
    print(f"CPU: {cpu_model()}, {os.cpu_count()} logical CPUs; PyTorch {version.split()[0]}; "
          f"{args.rounds} interleaved rounds, medians")
    mt = str(args.min_time)

    def same_names(title, unit, ember_args, script, ref_name):
        """An ember benchmark and its PyTorch twin that name their rows alike: one table."""
        def measure():
            ours = gbench(bench(ember_args[0]), *ember_args[1:], mt)
            theirs = torch_script(args.python, script, "--min-time", mt, "--dtypes", args.dtypes)
            return {**{("ember", k): v for k, v in ours.items()},
                    **{("torch", k): v for k, v in theirs.items()}}
        m = collect(args.rounds, measure)
        table(title, unit, [(k, v, m[("torch", k)], ref_name) for (side, k), v in sorted(m.items())
                            if side == "ember" and ("torch", k) in m])

    if "matmul" in only:
        same_names("GEMM, C = A B (GFLOP/s): ember's CPU backend vs torch.mm", "GFLOP/s",
                   ("bench_matmul", f"^cpu_({dt})/ember/", "GFLOP/s"), "torch_matmul.py",
                   "torch.mm")
    if "train_step" in only:
        same_names("MLP training step (samples/s): ember vs PyTorch eager with fused AdamW",
                   "samples/s", ("bench_train_step", f"^cpu_step_({dt})/", "samples/s"),
                   "torch_train_step.py", "torch fused AdamW")

    if "elementwise" in only:
        def measure():
            ours = gbench(bench("bench_elementwise"), "^chain/(ember|copy)/", "bytes_per_second",
                          mt, strip="")
            theirs = torch_script(args.python, "torch_elementwise.py", "--min-time", mt)
            return {**{k: v / 1e9 for k, v in ours.items()}, **theirs}
        m = collect(args.rounds, measure)
        rows = []
        for k in sorted(m):
            if k.startswith("chain/ember/"):
                n = k.rsplit("/", 1)[1]
                rows.append((k, m[k], m[f"chain/copy/{n}"], "ember's copy (goal >= 0.9x)"))
                for ref in ("torch_compiled", "torch_eager", "torch_copy"):
                    if f"chain/{ref}/{n}" in m:
                        rows.append((k, m[k], m[f"chain/{ref}/{n}"], ref))
        table("Fused pointwise chain relu(x * s + bias), f32 (GB/s at 8 bytes per element)",
              "GB/s", rows)

    if "train_mlp" in only:
        def measure():
            out = {}
            for amp in dtypes:
                out[f"ember_{amp}"] = train_mlp_rate(example("train_mlp"), amp)
                out[f"ember_{amp}_kept"] = train_mlp_rate(example("train_mlp"), amp,
                                                          {"EMBER_FLUSH_DENORMALS": "0"})
            out.update(torch_script(args.python, "torch_train_mlp.py", "--dtypes", args.dtypes))
            return out
        m = collect(args.rounds, measure)
        rows = []
        for amp in dtypes:
            variants = {k: v for k, v in m.items() if k.startswith(f"train_mlp_{amp}/torch_")}
            best = max(variants, key=variants.get)
            rows.append((f"train_mlp --amp {amp}", m[f"ember_{amp}"], variants[best],
                         f"best PyTorch: {best.split('/')[1]} (goal >= 1.2x)"))
            for k, v in sorted(variants.items()):
                if k != best:
                    rows.append((f"train_mlp --amp {amp}", m[f"ember_{amp}"], v, k.split("/")[1]))
            rows.append((f"train_mlp --amp {amp}, subnormals kept", m[f"ember_{amp}_kept"],
                         m[f"ember_{amp}"], "flushed (default; goal: within 5%)"))
        table("train_mlp default run (samples/s over its 2000 training steps)", "samples/s", rows)

    if "gpt2" in only:
        def measure():
            ours = gbench(bench("bench_gpt2"), f"^cpu_gpt2_({dt})/ember/({args.gpt2_models})/",
                          "tokens/s", mt)
            theirs = torch_script(args.python, "gpt2_torch.py", "--min-time", mt,
                                  "--models", args.gpt2_models, "--dtypes", args.dtypes,
                                  *(["--compile"] if args.compile else []))
            return {**{("ember", k): v for k, v in ours.items()},
                    **{("torch", k): v for k, v in theirs.items()}}
        m = collect(args.rounds, measure)
        rows = []
        for (side, k), v in sorted(m.items()):
            if side != "ember":
                continue
            if ("torch", k) in m:
                rows.append((k, v, m[("torch", k)], "PyTorch eager (goal >= 1.2x)"))
            if ("torch", k + "_compiled") in m:
                rows.append((k, v, m[("torch", k + "_compiled")], "torch.compile (goal >= 1.0x)"))
        table("GPT-2 training step (tokens/s): ember vs PyTorch, fused AdamW, SDPA", "tokens/s",
              rows)


def compare_gpu(args, only):
    """The GPU rows, one round each (a lent GPU's minutes are few); same names on both sides."""
    bench = lambda name: os.path.join(args.bin or os.path.join(args.build, "benchmarks"), name)
    gpu = run([args.python, "-c", "import torch; print(torch.__version__, "
               "torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU')"])
    print(f"GPU rows; PyTorch {gpu.strip()}; 1 round, ember and PyTorch one after the other")
    mt = str(args.min_time)
    if "train_step" in only:
        ours = gbench(bench("bench_train_step"), f"^cuda_step_(graph_)?({args.dtype_pattern})/",
                      "samples/s", mt)
        theirs = torch_script(args.python, "torch_train_step.py", "--device", "cuda", "--graph",
                              "--min-time", mt, "--dtypes", args.dtypes)
        rows = []
        for k, v in sorted(ours.items()):
            if k in theirs:
                ref = "PyTorch CUDA graph" if "_graph_" in k else "PyTorch eager, fused AdamW"
                rows.append((k, v, theirs[k], ref))
            if "_graph_" in k and k.replace("_graph_", "_") in theirs:
                rows.append((k, v, theirs[k.replace("_graph_", "_")], "PyTorch eager, fused AdamW"))
        table("MLP training step on the GPU (samples/s): ember vs PyTorch", "samples/s", rows)
    if "gpt2" in only:
        ours = gbench(bench("bench_gpt2"),
                      f"^cuda_gpt2_(graph_)?({args.dtype_pattern})/.*({args.gpt2_models})/",
                      "tokens/s", mt)
        theirs = torch_script(args.python, "gpt2_torch.py", "--device", "cuda", "--min-time", mt,
                              "--models", args.gpt2_models, "--dtypes", args.dtypes,
                              "--compile-rows", "bf16/d12/T:1024",
                              *(["--compile"] if args.compile else []))
        rows = []
        for k, v in sorted(ours.items()):
            eager = k.replace("_graph_", "_")
            if eager != k and eager in ours:
                rows.append((k, v, ours[eager], "ember eager (goal, small: >= 1.3x)"))
            if eager in theirs:
                rows.append((k, v, theirs[eager], "PyTorch eager, SDPA, fused AdamW"))
            if eager + "_compiled" in theirs:
                rows.append((k, v, theirs[eager + "_compiled"], "torch.compile"))
        table("GPT-2 training step on the GPU (tokens/s): ember vs PyTorch", "tokens/s", rows)


if __name__ == "__main__":
    main()
