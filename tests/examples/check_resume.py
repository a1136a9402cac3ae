"""A training example stopped mid-run (SIGTERM: it saves and exits 0; SIGKILL: it dies) and
started again with --resume ends exactly where an uninterrupted run ends.

usage: check_resume.py WORK_DIR SIGNALS -- COMMAND...   (SIGNALS: e.g. TERM,KILL or USR1)
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import time


def last_progress(out):
    lines = [l for l in out.splitlines() if l.startswith("step ")]
    if not lines:
        sys.exit(f"no progress line in:\n{out}")
    # The figures that must match: step, loss, validation accuracy (not the speed).
    return re.sub(r"\|\s*[0-9.]+ (samples/s|tokens/s|ms/step).*", "", lines[-1]).strip()


def main():
    work, signals = sys.argv[1], sys.argv[2].split(",")
    command = sys.argv[sys.argv.index("--") + 1:]
    reference = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if reference.returncode != 0:
        sys.exit(f"the uninterrupted run failed:\n{reference.stdout}{reference.stderr}")
    expected = last_progress(reference.stdout)
    for name in signals:
        sig = getattr(signal, "SIG" + name)
        save_dir = os.path.join(work, f"resume_{name.lower()}")
        shutil.rmtree(save_dir, ignore_errors=True)
        run = command + ["--save-dir", save_dir, "--save-every", "50"]
        p = subprocess.Popen(run, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + 120
        while time.time() < deadline and p.poll() is None:
            if os.path.isdir(os.path.join(save_dir, "step-000000000100")):
                break
            time.sleep(0.005)
        if p.poll() is not None:
            sys.exit(f"SIG{name}: the run ended before the save at step 100:\n{p.stdout.read()}")
        p.send_signal(sig)
        out, _ = p.communicate(timeout=120)
        if sig == signal.SIGKILL:
            if p.returncode != -signal.SIGKILL:
                sys.exit(f"SIGKILL: exit {p.returncode}, expected death by signal")
        elif p.returncode != 0 or "stopped by signal" not in out:
            sys.exit(f"SIG{name}: exit {p.returncode}, expected 0 and a saved stop:\n{out}")
        resumed = subprocess.run(command + ["--save-dir", save_dir, "--resume"],
                                 capture_output=True, text=True, timeout=300)
        if resumed.returncode != 0 or "resumed from" not in resumed.stdout:
            sys.exit(f"SIG{name}: the resumed run failed:\n{resumed.stdout}{resumed.stderr}")
        got = last_progress(resumed.stdout)
        if got != expected:
            sys.exit(f"SIG{name}: the resumed run ends with\n  {got}\nnot\n  {expected}")
        print(f"SIG{name}: stopped, resumed, ends with '{got}' as the uninterrupted run")


main()
