#!/usr/bin/env python3
"""Runs a training example with --trace and checks the Chrome trace it writes: the JSON parses,
every event is a complete event with numbers or a metadata event, each track's events nest (none
overlaps another partly), the steps asked for are there in order with every phase inside them,
the modules' forward and backward ranges and the ops named are there, and with --device the
device intervals are there too: on streams (process 2), named, in order on each stream, and
inside the trace's time.

    check_trace.py TRACE_FILE [--modules a,b] [--ops x,y] [--device] [--top N] -- EXAMPLE ...

--top N also prints where the steps' time went: the N device intervals (kernels, copies) with the
most time in all, and the N ops with the most host time.
"""
import argparse
import json
import numbers
import os
import subprocess
import sys


def check_nesting(events):
    tracks = {}
    for e in events:
        tracks.setdefault((e["pid"], e["tid"]), []).append(e)
    for track, evs in tracks.items():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in evs:
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
                stack.pop()
            if stack:
                parent = stack[-1]
                assert e["ts"] + e["dur"] <= parent["ts"] + parent["dur"], \
                    f"{e['name']} overlaps {parent['name']} partly on track {track}"
            stack.append(e)
    return tracks


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("trace")
    parser.add_argument("--modules", default="")
    parser.add_argument("--ops", default="")
    parser.add_argument("--device", action="store_true")
    parser.add_argument("--top", type=int, default=0)
    split = sys.argv.index("--")
    args = parser.parse_args(sys.argv[1:split])
    command = sys.argv[split + 1:]
    if os.path.exists(args.trace):
        os.remove(args.trace)  # a file left by an earlier run proves nothing
    out = subprocess.run(command + ["--trace", args.trace, "--trace-steps", "2:3"],
                         capture_output=True, text=True, check=False)
    sys.stdout.write(out.stdout + out.stderr)
    if out.returncode != 0:
        raise SystemExit(f"{command[0]} exited with {out.returncode}")
    with open(args.trace) as f:
        all_events = json.load(f)["traceEvents"]
    events = []
    for e in all_events:
        if e["ph"] == "M":
            assert e["name"] in ("process_name", "thread_name"), e
            continue
        assert e["ph"] == "X", e
        assert isinstance(e["ts"], numbers.Real) and isinstance(e["dur"], numbers.Real), e
        assert e["ts"] >= 0 and e["dur"] >= 0, e
        events.append(e)
    host = [e for e in events if e["pid"] == 1]
    device = [e for e in events if e["pid"] == 2]
    check_nesting(events)

    steps = sorted((e for e in host if e["cat"] == "step"), key=lambda e: e["ts"])
    assert len(steps) == 2, f"{len(steps)} steps, expected 2 (steps 2 and 3)"
    assert steps[0]["ts"] + steps[0]["dur"] <= steps[1]["ts"], "steps out of order"
    names = {e["name"] for e in host}
    for phase in ("data", "forward", "backward", "optimizer"):
        assert phase in names, f"phase {phase} missing"
    for e in host:
        if e["cat"] == "phase":
            assert any(s["ts"] <= e["ts"] and e["ts"] + e["dur"] <= s["ts"] + s["dur"]
                       for s in steps), f"phase {e['name']} outside the steps"
    for module in filter(None, args.modules.split(",")):
        for what in ("forward", "backward"):
            assert any(n.endswith(f"{module} {what}") for n in names), \
                f"module range {module} {what} missing"
    ops = {e["name"] for e in host if e["cat"] == "op"}
    for op in filter(None, args.ops.split(",")):
        assert op in ops, f"op {op} missing (ops: {sorted(ops)})"

    if args.device:
        assert device, "no device intervals"
        end = max(e["ts"] + e["dur"] for e in host)
        streams = {}
        for e in device:
            assert e["cat"] in ("kernel", "copy", "library"), e
            assert e["name"], e
            assert e["ts"] + e["dur"] <= end + 1e3, f"{e['name']} after the trace's host ranges"
            streams.setdefault(e["tid"], []).append(e)
        for tid, evs in streams.items():  # a stream runs its work one after another
            evs.sort(key=lambda e: e["ts"])
            for a, b in zip(evs, evs[1:]):
                assert a["ts"] + a["dur"] <= b["ts"], f"{a['name']} and {b['name']} overlap on {tid}"
        kernels = sum(e["cat"] == "kernel" for e in device)
        assert kernels > 0, "no kernels among the device intervals"
    else:
        assert not device, "device intervals from a CPU run"
    print(f"{len(host)} host ranges ({len(ops)} ops), {len(device)} device intervals; nested, "
          "2 steps in order, every phase, module and op there")
    if args.top:
        print_top(args.top, steps, host, device)


def print_top(n, steps, host, device):
    """The time of the 2 traced steps by device interval name and by op (microseconds)."""
    wall = sum(e["dur"] for e in steps)
    busy = sum(e["dur"] for e in device)
    print(f"2 steps: {wall / 1e3:.2f} ms wall, device busy {busy / 1e3:.2f} ms "
          f"({100 * busy / max(wall, 1e-9):.1f}%), {len(device)} device intervals")
    for title, events in (("device", device), ("op (host)", [e for e in host if e["cat"] == "op"])):
        totals = {}
        for e in events:
            t = totals.setdefault(e["name"], [0.0, 0])
            t[0] += e["dur"]
            t[1] += 1
        print(f"top {n} by {title} time: total ms, count, % of the 2 steps' wall time")
        for name, (dur, count) in sorted(totals.items(), key=lambda kv: -kv[1][0])[:n]:
            print(f"  {dur / 1e3:9.3f} {count:6d} {100 * dur / max(wall, 1e-9):6.1f}%  {name[:110]}")


if __name__ == "__main__":
    main()
