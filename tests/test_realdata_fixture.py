"""A fresh clone without the real datasets: their tests are skipped with how to get them, or fail where required.

Runs pytest on a small test module of the project's own kind (marker, fixture, ``realdata_path``, a
parametrised list) with ``SHARDSCOPE_REALDATA`` pointing at a folder that does not exist.

The probe's pytest loads the project's ``tests/conftest.py`` (where the skip-or-fail rule lives) and the plugins
the project's tests run with (pytest-timeout, Hypothesis), but not the environment's plugins that have nothing to
do with the rule (:data:`UNRELATED_PLUGINS`): napari's, npe2's and zarr's pytest plugins import napari and zarr at
start-up (1.7 of the 2.1 CPU seconds each probe took), pytest-qt imports Qt and pytest-xvfb starts an X server,
and pytest-xdist would spread the probe over workers when the test runs outside xdist (``-p no:xdist``: 6 CPU s
a probe).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PROBE = '''
import pytest
from tests.realdata import realdata_dirs, realdata_path

@pytest.mark.realdata
def test_marked():
    raise AssertionError("ran without the data")

def test_fixture(realdata):
    raise AssertionError("ran without the data")

def test_path():
    realdata_path("igneous_pinky_sharded")
    raise AssertionError("ran without the data")

@pytest.mark.realdata
@pytest.mark.parametrize("rel", realdata_dirs(("info",)))
def test_each(rel):
    raise AssertionError("ran without the data")

def test_unrelated():
    pass
'''


#: pytest plugins of this environment that the probe leaves out (``-p no:NAME``): none of them takes part in
#: choosing skip or fail, and each costs start-up time (see the module docstring).
UNRELATED_PLUGINS = ("napari", "npe2", "napari-plugin-engine", "zarr", "pytest-qt", "xvfb", "xdist")


def run_probe(tmp_path: Path, *, required: bool) -> subprocess.CompletedProcess[str]:
    probe = REPO / "tests" / f"test_probe_{os.getpid()}_{int(required)}.py"
    probe.write_text(PROBE)
    try:
        env = {**os.environ, "SHARDSCOPE_REALDATA": str(tmp_path / "absent")}
        env.pop("SHARDSCOPE_REALDATA_REQUIRED", None)
        if required:
            env["SHARDSCOPE_REALDATA_REQUIRED"] = "1"
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                               *(arg for name in UNRELATED_PLUGINS for arg in ("-p", f"no:{name}")), str(probe)],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    finally:
        probe.unlink()


def test_absent_real_datasets_skip_with_how_to_get_them(tmp_path: Path) -> None:
    result = run_probe(tmp_path, required=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed, 4 skipped" in result.stdout, result.stdout
    assert "set SHARDSCOPE_REALDATA" in result.stdout


def test_absent_real_datasets_fail_where_required(tmp_path: Path) -> None:
    result = run_probe(tmp_path, required=True)
    assert result.returncode == 1, result.stdout + result.stderr
    summary = result.stdout.strip().splitlines()[-1]
    assert "1 passed" in summary and "skipped" not in summary and "ran without the data" not in result.stdout, summary
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (failed|errors?)", summary)}
    assert sum(counts.values()) == 4, summary  # each test that needs the data fails (in the test or its setup)


def test_no_test_finds_the_real_datasets_by_hand() -> None:
    """Every test reaches the data through tests/realdata.py, so one variable and one rule decide skip or fail."""
    by_hand = re.compile(r'"shared" / "realdata"|/shared/realdata"|skipif\(not [^\n]*REALDATA|pytest\.skip\(f?"no real')
    offenders = [str(p.relative_to(REPO)) for p in sorted((REPO / "tests").rglob("*.py"))
                 if p.name not in ("realdata.py", Path(__file__).name) and by_hand.search(p.read_text())]
    assert offenders == [], offenders
