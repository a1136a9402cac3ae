#!/usr/bin/env python3
"""The layer map: fails when a file of one layer includes a header of a layer above it.

The order is the README's, read from its paragraph "Layers, each depending only on those before
it": the backquoted layer names, in the order they come. A file's layer is its folder:
include/ember/<layer>/, src/<layer>/ or the top-level kernels/. Its includes name a layer as
"ember/<layer>/..." (public) or "<layer>/..." (src's private headers).

    check_layers.py --root SOURCE_DIR     the check (exit 1 listing every upward include)
    check_layers.py --self-test           the check finds an upward include in a small tree
"""
import argparse
import os
import re
import sys
import tempfile

# The includes allowed to go up, each with its reason: (including file, included header).
ALLOWED = {
    # Tensor::fill_ on cuda launches core's one kernel; fill.cuh includes no ember header, so
    # this makes no cycle, and the kernel stays with the rest of the device code.
    ("src/core/cuda_fill.cu", "kernels/fill.cuh"),
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"(?:ember/)?(([a-z_]+)/[^"]*)"', re.M)


def documented_order(readme):
    """The layers in the README's order, from its "Layers, each depending ..." paragraph."""
    text = open(readme, encoding="utf-8").read()
    start = text.find("Layers, each depending only on those before it")
    if start < 0:
        sys.exit(f"{readme}: no paragraph 'Layers, each depending only on those before it'")
    paragraph = text[start:text.find("\n\n", start)]
    return list(dict.fromkeys(re.findall(r"`([a-z_]+)`", paragraph)))


def layer_folders(root, layers):
    """(layer, folder) pairs whose files belong to that layer."""
    for layer in layers:
        for folder in (f"include/ember/{layer}", f"src/{layer}"):
            if os.path.isdir(os.path.join(root, folder)):
                yield layer, folder
    if "kernels" in layers and os.path.isdir(os.path.join(root, "kernels")):
        yield "kernels", "kernels"


def upward_includes(root, order):
    rank = {layer: i for i, layer in enumerate(order)}
    found = []
    seen = set()
    for layer, folder in layer_folders(root, order):
        for directory, _, files in os.walk(os.path.join(root, folder)):
            for name in sorted(files):
                path = os.path.realpath(os.path.join(directory, name))
                if path in seen or not name.endswith((".hpp", ".cpp", ".cu", ".cuh", ".h")):
                    continue
                seen.add(path)
                text = open(path, encoding="utf-8", errors="replace").read()
                for match in INCLUDE.finditer(text):
                    target = match.group(2)
                    allowed = (os.path.relpath(path, root), match.group(1)) in ALLOWED
                    if target in rank and rank[target] > rank[layer] and not allowed:
                        line = text.count("\n", 0, match.start()) + 1
                        found.append(f"{os.path.relpath(path, root)}:{line}: layer '{layer}' "
                                     f"includes '{target}', which comes after it")
    return found


def self_test():
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "include/ember/core"))
        os.makedirs(os.path.join(root, "src/ops"))
        with open(os.path.join(root, "README.md"), "w") as f:
            f.write("Layers, each depending only on those before it: `core`, `ops`.\n\nMore.\n")
        with open(os.path.join(root, "include/ember/core/a.hpp"), "w") as f:
            f.write('#include "ember/ops/b.hpp"\n')
        with open(os.path.join(root, "src/ops/b.cpp"), "w") as f:
            f.write('#include "ember/core/a.hpp"\n#include "core/private.hpp"\n')
        order = documented_order(os.path.join(root, "README.md"))
        assert order == ["core", "ops"], order
        found = upward_includes(root, order)
        assert len(found) == 1 and "include/ember/core/a.hpp:1" in found[0], found
    print("self-test: an upward include is found, downward ones are not")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        self_test()
        return
    root = os.path.abspath(args.root)
    order = documented_order(os.path.join(root, "README.md"))
    missing = [d for d in os.listdir(os.path.join(root, "include/ember"))
               if os.path.isdir(os.path.join(root, "include/ember", d)) and d not in order]
    if missing:
        sys.exit(f"README's layer map does not name {', '.join(sorted(missing))}")
    found = upward_includes(root, order)
    if found:
        print("\n".join(found))
        sys.exit(f"{len(found)} includes go up the layer map ({' < '.join(order)})")
    print(f"layer map {' < '.join(order)}: no file includes a layer above its own")


if __name__ == "__main__":
    main()
