"""A store on an http:// URL whose server is gone (a refused loopback connection) fails promptly and typed.

TensorStore's own default context retries a refused connection for minutes (32 retries with
backoff): a store opened without a context used to hang there instead of failing within the
configured remote limits (``SHARDSCOPE_TIMEOUT_S`` / ``SHARDSCOPE_RETRIES``). Each case runs in a
subprocess (bounded, so the old hang fails the test instead of stalling the suite) on a real port
that was bound and closed on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

#: The bound on one subprocess: far above the limits it runs with (1 s timeout, 1 retry), far below the hang.
HANG_BOUND_S = 90

SCRIPT = textwrap.dedent("""
    import json, sys
    from napari_shardscope.core.bytestore import open_store, read_ranges, read_suffixes
    from napari_shardscope.core.bytestore.kvreads import read_keys
    from napari_shardscope.core.bytestore.url import parse_url
    url = sys.argv[1]
    calls = {
        "read": lambda s: s.read("info"),
        "read_range": lambda s: s.read_range("info", 0, 10),
        "read_suffix": lambda s: s.read_suffix("info", 10),
        "read_ranges": lambda s: read_ranges(s, [("a", 0, 4), ("b", 8, 16)]),
        "read_suffixes": lambda s: read_suffixes(s, [("a", 4)]),
        "read_keys": lambda s: read_keys(parse_url(url), ["info"], None),
    }
    out = {}
    for name, call in calls.items():
        try:
            call(open_store(url))
            out[name] = ["no error", ""]
        except Exception as exc:
            out[name] = [[c.__name__ for c in type(exc).__mro__], str(exc)]
    print(json.dumps(out))
""")


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()  # nothing listens there now: a connection is refused
    return port


def test_reads_from_a_dead_http_server_fail_typed_within_the_remote_limits() -> None:
    url = f"http://127.0.0.1:{_closed_port()}/data/"
    env = {**os.environ, "SHARDSCOPE_TIMEOUT_S": "1", "SHARDSCOPE_RETRIES": "1"}
    try:
        done = subprocess.run([sys.executable, "-c", SCRIPT, url], capture_output=True, text=True, env=env,
                              timeout=HANG_BOUND_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"reading {url} (no server) still hangs after {HANG_BOUND_S} s")
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    for name, (mro, message) in got.items():
        assert "StoreUnreachableError" in mro, (name, mro, message)
        assert "127.0.0.1" in message and "--timeout/--retries" in message, (name, message)
