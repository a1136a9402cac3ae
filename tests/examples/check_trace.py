#!/usr/bin/env python3
"""Runs train_gpt2 with --trace and checks the Chrome trace it writes: the JSON parses, every
event is a complete event with numbers, each thread's events nest (none overlaps another
partly), the steps asked for are there with every phase and the modules' forward and backward
inside them, and each step comes after the one before.

    check_trace.py TRACE_FILE TRAIN_GPT2 [train_gpt2 options...]
"""
import json
import subprocess
import sys


def main():
    path, command = sys.argv[1], sys.argv[2:]
    out = subprocess.run(command + ["--trace", path, "--trace-steps", "2:3"], capture_output=True,
                         text=True, check=False)
    sys.stdout.write(out.stdout + out.stderr)
    if out.returncode != 0:
        raise SystemExit(f"train_gpt2 exited with {out.returncode}")
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    for e in events:
        assert e["ph"] == "X" and isinstance(e["ts"], int) and isinstance(e["dur"], int), e
        assert e["dur"] >= 0, e
    by_thread = {}
    for e in events:
        by_thread.setdefault(e["tid"], []).append(e)
    for tid, evs in by_thread.items():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in evs:
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
                stack.pop()
            if stack:
                parent = stack[-1]
                assert e["ts"] + e["dur"] <= parent["ts"] + parent["dur"], \
                    f"{e['name']} overlaps {parent['name']} partly"
            stack.append(e)
    steps = sorted((e for e in events if e["cat"] == "step"), key=lambda e: e["ts"])
    assert len(steps) == 2, f"{len(steps)} steps, expected 2 (steps 2 and 3)"
    assert steps[0]["ts"] + steps[0]["dur"] <= steps[1]["ts"], "steps out of order"
    names = {e["name"] for e in events}
    for phase in ("data", "forward", "backward", "optimizer"):
        assert phase in names, f"phase {phase} missing"
    for module in ("attn forward", "attn backward", "mlp forward", "mlp backward"):
        assert any(n.endswith(module) for n in names), f"module range {module} missing"
    print(f"{len(events)} events, nested, 2 steps in order, every phase and module there")


if __name__ == "__main__":
    main()
