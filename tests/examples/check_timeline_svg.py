#!/usr/bin/env python3
"""memory_snapshot_svg --trace: the memory-over-time SVG of a small trace parses as XML, has the
three lines with one point per event, and its peaks are the trace's (requested 7.63 MiB)."""
import pathlib
import subprocess
import sys
import xml.dom.minidom

tool, trace, work = sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3])
work.mkdir(parents=True, exist_ok=True)
svg = work / "timeline.svg"
done = subprocess.run([tool, "--trace", trace, "-o", str(svg)], capture_output=True, text=True)
if done.returncode != 0 or "8 events, peak requested 7.63 MiB" not in done.stdout:
    sys.exit(f"memory_snapshot_svg --trace: exit {done.returncode}: {done.stdout}{done.stderr}")
document = xml.dom.minidom.parse(str(svg))
lines = {p.getAttribute("class"): p.getAttribute("points").split()
         for p in document.getElementsByTagName("polyline")}
if sorted(lines) != ["allocated", "requested", "reserved"]:
    sys.exit(f"expected the three lines, found {sorted(lines)}")
for name, points in lines.items():
    if len(points) != 8:
        sys.exit(f"{name}: expected 8 points (one per event), found {len(points)}")
ys = [float(p.split(",")[1]) for p in lines["requested"]]
if min(ys) != float(lines["requested"][5].split(",")[1]):  # the 8 MB allocation is the peak
    sys.exit(f"the requested line peaks at the wrong event: {lines['requested']}")
bad = subprocess.run([tool, "--trace", "/dev/zero"], capture_output=True, text=True)
if bad.returncode != 1 or "not a regular file" not in bad.stderr:
    sys.exit(f"--trace /dev/zero: exit {bad.returncode}: {bad.stderr}")
print("memory over time: valid SVG, three lines, peaks where the trace has them")
