"""Cut a real torch-profiler trace down to a test fixture: the events of its first `--ms` milliseconds
(only events that end inside the window, so nesting stays whole), gzip'd.

    python tests/data/profile/cut.py RUN_DIR/profile/X.pt.trace.json.gz tests/data/profile/LEG.pt.trace.json.gz --ms 60
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path


def cut(src: Path, dest: Path, ms: float) -> int:
    with gzip.open(src, "rt", encoding="utf-8") as f:
        data = json.load(f)
    events = data["traceEvents"]
    ops = [e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    t0 = min(e["ts"] for e in ops)
    end = t0 + ms * 1000
    keep = [e for e in events if e.get("ph") != "X" or (e["ts"] >= t0 and e["ts"] + e.get("dur", 0) <= end)]
    with gzip.open(dest, "wt", encoding="utf-8") as f:
        json.dump({"traceEvents": keep}, f)
    return len(keep)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("src", type=Path)
    p.add_argument("dest", type=Path)
    p.add_argument("--ms", type=float, default=60.0)
    a = p.parse_args()
    print(cut(a.src, a.dest, a.ms))
