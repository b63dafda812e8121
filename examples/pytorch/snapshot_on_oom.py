#!/usr/bin/env python3
"""Run out of memory on purpose under a cap, get a snapshot of the moment, and view it.

    PYTHONPATH=tools/python python3 examples/pytorch/snapshot_on_oom.py [OUT_DIR]

cudalloc writes the snapshot itself when an allocation fails (snapshot_on_oom), so it works
for a program you do not control too: set CUDALLOC_CONF in its environment. Then
`cudalloc view` turns the snapshot into one HTML page.
"""
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.join(HERE, "..", "..", "tools", "python"))

out_dir = sys.argv[1] if len(sys.argv) > 1 else "."
snapshot = os.path.join(out_dir, "oom_snapshot.json")
# A 1 GiB cap, a trace of the last 100,000 events, and the snapshot on out-of-memory. The
# configuration is read when cudalloc starts, so it is set before enable().
os.environ["CUDALLOC_CONF"] = f"limit:1G,trace:100000,snapshot_on_oom:{snapshot}"
# Each out-of-memory error gets a file of its own: the first this name, the second
# oom_snapshot.2.json, and so on (%n in the path numbers them instead).
second = os.path.join(out_dir, "oom_snapshot.2.json")
for old in (snapshot, second):
    if os.path.exists(old):
        os.remove(old)  # so that the checks below see this run's snapshots

import cudalloc  # noqa: E402

cudalloc.enable()
import torch  # noqa: E402

kept = []
try:
    for i in range(64):  # 64 MiB more per round, until the cap is reached
        kept.append(torch.empty(64 << 20, dtype=torch.uint8, device="cuda"))
except RuntimeError as error:  # PyTorch raises cudalloc's failure as a RuntimeError
    if "out of memory" not in str(error):
        raise
    print(f"out of memory after {len(kept)} tensors, as expected:\n  {str(error)[:160]}")
else:
    sys.exit("expected an out-of-memory error under the 1 GiB cap")

if not os.path.isfile(snapshot):
    sys.exit(f"no snapshot at {snapshot}: was snapshot_on_oom taken from CUDALLOC_CONF?")
print(f"snapshot written: {snapshot} ({os.path.getsize(snapshot)} bytes)")

# A second failure, of another size: a second file, which names its own request.
try:
    torch.empty(3 << 30, dtype=torch.uint8, device="cuda")
    sys.exit("expected a second out-of-memory error")
except RuntimeError as error:
    if "out of memory" not in str(error):
        raise
import json  # noqa: E402

for path, size, number in ((snapshot, 64 << 20, 1), (second, 3 << 30, 2)):
    if not os.path.isfile(path):
        sys.exit(f"no snapshot at {path}: an out-of-memory error wrote none")
    failed = json.load(open(path))["cudalloc"].get("oom", {})
    if failed.get("sequence") != number or failed.get("size", 0) < size:
        sys.exit(f"{path} does not name the failed request {size} (error {number}): {failed}")
    print(f"{path}: error {number}, request of {failed['size']} bytes on device {failed['device']}")


def find_cli():
    """The `cudalloc` tool: on PATH, next to the library in use, or in the checkout's build/."""
    library_dir = os.path.dirname(cudalloc.library_path())
    places = [shutil.which("cudalloc"),
              os.path.join(library_dir, "cudalloc") if library_dir else None,
              os.path.join(HERE, "..", "..", "build", "cudalloc")]
    return next((p for p in places if p and os.path.isfile(p) and os.access(p, os.X_OK)), None)


cli = find_cli()
if cli:
    page = os.path.join(out_dir, "oom_snapshot.html")
    subprocess.run([cli, "view", snapshot, "-o", page], check=True)
    print(f"open {page} in a browser to see the segments and the timeline up to the failure")
else:
    print(f"view it with: cudalloc view {snapshot} -o oom_snapshot.html")
