#!/usr/bin/env python3
"""Writes a tiny MNIST-layout directory: make_idx.py DIR TRAIN_ROWS TEST_ROWS (square images,
4 training and 2 test samples), for train_mlp's data checks."""
import pathlib
import struct
import sys

out, train_rows, test_rows = pathlib.Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
out.mkdir(parents=True, exist_ok=True)


def write(name, dims, values):
    # IDX: two zero bytes, type 0x08 (u8), the rank, big-endian dimensions, then the data.
    header = struct.pack(">BBBB", 0, 0, 0x08, len(dims)) + b"".join(struct.pack(">I", d) for d in dims)
    (out / name).write_bytes(header + bytes(values))


for prefix, n, rows in (("train", 4, train_rows), ("t10k", 2, test_rows)):
    write(f"{prefix}-images-idx3-ubyte", (n, rows, rows), [(i * 37) % 256 for i in range(n * rows * rows)])
    write(f"{prefix}-labels-idx1-ubyte", (n,), [i % 10 for i in range(n)])
