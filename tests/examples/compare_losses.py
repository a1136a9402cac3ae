"""Two training runs print the same losses: every progress line's step, training loss and
validation loss, and the final validation loss, agree within TOLERANCE (absolute, nats). For
data parallelism: N ranks of batch B against one process of batch N x B sum the same sequences in
another order, so they agree to rounding, not bitwise.

usage: compare_losses.py TOLERANCE -- COMMAND_A... -- COMMAND_B...
"""
import re
import subprocess
import sys

LINE = re.compile(r"^step +(\d+) \| loss ([0-9.]+)[^|]*\| val ([0-9.]+|-)", re.M)
DONE = re.compile(r"^done: .*validation loss ([0-9.]+)", re.M)


def losses(command):
    run = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if run.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({run.returncode}):\n{run.stdout}{run.stderr}")
    rows = LINE.findall(run.stdout)
    done = DONE.search(run.stdout)
    if not rows or not done:
        sys.exit(f"no progress or done line in:\n{run.stdout}")
    return rows, float(done.group(1)), run.stdout


def main():
    tolerance = float(sys.argv[1])
    rest = sys.argv[sys.argv.index("--") + 1:]
    split = rest.index("--")
    a_rows, a_done, a_out = losses(rest[:split])
    b_rows, b_done, b_out = losses(rest[split + 1:])
    if [r[0] for r in a_rows] != [r[0] for r in b_rows]:
        sys.exit(f"the runs log other steps:\n{a_out}\n{b_out}")
    worst = abs(a_done - b_done)
    for (step, a_loss, a_val), (_, b_loss, b_val) in zip(a_rows, b_rows):
        worst = max(worst, abs(float(a_loss) - float(b_loss)))
        if (a_val == "-") != (b_val == "-"):
            sys.exit(f"step {step}: validation '{a_val}' against '{b_val}'")
        if a_val != "-":
            worst = max(worst, abs(float(a_val) - float(b_val)))
    if worst > tolerance:
        sys.exit(f"the losses differ by up to {worst:.2g} (> {tolerance}):\n{a_out}\n{b_out}")
    print(f"{len(a_rows)} progress lines and the final validation loss agree within {worst:.2g}")


main()
