#!/usr/bin/env python3
"""Scrapes train_gpt2's metrics endpoint while it trains, and checks the text with a parser of
Prometheus' text format (0.0.4): every sample's family has # HELP and # TYPE lines first, names
and labels are well formed, values are numbers, histogram buckets are cumulative, and the
training figures are there; and with `promtool check metrics` where promtool is installed.

    scrape_metrics.py TRAIN_GPT2 [train_gpt2 options...]
"""
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="[^"\\\n]*",?)*\})? '
                    r'([-+]?(?:[0-9.]+(?:[eE][-+]?[0-9]+)?|Inf|NaN))$')


def parse(text):
    helps, types, samples = set(), {}, {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            helps.add(line.split()[2])
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            assert kind in ("counter", "gauge", "histogram", "summary", "untyped"), line
            types[name] = kind
            continue
        m = SAMPLE.match(line)
        assert m, f"not a sample line: {line!r}"
        family = m.group(1)
        for suffix in ("_bucket", "_sum", "_count"):
            if family not in types and family.endswith(suffix):
                family = family[: -len(suffix)]
        assert family in types and family in helps, f"no # HELP/# TYPE before {line!r}"
        samples[m.group(1) + (m.group(2) or "")] = float(m.group(3).replace("Inf", "inf"))
    return samples, types


def main():
    command = sys.argv[1:] + ["--metrics-port", "0"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url, scraped, lines = None, None, []
    deadline = time.time() + 300
    try:
        for line in process.stdout:
            lines.append(line)
            m = re.match(r"metrics: http://0\.0\.0\.0:(\d+)/metrics", line)
            if m:
                url = f"http://127.0.0.1:{m.group(1)}/metrics"
            # After the first progress line, while training goes on: scrape.
            if url and scraped is None and line.startswith("step "):
                with urllib.request.urlopen(url, timeout=30) as response:
                    assert "text/plain; version=0.0.4" in response.headers["Content-Type"]
                    scraped = response.read().decode()
            if time.time() > deadline:
                raise SystemExit("train_gpt2 ran past 300 s")
    finally:
        process.wait(timeout=60)
    sys.stdout.write("".join(lines))
    if process.returncode != 0:
        raise SystemExit(f"train_gpt2 exited with {process.returncode}")
    if scraped is None:
        raise SystemExit("no metrics endpoint was announced, or no progress line came while it ran")
    samples, types = parse(scraped)
    job = '{job="train_gpt2",device="cpu"}'
    assert types["ember_step_seconds"] == "histogram"
    steps = samples["ember_steps_total" + job]
    assert steps >= 1, steps
    assert samples["ember_step_seconds_count" + job] == steps
    buckets = sorted((float(re.search(r'le="([^"]+)"', k).group(1).replace("Inf", "inf")), v)
                     for k, v in samples.items() if k.startswith("ember_step_seconds_bucket"))
    assert all(a[1] <= b[1] for a, b in zip(buckets, buckets[1:])), buckets
    assert buckets[-1][1] == steps
    for name in ("ember_loss", "ember_tokens_per_second", "ember_data_wait_fraction",
                 "ember_memory_allocated_bytes", "ember_memory_reserved_bytes",
                 "ember_memory_fragmentation"):
        assert name + job in samples, f"{name} missing"
    # Prometheus' own linter, where it is installed (Debian's prometheus package carries it).
    promtool = os.environ.get("EMBER_PROMTOOL") or shutil.which("promtool")
    if promtool:
        check = subprocess.run([promtool, "check", "metrics"], input=scraped, capture_output=True,
                               text=True, check=False)
        assert check.returncode == 0, f"promtool check metrics: {check.stdout}{check.stderr}"
        print("promtool check metrics: no problems")
    else:
        print("promtool not installed: checked with this script's parser only")
    print(f"scraped {len(samples)} samples after {int(steps)} steps: the text format holds")


if __name__ == "__main__":
    main()
