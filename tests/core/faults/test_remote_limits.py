"""Remote I/O obeys the limits the user sets: a stalled, resetting or lying server ends in a typed
:class:`StoreError` within ``(retries + 1) x timeout`` (plus backoff and generous slack), never a hang.

TensorStore reads its curl timeouts once per process, so each case runs in a fresh Python process
(which is also how a hang is caught: the parent waits with a timeout and kills the child).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from napari_shardscope.core.bytestore.context import (
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT_S,
    RemoteLimits,
    limits_from_env,
    make_context,
    remote_limits,
    set_remote_limits,
)
from napari_shardscope.core.cli.main import run
from napari_shardscope.core.errors import ArgumentError
from tests.http_fault_servers import FaultServer

ROOT = Path(__file__).resolve().parents[3]

CHILD = r"""
import json, sys, time
from napari_shardscope.core.volumes.opening import open_volume
start = time.monotonic()
try:
    open_volume(sys.argv[1])
    outcome = {"error": None}
except BaseException as exc:
    outcome = {"error": type(exc).__name__, "mro": [c.__name__ for c in type(exc).__mro__], "message": str(exc)}
outcome["elapsed"] = time.monotonic() - start
print(json.dumps(outcome))
"""


def _open_in_child(url: str, timeout_s: float, retries: int, bound_s: float) -> dict[str, object]:
    env = {**os.environ, "SHARDSCOPE_TIMEOUT_S": str(timeout_s), "SHARDSCOPE_RETRIES": str(retries),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    for name in ("TENSORSTORE_CURL_CONNECT_TIMEOUT_SECONDS", "TENSORSTORE_CURL_LOW_SPEED_TIME_SECONDS"):
        env.pop(name, None)
    try:
        done = subprocess.run([sys.executable, "-c", CHILD, url], env=env, capture_output=True, text=True,
                              timeout=bound_s)
    except subprocess.TimeoutExpired:
        pytest.fail(f"opening {url} hung past {bound_s} s with timeout {timeout_s} s and {retries} retries")
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("mode", ["stall", "reset", "lie"])
def test_a_misbehaving_server_is_a_typed_store_error_within_the_limits(mode: str) -> None:
    limits = RemoteLimits(timeout_s=1.0, retries=1)
    with FaultServer(mode) as server:
        outcome = _open_in_child(server.url, limits.timeout_s, limits.retries, bound_s=60)
        assert outcome["error"] is not None, outcome
        assert "StoreError" in outcome["mro"], outcome  # type: ignore[operator]
        if mode == "stall":
            assert outcome["error"] == "StoreUnreachableError", outcome
            assert "127.0.0.1" in str(outcome["message"])
        # Interpreter start-up is outside `elapsed`; the slack covers a loaded 2-core machine.
        assert float(outcome["elapsed"]) <= limits.worst_case_s + 15, outcome  # type: ignore[arg-type]
        assert server.connections >= 1


def test_the_retry_budget_is_how_often_a_request_is_tried() -> None:
    with FaultServer("stall") as server:
        outcome = _open_in_child(server.url, 1.0, 2, bound_s=60)
        assert outcome["error"] == "StoreUnreachableError", outcome
        # Format detection reads its documents concurrently: each one is tried 1 + 2 times.
        assert server.connections >= 3


def test_default_limits_fail_an_unreachable_host_in_about_ten_seconds() -> None:
    limits = RemoteLimits()
    assert (limits.timeout_s, limits.retries) == (DEFAULT_TIMEOUT_S, DEFAULT_RETRIES)
    assert 5 <= limits.worst_case_s <= 12


def test_limits_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHARDSCOPE_TIMEOUT_S", "2.5")
    monkeypatch.setenv("SHARDSCOPE_RETRIES", "4")
    assert limits_from_env() == RemoteLimits(2.5, 4)
    for name, value in (("SHARDSCOPE_TIMEOUT_S", "soon"), ("SHARDSCOPE_TIMEOUT_S", "0"),
                        ("SHARDSCOPE_TIMEOUT_S", "nan"), ("SHARDSCOPE_RETRIES", "-1"), ("SHARDSCOPE_RETRIES", "1.5")):
        monkeypatch.setenv("SHARDSCOPE_TIMEOUT_S", "1")
        monkeypatch.setenv("SHARDSCOPE_RETRIES", "1")
        monkeypatch.setenv(name, value)
        with pytest.raises(ArgumentError, match=name):
            limits_from_env()


def test_the_retry_budget_reaches_every_remote_driver_of_the_context() -> None:
    spec = make_context(1 << 20, RemoteLimits(1.0, 5)).spec.to_json()
    for resource in ("http_request_retries", "gcs_request_retries", "s3_request_retries"):
        assert spec[resource]["max_retries"] == 5


def test_set_remote_limits_replaces_the_shared_limits() -> None:
    before = remote_limits()
    try:
        assert set_remote_limits(retries=7) == RemoteLimits(before.timeout_s, 7)
        assert remote_limits().retries == 7
    finally:
        set_remote_limits(before.timeout_s, before.retries)


def test_cli_global_options_are_checked(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["--retries", "-1", "inspect", "/nonexistent"]) == 2
    assert "retry count" in capsys.readouterr().err
    assert run(["--timeout", "0", "inspect", "/nonexistent"]) == 2


def test_cli_timeout_and_retries_bound_a_stalled_server() -> None:
    with FaultServer("stall") as server:
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        for name in ("SHARDSCOPE_TIMEOUT_S", "SHARDSCOPE_RETRIES", "TENSORSTORE_CURL_CONNECT_TIMEOUT_SECONDS",
                     "TENSORSTORE_CURL_LOW_SPEED_TIME_SECONDS"):
            env.pop(name, None)
        code = ("import sys; from napari_shardscope.core.cli.main import run; "
                "sys.exit(run(['--timeout', '1', '--retries', '0', 'inspect', sys.argv[1]]))")
        try:
            done = subprocess.run([sys.executable, "-c", code, server.url], env=env, capture_output=True,
                                  text=True, timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail("shardscope --timeout 1 --retries 0 inspect hung on a stalled server")
        assert done.returncode == 8, done.stderr
        assert "127.0.0.1" in done.stderr and "Traceback" not in done.stderr
