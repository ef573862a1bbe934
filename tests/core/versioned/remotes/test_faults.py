"""A stalling or failing remote ends a clone or fetch in a typed storage error within the configured limits.

Each case runs the ``shardscope`` command in a fresh process (TensorStore reads its curl timeouts
once per process); the parent's own timeout catches a hang.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from napari_shardscope.core.bytestore.context import RemoteLimits
from tests.http_fault_servers import FaultServer

ROOT = Path(__file__).resolve().parents[4]


@pytest.mark.parametrize("mode", ["stall", "reset", "lie"])
def test_clone_from_a_misbehaving_endpoint_is_a_typed_error(mode: str, tmp_path: Path) -> None:
    limits = RemoteLimits(timeout_s=1.0, retries=1)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    for name in ("TENSORSTORE_CURL_CONNECT_TIMEOUT_SECONDS", "TENSORSTORE_CURL_LOW_SPEED_TIME_SECONDS"):
        env.pop(name, None)
    with FaultServer(mode) as server:
        try:
            done = subprocess.run(
                [sys.executable, "-m", "napari_shardscope", "--timeout", str(limits.timeout_s), "--retries",
                 str(limits.retries), "clone", server.url, str(tmp_path / "b"), "--json"],
                env=env, capture_output=True, text=True, timeout=90, cwd=ROOT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"clone from a {mode} server hung")
        assert server.connections >= 1
    assert done.returncode in (4, 8), (done.returncode, done.stderr)  # storage error (or a lying body: corrupt)
    error = json.loads(done.stdout)["error"]
    if mode == "stall":
        assert error["group"] == "store" and done.returncode == 8 and "refs.json" in error["key"], error
    assert not (tmp_path / "b").exists()
