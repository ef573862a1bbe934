"""Open, edit and undo on a repository already migrated by ``shardscope repo migrate``, with bench/scale.py's children.

Why: ``bench/scale.py --part mutations`` migrates a fresh copy of the history before it measures, which at
10⁶ mutations is an hour of wall time on a loaded 2-core machine. Once a copy has been migrated (and
``repo migrate`` resumes an interrupted one), this measures the same figures — open head / a committed
version + first plane and their peak RSS, merge, cleave, undo after a restart, undo-record bytes — in fresh
processes over that copy, and optionally the previous code opening the unmigrated history as the peer.

    PYTHONPATH=src:. python bench/scale_migrated.py MIGRATED_COPY [--history HISTORY --data DATA] [--rounds 3]

``MIGRATED_COPY`` is a directory as bench/scale.py writes them (``repo/`` and ``head.json``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import scale as S


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("migrated", type=Path)
    parser.add_argument("--history", type=Path, help="the unmigrated history: the previous code opens it once")
    parser.add_argument("--data", type=Path, help="bench/scale.py's data directory (for the previous source)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--supervoxels", type=int, default=100_000)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    heads = json.loads((args.migrated / "head.json").read_text())
    head, middle = heads["head"], heads.get("middle", heads["head"])
    n = args.supervoxels
    _, cy, _ = S.geometry(n)
    win = min(S.WINDOW, cy * S.SV[1])
    out: dict[str, object] = {}

    def show(key: str, value: object) -> None:
        out[key] = value
        print(key, value, flush=True)

    for label, ref in (("head", head), ("committed", middle)):
        task = {"task": "open", "ref": ref, "z": 5, "h": win, "w": win, "repo": str(args.migrated / "repo")}
        seconds, rss, _ = S.measure(task, args.rounds, old=None)
        show(f"open {label} + first plane s", seconds)
        show(f"open {label} peak RSS MB", rss)
    scratch = args.migrated.parent / (args.migrated.name + "-scratch")
    merges, cleaves, undos = [], [], []
    for _ in range(args.rounds):
        shutil.rmtree(scratch, ignore_errors=True)
        S.fresh_copy(args.migrated, scratch)
        got = S.child({"task": "edit", "ref": head, "svs": [11, n // 2 + 7], "repo": str(scratch / "repo")}, old=None)
        assert got is not None
        merges.append(got["merge_seconds"])
        cleaves.append(got["cleave_seconds"])
        shutil.rmtree(scratch, ignore_errors=True)
        S.fresh_copy(args.migrated, scratch)
        got = S.child({"task": "undo", "ref": head, "repo": str(scratch / "repo")}, old=None)
        assert got is not None
        undos.append(got["seconds"])
    show("merge s", merges)
    show("cleave s", cleaves)
    show("undo after a restart s", undos)
    shutil.rmtree(scratch, ignore_errors=True)
    S.fresh_copy(args.migrated, scratch)
    show("undo bytes", S.child({"task": "undo-bytes", "repo": str(scratch / "repo"), "ref": head, "n": n,
                                "edits": 20}, old=None))
    shutil.rmtree(scratch, ignore_errors=True)
    if args.history is not None and args.data is not None:
        task = {"task": "open", "ref": head, "z": 5, "h": win, "w": win, "repo": str(args.history / "repo")}
        seconds, rss, _ = S.measure(task, 1, old=S.old_source(args.data), timeout=3600)
        show("previous: open head + first plane s", seconds)
        show("previous: open head peak RSS MB", rss)
    if args.out is not None:
        args.out.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
