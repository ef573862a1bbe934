"""``shardscope repo log``: --limit, --since DATE|REF, --first-parent, --all, and JSON Lines that reach a
pipe one by one while the verb still runs."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
from datetime import datetime
from pathlib import Path

import pytest

import napari_shardscope.core.versioned.history as history_module
from napari_shardscope.core.cli import run
from napari_shardscope.core.versioned import create_repository

ROOT = Path(__file__).resolve().parents[3]


def day(n: int) -> float:
    return datetime(2025, 1, 1 + n, 12, 0).timestamp()  # local time, as a naive --since means


@pytest.fixture
def dag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, dict[str, str]]:
    """root - m1 - m2 ------------ m5 (merge) - m6      (main), one version a day
                    \\- s3 - s4 -/                        (side)"""
    clock = iter(day(n) for n in range(100))
    now = [day(0)]

    def fake_time() -> float:
        return now[0]

    monkeypatch.setattr(history_module.time, "time", fake_time)
    path = tmp_path / "repo"
    names: dict[str, str] = {}
    with create_repository(path) as repo:
        now[0] = next(clock)
        names["root"] = repo.commit("main", "root").uuid
        for name, parent, branch in (("m1", "main", None), ("m2", "main", None), ("s3", "main", "side"),
                                     ("s4", "side", None)):
            now[0] = next(clock)
            v = repo.new_version(parent, branch)
            names[name] = repo.commit(v, name).uuid
        now[0] = next(clock)
        names["m5"] = repo.commit(repo.merge("main", "side", policy="ours").version, "m5").uuid
        now[0] = next(clock)
        names["m6"] = repo.commit(repo.new_version("main"), "m6").uuid
    monkeypatch.undo()
    return str(path), names


def log(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], str]:
    """Exit code, the logged versions' messages (from JSON Lines), stderr."""
    code = run(["repo", "log", *argv, "--json"])
    out, err = capsys.readouterr()
    return code, [json.loads(line)["message"] for line in out.splitlines()], err


def test_walks(dag: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]) -> None:
    path, names = dag
    everything = ["m6", "m5", "s4", "s3", "m2", "m1", "root"]
    assert log(capsys, path)[1] == everything  # git log order: newest first, through both parents
    assert log(capsys, path, "--first-parent")[1] == ["m6", "m5", "m2", "m1", "root"]
    assert log(capsys, path, "--limit", "3")[1] == ["m6", "m5", "s4"]
    assert log(capsys, path, "-n", "2", "--first-parent")[1] == ["m6", "m5"]
    assert log(capsys, path, "side")[1] == ["s4", "s3", "m2", "m1", "root"]
    assert log(capsys, path, names["m5"][:8])[1] == everything[1:]
    # --since REF: what main has that m2 has not (git log m2..main)
    assert log(capsys, path, "--since", names["m2"][:8])[1] == ["m6", "m5", "s4", "s3"]
    assert log(capsys, path, "--since", "side")[1] == ["m6", "m5"]
    assert log(capsys, path, "side", "--since", "main")[1] == []
    # --since DATE: stops at the first version created before it
    assert log(capsys, path, "--since", "2025-01-05")[1] == ["m6", "m5", "s4"]
    assert log(capsys, path, "--since", "2025-01-05T12:00")[1] == ["m6", "m5", "s4"]
    assert log(capsys, path, "--since", "2025-01-05T12:00:01")[1] == ["m6", "m5"]
    assert log(capsys, path, "--all", "--limit", "2")[1] == ["m6", "m5"]
    assert log(capsys, path, "--all", "--since", "2025-01-04")[1] == ["m6", "m5", "s4", "s3"]


def test_text_output_and_refusals(dag: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]) -> None:
    path, names = dag
    assert run(["repo", "log", path, "-n", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == [names["m6"], names["m5"], "note"]  # a merge notes what it did
    assert lines[1].split()[1:5] == ["main", "committed", "parents", f"{names['m2'][:8]},{names['s4'][:8]}"]
    assert lines[2].startswith("    note 0: merge of ")
    refusals = [
        (["--all", "--since", "side"], 2, "--all lists every version"),
        (["--since", "2025-13-45"], 2, "not an ISO 8601 date"),
        (["--since", "nosuch"], 3, "nosuch"),
    ]
    for argv, code, text in refusals:
        got = run(["repo", "log", path, *argv])
        err = capsys.readouterr().err
        assert (got, text in err, err.count("\n")) == (code, True, 1), (argv, got, err)
    assert run(["repo", "log", path, "--limit", "0"]) == 2  # a usage error (argparse prints the usage too)
    assert "expected a positive integer" in capsys.readouterr().err
    assert run(["repo", "branch", path, "main", "2025-01-04"]) == 0
    capsys.readouterr()
    assert run(["repo", "log", path, "--since", "2025-01-04"]) == 2
    assert "both a date and a branch name" in capsys.readouterr().err


def test_json_lines_reach_the_pipe_while_the_verb_runs(dag: tuple[str, dict[str, str]], tmp_path: Path) -> None:
    """The walk is held after its first version (``held_log``) until the test has read the first line."""
    path, names = dag
    fifo = tmp_path / "go"
    os.mkfifo(fifo)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # a user's shell: block-buffered pipe
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.Popen([sys.executable, "-m", "tests.core.cli.held_log", str(fifo), "repo", "log", path,
                             "--json"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdout is not None
    released = threading.Event()

    def release() -> None:
        if not released.is_set():
            released.set()
            with open(fifo, "wb"):
                pass

    try:
        ready, _, _ = select.select([proc.stdout], [], [], 120)
        first = proc.stdout.readline() if ready else b""
        assert proc.poll() is None, "the verb ended before the test released it"
        assert json.loads(first)["uuid"] == names["m6"], "the first record did not reach the pipe while the verb ran"
        release()
        rest = proc.stdout.read()
        assert proc.wait(timeout=120) == 0, proc.stderr.read() if proc.stderr else ""
        assert [json.loads(line)["message"] for line in rest.splitlines()] == ["m5", "s4", "s3", "m2", "m1", "root"]
    finally:
        if proc.poll() is None:
            threading.Thread(target=release, daemon=True).start()
            proc.kill()
            proc.wait(timeout=30)
