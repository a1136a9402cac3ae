#!/usr/bin/env python3
"""memory_snapshot_svg on names with markup, control characters and bytes that are not UTF-8:
the SVG must parse as XML (control characters and bad bytes become U+FFFD)."""
import pathlib
import subprocess
import sys
import xml.dom.minidom

tool, work = sys.argv[1], pathlib.Path(sys.argv[2])
work.mkdir(parents=True, exist_ok=True)
snapshot = work / "snapshot_odd_names.json"
pool = b'a\x01<b>&"c\xff\xc3\xa9'  # control char, markup, a stray byte, then a valid e-acute
snapshot.write_bytes(
    b'{"segments":[{"address":"0x1000","size":1024,"stream":0,"pool":"' + pool.replace(b'"', b'\\"')
    + b'","expandable":false,"blocks":[{"address":"0x1000","size":1024,"requested":1000,'
    b'"state":"allocated"}]}]}')
svg = work / "snapshot_odd_names.svg"
done = subprocess.run([tool, str(snapshot), "-o", str(svg), "--title", "t\x02itle"],
                      capture_output=True, text=True)
if done.returncode != 0:
    sys.exit(f"memory_snapshot_svg exited with {done.returncode}: {done.stderr}")
document = xml.dom.minidom.parse(str(svg))  # raises on invalid XML


def text_of(node):
    if node.nodeType == node.TEXT_NODE:
        return node.data
    return "".join(text_of(child) for child in node.childNodes)


text = text_of(document.documentElement)
expected = 'a\ufffd<b>&"c\ufffd\u00e9'
if expected not in text:
    sys.exit(f"expected the pool name read back as {expected!r}, found {text!r}")
if "t\ufffditle" not in text:
    sys.exit(f"expected the title read back as 't\ufffditle', found {text!r}")
print("valid XML; names escaped")
