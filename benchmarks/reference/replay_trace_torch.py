#!/usr/bin/env python3
"""Replays ember allocation traces through PyTorch's own CUDA caching allocator.

    replay_trace_torch.py TRACE [TRACE ...] [--device cuda:0] [--bench BENCH_ALLOCATOR]
                          [--no-smallest]

Each trace (docs/memory.md's format; .gz read through gzip) is replayed twice, each time in a
fresh Python process so that PYTORCH_CUDA_ALLOC_CONF takes effect: with expandable segments off
(PyTorch's default) and on. An allocation is a torch.empty of the trace's bytes (uint8) made
while the trace's stream is current (stream 0: the device's default stream, others: one
torch.cuda.Stream each); a free drops it; "r ID STREAM" is Tensor.record_stream. Nothing runs on
the streams, so a freed block is reusable at once, as in ember's replay.

It prints PyTorch's peak reserved / peak requested and, unless --no-smallest, the smallest
capacity (2 MiB steps, found by bisection with torch.cuda.set_per_process_memory_fraction) over
the peak requested. With --bench, it also runs `BENCH --device cuda:N --trace TRACE` (ember's
allocator on the same GPU, real upstreams) and prints both next to each other, from the same run.

Needs a GPU and PyTorch with CUDA; without them it says so and exits 0 (nothing to compare).
"""
import argparse
import gzip
import json
import os
import re
import subprocess
import sys

PAGE = 2 << 20


class TraceError(Exception):
    pass


def read_trace(path):
    """The events of a trace, checked as bench_allocator checks them (TraceError if bad)."""
    opener = gzip.open if path.endswith(".gz") else open
    events, live = [], set()
    try:
        with opener(path, "rt") as f:
            first = f.readline()
            if not first.startswith("# ember-alloc-trace v1"):
                raise TraceError(f"{path}: not an allocation trace (no '# ember-alloc-trace v1' "
                                 "first line)")
            for number, line in enumerate(f, 2):
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                fields = line.split()
                try:
                    numbers = [int(x) for x in fields[1:]]
                except ValueError:
                    numbers = None
                kind = fields[0]
                if numbers is None or any(n < 0 for n in numbers):
                    pass
                elif kind == "a" and len(numbers) == 3 and numbers[1] > 0:
                    if numbers[0] in live:
                        raise TraceError(f"{path}:{number}: allocation ID {numbers[0]} is live")
                    live.add(numbers[0])
                    events.append(("a", numbers[0], numbers[1], numbers[2]))
                    continue
                elif kind == "f" and len(numbers) == 1:
                    if numbers[0] not in live:
                        raise TraceError(f"{path}:{number}: free of ID {numbers[0]}, not live")
                    live.remove(numbers[0])
                    events.append(("f", numbers[0], 0, 0))
                    continue
                elif kind == "r" and len(numbers) == 2:
                    if numbers[0] not in live:
                        raise TraceError(f"{path}:{number}: record_stream of ID {numbers[0]}, "
                                         "not live")
                    events.append(("r", numbers[0], 0, numbers[1]))
                    continue
                raise TraceError(f"{path}:{number}: not a trace event: {line!r}")
    except (OSError, EOFError, UnicodeDecodeError) as e:  # missing, unreadable, a bad .gz
        raise TraceError(f"{path}: {e}") from e
    if not events:
        raise TraceError(f"{path}: no events")
    return events


def replay(torch, device, events, streams):
    """One replay; returns (completed, peak requested bytes)."""
    live, requested, peak = {}, 0, 0
    try:
        for kind, ident, size, stream in events:
            if kind == "a":
                with torch.cuda.stream(streams[stream]):
                    live[ident] = (torch.empty(size, dtype=torch.uint8, device=device), size)
                requested += size
                peak = max(peak, requested)
            elif kind == "f":
                requested -= live.pop(ident)[1]
            else:
                live[ident][0].record_stream(streams[stream])
    except torch.cuda.OutOfMemoryError:
        return False, peak
    finally:
        live.clear()
    return True, peak


def child(args):
    """Runs in a fresh process: PYTORCH_CUDA_ALLOC_CONF is already set."""
    import torch  # pylint: disable=import-outside-toplevel

    device = torch.device(args.device)
    torch.cuda.set_device(device)
    events = read_trace(args.trace)
    streams = {0: torch.cuda.default_stream(device)}
    for kind, _, _, stream in events:
        if stream not in streams:
            streams[stream] = torch.cuda.Stream(device)
    total = torch.cuda.get_device_properties(device).total_memory

    def fresh():
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)

    fresh()
    completed, peak_requested = replay(torch, device, events, streams)
    stats = torch.cuda.memory_stats(device)
    result = {
        "completed": completed,
        "peak_requested": peak_requested,
        "peak_allocated": stats.get("allocated_bytes.all.peak", 0),
        "peak_reserved": stats.get("reserved_bytes.all.peak", 0),
        "segments": stats.get("segment.all.allocated", 0),
    }
    if completed and not args.no_smallest:
        # The smallest capacity (2 MiB steps) within which the trace completes: bisection between
        # the peak requested (nothing fits below) and the peak reserved (it completed there).
        def completes(capacity):
            fresh()
            torch.cuda.set_per_process_memory_fraction(capacity / total, device)
            ok, _ = replay(torch, device, events, streams)
            return ok

        lo = (peak_requested - 1) // PAGE * PAGE
        hi = max(-(-result["peak_reserved"] // PAGE) * PAGE, lo + PAGE)
        while not completes(hi):  # the bound must complete (a limit changes the layout)
            lo, hi = hi, min(2 * hi, total)
            if lo == hi:
                break
        while hi - lo > PAGE:
            mid = lo + (hi - lo) // PAGE // 2 * PAGE
            if completes(mid):
                hi = mid
            else:
                lo = mid
        torch.cuda.set_per_process_memory_fraction(1.0, device)
        result["smallest"] = hi
    print("RESULT " + json.dumps(result))


def run_child(trace, device, expandable, no_smallest):
    env = dict(os.environ)
    env["PYTORCH_CUDA_ALLOC_CONF"] = f"expandable_segments:{'True' if expandable else 'False'}"
    command = [sys.executable, __file__, "--child", "--device", device, trace]
    if no_smallest:
        command.append("--no-smallest")
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    print(f"replay_trace_torch: the PyTorch replay of {trace} failed:\n{out.stdout}{out.stderr}",
          file=sys.stderr)
    return None


def ember_figures(bench, trace, device, no_smallest):
    """ember's column of bench_allocator --device: reserved / requested, smallest / requested."""
    command = [bench, "--device", device, "--no-compare-pytorch", "--trace", trace]
    if no_smallest:
        command.append("--no-smallest")
    # The caller may run this script without its own library path (a GPU check's carried
    # libraries are not PyTorch's): EMBER_BENCH_LD_LIBRARY_PATH is bench_allocator's.
    env = dict(os.environ)
    if "EMBER_BENCH_LD_LIBRARY_PATH" in env:
        env["LD_LIBRARY_PATH"] = env["EMBER_BENCH_LD_LIBRARY_PATH"]
    out = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    if out.returncode != 0:
        print(f"replay_trace_torch: {' '.join(command)} failed:\n{out.stdout}{out.stderr}",
              file=sys.stderr)
        return (None, None)
    ratio = re.search(r"reserved / requested \(ratio\) +([0-9.]+)", out.stdout)
    smallest = re.search(r"smallest budget / peak requested +([0-9.]+)", out.stdout)
    return (float(ratio.group(1)) if ratio else None,
            float(smallest.group(1)) if smallest else None)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", nargs="+")
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--bench", help="ember's bench_allocator, to print its figures too")
    parser.add_argument("--no-smallest", action="store_true")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.trace = args.traces[0]
        child(args)
        return
    try:
        for trace in args.traces:
            read_trace(trace)  # a bad trace is reported before any GPU work
    except TraceError as e:
        raise SystemExit(f"replay_trace_torch: {e}")
    try:
        import torch
    except ImportError:
        print("replay_trace_torch: PyTorch is not importable: nothing to compare")
        return
    if not torch.cuda.is_available():
        print("replay_trace_torch: PyTorch sees no GPU: nothing to compare")
        return
    print(f"PyTorch {torch.__version__} on {torch.cuda.get_device_name(args.device)}")
    print("reserved / requested, and smallest capacity / peak requested (2 MiB steps)")
    print(f"{'trace':44} {'torch':>7} {'+exp.':>7} {'ember':>7}   {'torch':>7} {'+exp.':>7} "
          f"{'ember':>7}")
    for trace in args.traces:
        default = run_child(trace, args.device, False, args.no_smallest)
        expandable = run_child(trace, args.device, True, args.no_smallest)
        ember = (None, None)
        if args.bench:
            ember = ember_figures(args.bench, trace, args.device, args.no_smallest)

        def ratio(r, key):
            if not r or not r.get("completed") or key not in r or r["peak_requested"] == 0:
                return "-"
            return f"{r[key] / r['peak_requested']:.3f}"

        def number(v):
            return "-" if v is None else f"{v:.3f}"

        print(f"{os.path.basename(trace):44} {ratio(default, 'peak_reserved'):>7} "
              f"{ratio(expandable, 'peak_reserved'):>7} {number(ember[0]):>7}   "
              f"{ratio(default, 'smallest'):>7} {ratio(expandable, 'smallest'):>7} "
              f"{number(ember[1]):>7}")


if __name__ == "__main__":
    main()
