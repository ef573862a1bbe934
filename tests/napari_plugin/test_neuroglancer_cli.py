"""``shardscope serve`` as a user runs it (subprocesses, real server, Ctrl-C).

``shardscope open LINK STATE_FILE`` of a served volume is checked in the one ``open`` run of
``tests/napari_plugin/test_reader.py::test_cli_open_screenshot`` (each ``open`` is a napari start).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.labelmap import create_labelmap
from napari_shardscope.core.serve.states import load_state
from napari_shardscope.core.versioned import create_repository
from tests.core.labelmap.volumes import voronoi_supervoxels, write_precomputed
from tests.realdata import REALDATA

PINKY = str(REALDATA / "igneous_pinky_sharded")


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "napari_shardscope", *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def serving() -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``shardscope serve PINKY`` running; yields the process and the link it printed."""
    proc = subprocess.Popen([sys.executable, "-m", "napari_shardscope", "serve", PINKY], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()  # bounded: the process prints the link first or exits
        assert url.startswith("http://127.0.0.1:"), proc.stderr.read() if proc.stderr else ""
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


@pytest.mark.realdata
def test_serve_until_ctrl_c(serving: tuple[subprocess.Popen[str], str]) -> None:
    proc, url = serving
    state = load_state(url)  # the link names the state document the server keeps
    source = state["layers"][0]["source"].removeprefix("precomputed://")
    with urllib.request.urlopen(source + "info", timeout=10) as resp:
        assert json.loads(resp.read())["scales"][0]["key"] == "8_8_40"
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 0


def test_serve_a_version_prints_its_url(tmp_path: Path) -> None:
    base = voronoi_supervoxels((4, 32, 32), 8, seed=1)
    write_precomputed(tmp_path / "seg", base, ((1, 1, 1),), chunk_xyz=(16, 16, 4))
    repo = create_repository(tmp_path / "repo")
    lm = create_labelmap(repo, "seg", tmp_path / "seg", block=16)
    svs = [int(s) for s in np.unique(base)]
    lm.at("main").merge(svs[0], [svs[1]])
    uuid = repo.version("main").uuid
    repo.close()
    result = cli("serve", str(tmp_path / "repo"), "--version", uuid[:8], "--segments", str(svs[0]),
                 "--print-url", "--json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert uuid in out["state"]["layers"][0]["source"] and out["state"]["layers"][0]["segments"] == [str(svs[0])]
    assert out["url"].startswith(out["server"] + "/v/") and not out["serving"]
    # a local base cannot be handed over as equivalences (nobody else can read it)
    result = cli("serve", str(tmp_path / "repo"), "--equivalences")
    assert result.returncode == 2 and "local" in result.stderr


@pytest.mark.realdata
def test_serve_refuses_a_version_of_a_dataset() -> None:
    result = cli("serve", PINKY, "--version", "abc", "--print-url")
    assert result.returncode == 2 and "repository" in result.stderr
