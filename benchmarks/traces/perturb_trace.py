#!/usr/bin/env python3
"""Makes a synthetic allocation trace from a recorded one: each distinct request size is scaled
by its own random factor in [LOW, HIGH] (the same factor wherever that size occurs), so a
policy chosen on the recorded traces can be checked on layouts it was not chosen on.

    perturb_trace.py IN.trace[.gz] OUT.trace[.gz] [--seed N] [--low 0.7] [--high 1.3]
"""
import argparse
import gzip
import random


def open_text(path, mode):
    return gzip.open(path, mode + "t") if path.endswith(".gz") else open(path, mode)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("input")
    parser.add_argument("output")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--low", type=float, default=0.7)
    parser.add_argument("--high", type=float, default=1.3)
    args = parser.parse_args()
    if not 0 < args.low <= args.high:
        raise SystemExit("need 0 < --low <= --high")
    rng = random.Random(args.seed)
    factors = {}
    with open_text(args.input, "r") as src, open_text(args.output, "w") as out:
        for line in src:
            fields = line.split()
            if fields and fields[0] == "a":
                size = int(fields[2])
                if size not in factors:
                    factors[size] = rng.uniform(args.low, args.high)
                fields[2] = str(max(1, round(size * factors[size])))
                line = " ".join(fields) + "\n"
            elif line.startswith("# ember-alloc-trace"):
                line += (f"# perturbed from {args.input}: each size x U({args.low}, {args.high}), "
                         f"seed {args.seed}\n")
            out.write(line)


if __name__ == "__main__":
    main()
