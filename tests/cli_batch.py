"""Several ``shardscope`` command lines in one child process: one Python start-up instead of one per command.

A plain CLI run spends most of its CPU importing the package and its libraries (numpy, TensorStore: about
a second of CPU each time), so a test that runs a dozen command lines spends a dozen seconds starting
Python. Where a test is about what a verb prints and returns, not about a fresh process starting, it runs
its command lines through :func:`run_commands`: one child process (``python tests/cli_batch.py SPEC``)
runs each through the console script's ``main`` exactly as ``shardscope ARGS`` would, on stdout and stderr
that are real pipes (or one pseudo-terminal, for ``test_every_verb``), and the test gets one
:class:`subprocess.CompletedProcess` per command, as ``subprocess.run`` would have returned.

What the commands of one batch share is the process: its caches, its remote limits (``--timeout``), the
modules already imported. A test about start-up itself (imports, environment variables read once, a
signal, a crash) starts its own process.

The child side: the spec lists ``{"argv": [...], "cwd": DIR}`` cases, a ``results`` file and whether
stdout and stderr are one stream (a terminal). Before each case a marker line goes to stdout (and to
stderr when it is a separate stream), so the parent can cut the output into one piece per case; the
exit codes go to the results file, rewritten after each case.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

MARKER = "@@shardscope-case {}@@"
#: This file, run as the child: ``python tests/cli_batch.py SPEC.json``.
SCRIPT = Path(__file__)


def split_cases(text: str, n: int) -> list[str]:
    """``text`` cut at the batch's marker lines: the output of each of ``n`` cases (a terminal writes CR LF)."""
    text = text.replace("\r\n", "\n")
    pieces = []
    for i in range(n):
        marker = f"\n{MARKER.format(i)}\n"
        head, found, text = text.partition(marker)
        assert found, f"no marker for case {i}"
        if i:
            pieces.append(head)
    pieces.append(text)
    return pieces


def run_commands(commands: Sequence[Sequence[str]], *, cwd: str | os.PathLike[str] | None = None,
                 env: Mapping[str, str] | None = None, timeout: float = 600) -> list[Any]:
    """Run each ``shardscope`` command line (the words after ``shardscope``) in one child process with piped
    stdout/stderr; one ``subprocess.CompletedProcess[str]`` per command, its ``args`` the command line."""
    import subprocess
    import tempfile

    where = Path(cwd) if cwd is not None else Path.cwd()
    with tempfile.TemporaryDirectory(prefix="cli-batch-") as tmp:
        results, spec = Path(tmp) / "results.json", Path(tmp) / "spec.json"
        cases = [{"argv": [str(a) for a in argv], "cwd": str(where)} for argv in commands]
        spec.write_text(json.dumps({"cases": cases, "results": str(results), "merged": False}))
        whole = subprocess.run([sys.executable, str(SCRIPT), str(spec)], cwd=where, env=env, capture_output=True,
                               text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        shown = f"exit {whole.returncode}\nstdout:\n{whole.stdout}\nstderr:\n{whole.stderr}"
        assert whole.returncode == 0, shown
        codes = json.loads(results.read_text())
    assert len(codes) == len(cases), shown
    outs, errs = split_cases(whole.stdout, len(cases)), split_cases(whole.stderr, len(cases))
    return [subprocess.CompletedProcess(["shardscope", *case["argv"]], code, out, err)
            for case, code, out, err in zip(cases, codes, outs, errs, strict=True)]


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
            print(f"cli_batch: SystemExit({exc.code!r}) escaped", file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        codes.append(code)
        with open(spec["results"], "w", encoding="utf-8") as f:
            json.dump(codes, f)
    return 0


if __name__ == "__main__":
    if sys.path and Path(sys.path[0]).resolve() == SCRIPT.resolve().parent:
        del sys.path[0]  # tests/ itself: its packages (core, widgets, docs) must not shadow anything
    sys.exit(main(sys.argv[1]))
