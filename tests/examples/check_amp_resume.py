"""Resuming across --amp, as docs/amp.md says: an f16 saved state resumes in bf16 (the disabled
scaler loads nothing; the example warns that --amp differs), and a bf16 saved state resumed with
--amp f16 is an Error naming the fix (the f16 scaler needs state a bf16 run never saved).

usage: check_amp_resume.py WORK_DIR -- TRAIN_MLP [options...]"""
import os
import shutil
import subprocess
import sys


def run(command):
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def main():
    work = sys.argv[1]
    command = sys.argv[sys.argv.index("--") + 1:]
    for saved, resumed in (("f16", "bf16"), ("bf16", "f16")):
        save_dir = os.path.join(work, f"amp_{saved}_{resumed}")
        shutil.rmtree(save_dir, ignore_errors=True)
        first = run(command + ["--amp", saved, "--save-dir", save_dir, "--save-every", "20"])
        if first.returncode != 0:
            sys.exit(f"--amp {saved} run failed:\n{first.stdout}{first.stderr}")
        second = run(command + ["--amp", resumed, "--save-dir", save_dir, "--resume"])
        out = second.stdout + second.stderr
        if saved == "f16":
            if second.returncode != 0 or "resumed from" not in out or \
                    "made with --amp f16, this run has bf16" not in out:
                sys.exit(f"f16 -> bf16: expected a resume with a warning, got exit "
                         f"{second.returncode}:\n{out}")
        else:
            if second.returncode == 0 or "no loss-scaling state" not in out or \
                    "resume with the --amp it was saved with" not in out:
                sys.exit(f"bf16 -> f16: expected an Error naming the fix, got exit "
                         f"{second.returncode}:\n{out}")
        print(f"--amp {saved} saved state, --amp {resumed} resume: as documented")


main()
