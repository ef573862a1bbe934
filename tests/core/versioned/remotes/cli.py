"""The ``shardscope`` command as a user runs it, for the remotes tests: a subprocess, no ``--quiet``."""

from __future__ import annotations

import json
import subprocess
import sys
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
