"""SIGTERM at any moment of training (inside a GEMM, an optimizer step, a save) stops the run
cleanly: exit 0 and a saved stop, every time. Regression test for signal frames written onto the
heap by oneDNN's JIT GEMMs, whose stack pointer points into heap memory (oneDNN issue 4845): a
signal landing there corrupted the heap in about one run of four.

usage: check_sigterm_anywhere.py WORK_DIR RUNS -- COMMAND...   (COMMAND logs every step)
"""
import os
import random
import shutil
import signal
import subprocess
import sys
import time


def main():
    work, runs = sys.argv[1], int(sys.argv[2])
    command = sys.argv[sys.argv.index("--") + 1:]
    rng = random.Random(20261126)
    for run in range(runs):
        save_dir = os.path.join(work, f"sigterm_{run}")
        shutil.rmtree(save_dir, ignore_errors=True)
        p = subprocess.Popen(command + ["--save-dir", save_dir], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
        seen = []
        deadline = time.time() + 120
        for line in p.stdout:  # the first progress line: training is under way
            seen.append(line)
            if line.startswith("step ") or time.time() > deadline:
                break
        time.sleep(rng.uniform(0.0, 1.5))
        p.send_signal(signal.SIGTERM)
        rest, _ = p.communicate(timeout=120)
        out = "".join(seen) + rest
        if p.returncode != 0 or "stopped by signal" not in out:
            sys.exit(f"run {run}: exit {p.returncode}, expected 0 and a saved stop:\n{out}")
        shutil.rmtree(save_dir, ignore_errors=True)
    print(f"{runs} runs stopped by SIGTERM at random moments: each saved and exited 0")


main()
