"""Shared helpers of the PyTorch reference benchmarks: timing and one JSON line per result.

Each script prints lines {"bench": ..., "name": ..., "value": ..., "unit": ...}; compare.py pairs
them with ember's figures for the same work.
"""
import argparse
import json
import os
import time

import torch


def setup_threads():
    """As many intra-op threads as ember uses: EMBER_NUM_THREADS, else OMP_NUM_THREADS, else all."""
    n = os.environ.get("EMBER_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS")
    torch.set_num_threads(int(n) if n else os.cpu_count())


def dtype_list(text):
    """'f32,bf16' -> ['f32', 'bf16']: each of f32 and bf16 at most once, at least one."""
    names = text.split(",")
    if not names or any(n not in ("f32", "bf16") for n in names) or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"'{text}': expected f32 and/or bf16, comma-separated")
    return names


def add_dtypes(parser):
    """--dtypes: the comma-separated dtypes to measure (f32, bf16)."""
    parser.add_argument("--dtypes", default="f32,bf16", type=dtype_list,
                        help="comma-separated: f32, bf16")


def argument_parser():
    """An ArgumentParser with --min-time, the seconds each seconds_per_call measures, and
    --dtypes."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--min-time", type=float, default=0.5)
    add_dtypes(parser)
    return parser


def parse_args(parser):
    """parser.parse_args(), then setup_threads()."""
    args = parser.parse_args()
    setup_threads()
    return args


def seconds_per_call(fn, min_time=0.5, warmup=2):
    """Median-free steady rate: calls fn until min_time seconds have passed; seconds per call."""
    for _ in range(warmup):
        fn()
    calls, start = 0, time.perf_counter()
    while True:
        fn()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_time and calls >= 3:
            return elapsed / calls


def emit(bench, name, value, unit):
    print(json.dumps({"bench": bench, "name": name, "value": value, "unit": unit}), flush=True)
