#!/usr/bin/env python3
"""memory_snapshot_svg on names with markup and control characters: the SVG must parse as XML
(control characters become U+FFFD); a file with a byte that is not UTF-8 is not JSON: an error."""
import pathlib
import subprocess
import sys
import xml.dom.minidom

tool, work = sys.argv[1], pathlib.Path(sys.argv[2])
work.mkdir(parents=True, exist_ok=True)
snapshot = work / "snapshot_odd_names.json"
# A control character (escaped, as JSON requires), markup, then an e-acute.
pool = rb'a\u0001<b>&\"c\u00e9'
document_text = (b'{"segments":[{"address":"0x1000","size":1024,"stream":0,"pool":"' + pool
                 + b'","expandable":false,"blocks":[{"address":"0x1000","size":1024,"requested":1000,'
                 b'"state":"allocated"}]}]}')
snapshot.write_bytes(document_text)
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
expected = 'a\ufffd<b>&"c\u00e9'
if expected not in text:
    sys.exit(f"expected the pool name read back as {expected!r}, found {text!r}")
if "t\ufffditle" not in text:
    sys.exit(f"expected the title read back as 't\ufffditle', found {text!r}")
# A byte that is not UTF-8 makes the file invalid JSON: an error saying so, no picture.
stray = work / "snapshot_stray_byte.json"
stray.write_bytes(document_text.replace(b"c\\u00e9", b"c\xff"))
done = subprocess.run([tool, str(stray), "-o", str(work / "stray.svg")], capture_output=True,
                      text=True)
if done.returncode != 1 or "is not valid JSON" not in done.stderr:
    sys.exit(f"expected exit 1 and 'is not valid JSON' for a stray byte, found {done.returncode}: "
             f"{done.stderr}")
print("valid XML; names escaped; a stray byte is invalid JSON")
