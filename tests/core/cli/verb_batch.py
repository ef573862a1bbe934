"""Run many ``shardscope`` command lines in one process, as the console script runs each (``cli.main``).

Used by ``test_every_verb.py`` to keep one Python start-up per output mode instead of one per verb:
``python verb_batch.py SPEC.json``, where the spec lists ``{"argv": [...], "cwd": DIR}`` cases, a
``results`` file and whether stdout and stderr are one stream (a terminal). Before each case a
marker line goes to stdout (and to stderr when it is a separate stream), so the test can cut the
output into one piece per case; the exit codes go to the results file.
"""

from __future__ import annotations

import json
import os
import sys

MARKER = "@@shardscope-case {}@@"


def main(spec_path: str) -> int:
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    from napari_shardscope.cli import main as shardscope

    codes: list[int] = []
    streams = (sys.stdout,) if spec["merged"] else (sys.stdout, sys.stderr)
    for i, case in enumerate(spec["cases"]):
        os.chdir(case["cwd"])
        for stream in streams:
            stream.write(f"\n{MARKER.format(i)}\n")
            stream.flush()
        try:
            code = shardscope(case["argv"])
        except SystemExit as exc:  # never expected: every verb returns its code
            code = exc.code if isinstance(exc.code, int) else 1
            print(f"verb_batch: SystemExit({exc.code!r}) escaped", file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        codes.append(code)
        with open(spec["results"], "w", encoding="utf-8") as f:
            json.dump(codes, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
