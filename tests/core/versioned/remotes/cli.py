"""The ``shardscope`` command as a user runs it, for the remotes tests: a subprocess, no ``--quiet``."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

STEP_TIMEOUT_S = 240


def shardscope(*args: str, expect: int = 0) -> subprocess.CompletedProcess[str]:
    """Run ``shardscope ARGS`` (this interpreter, this environment: an S3 test's endpoint included).

    Fails the test with the command's stderr when its exit code is not ``expect``.
    """
    proc = subprocess.run([sys.executable, "-m", "napari_shardscope", *args], capture_output=True, text=True,
                          timeout=STEP_TIMEOUT_S, stdin=subprocess.DEVNULL)
    assert proc.returncode == expect, (f"shardscope {' '.join(args)}: exit {proc.returncode}, expected {expect}\n"
                                       f"stdout: {proc.stdout[-3000:]}\nstderr: {proc.stderr[-3000:]}")
    return proc


def shardscope_json(*args: str, expect: int = 0) -> Any:
    """``shardscope ARGS --json``: the document it printed on stdout."""
    return json.loads(shardscope(*args, "--json", expect=expect).stdout)


def shardscope_batch(*commands: Sequence[str], expect: Sequence[int] | None = None) -> list[Any]:
    """Several ``shardscope`` command lines, one after another, in **one** child process (``tests/cli_batch.py``:
    each through the console script's ``main`` on real pipes); one ``subprocess.CompletedProcess`` per command.

    For the steps of a test that follow each other with nothing done in between: what the test checks is what
    each verb prints, returns and leaves on disk (every verb opens the repository afresh), not a process
    starting, and one start-up (about a second of CPU importing numpy and TensorStore) serves them all.
    Fails the test with a command's stderr when its exit code is not its ``expect`` (0 by default).
    """
    from tests.cli_batch import run_commands

    done = run_commands(commands, timeout=STEP_TIMEOUT_S * max(1, len(commands)))
    for proc, code in zip(done, expect if expect is not None else [0] * len(done), strict=True):
        assert proc.returncode == code, (f"{' '.join(proc.args)}: exit {proc.returncode}, expected {code}\n"
                                         f"stdout: {proc.stdout[-3000:]}\nstderr: {proc.stderr[-3000:]}")
    return done
