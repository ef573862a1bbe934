"""``shardscope repo ...`` and ``shardscope kv ...`` through the real command-line entry point."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from napari_shardscope.core.cli import run


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = run(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> object:
    code, out, err = cli(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def cli_json_lines(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict[str, object]]:
    """A listing's ``--json`` output: JSON Lines, one record per line."""
    code, out, err = cli(capsys, *argv, "--json")
    assert code == 0, err
    return [json.loads(line) for line in out.splitlines()]


@pytest.mark.parametrize("engine", ["lmdb", "sqlite"])
def test_repo_and_kv_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str) -> None:
    path = str(tmp_path / "repo")
    init = cli_json(capsys, "repo", "init", path, "--engine", engine)
    assert isinstance(init, dict) and init["engine"] == engine
    root = init["root"]["uuid"]
    assert cli_json(capsys, "kv", "put", path, "main", "notes", "hello", "world")["size"] == 5
    (tmp_path / "blob").write_bytes(b"\x00\xffbinary")
    assert cli(capsys, "kv", "put", path, "main", "notes", "blob", "--file", str(tmp_path / "blob"))[0] == 0
    assert cli_json(capsys, "kv", "get", path, "main", "notes", "hello")["value"] == "world"
    assert cli_json(capsys, "kv", "get", path, "main", "notes", "blob")["encoding"] == "base64"
    assert cli_json(capsys, "repo", "commit", path, root[:6], "-m", "first")["locked"] is True
    child = cli_json(capsys, "repo", "branch", path, root[:8])
    trial = cli_json(capsys, "repo", "branch", path, root[:8], "trial")
    assert child["branch"] == "main" and trial["branch"] == "trial"
    assert cli_json(capsys, "kv", "put", path, "trial", "notes", "hello", "trial")["version"] == trial["uuid"]
    assert cli_json(capsys, "kv", "delete", path, "main", "notes", "blob")["deleted"] is True
    cli(capsys, "kv", "put", path, "main", "notes", "hello", "main")
    assert [e["key"] for e in cli_json(capsys, "kv", "ls", path, "main", "notes")] == ["hello"]
    assert cli(capsys, "kv", "ls", path, "trial", "notes")[1].split() == ["blob", "hello"]
    code, out, _ = cli(capsys, "kv", "get", path, root, "notes", "hello")
    assert code == 0 and out == "world"  # raw bytes on stdout; the root still has its value
    cli(capsys, "repo", "commit", path, "main", "-m", "main work")
    cli(capsys, "repo", "commit", path, "trial", "-m", "trial work")
    branches = cli_json(capsys, "repo", "branches", path)
    assert {b["name"]: b["head"] for b in branches} == {"main": child["uuid"], "trial": trial["uuid"]}
    assert cli(capsys, "repo", "note", path, "trial", "looks good")[0] == 0
    log = cli_json_lines(capsys, "repo", "log", path, "trial")
    assert [v["uuid"] for v in log] == [trial["uuid"], root]
    assert log[0]["notes"][0]["text"] == "looks good"
    assert len(cli_json_lines(capsys, "repo", "log", path, "--all")) == 3

    code, _, err = cli(capsys, "repo", "merge", path, "main", "trial")
    assert code == 7 and "changed on both sides" in err
    code, out, _ = cli(capsys, "repo", "merge", path, "main", "trial", "--json")
    refused = json.loads(out)
    assert code == 7 and refused["error"]["group"] == "conflict"
    assert refused["conflicts"] == [{"instance": "notes", "key": "hello"}]
    merged = cli_json(capsys, "repo", "merge", path, "main", "trial", "--policy", "theirs")
    assert merged["conflicts"] == [{"instance": "notes", "key": "hello"}]
    assert cli_json(capsys, "kv", "get", path, merged["version"]["uuid"][:10], "notes", "hello")["value"] == "trial"
    checkout = cli_json(capsys, "repo", "checkout", path, "main", "--write")
    assert checkout["uuid"] == merged["version"]["uuid"] and checkout["writable"] is True
    assert cli_json(capsys, "repo", "verify", path)["ok"] is True


def test_errors_and_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(tmp_path / "repo")
    cli(capsys, "repo", "init", path)
    cli(capsys, "kv", "put", path, "main", "notes", "k", "v")
    cli(capsys, "repo", "commit", path, "main", "-m", "c")
    cases = [
        (("kv", "put", path, "main", "notes", "k", "v2"), 6, "committed"),
        (("kv", "get", path, "main", "notes", "missing"), 3, "no key"),
        (("kv", "get", path, "nosuch", "notes", "k"), 3, "nosuch"),
        (("kv", "get", path, "main", "nosuch", "k"), 3, "nosuch"),  # an unknown instance is not found
        (("repo", "branch", path, "main", "main"), 7, "already exists"),
        (("repo", "checkout", path, "main", "--write"), 6, "committed"),
        (("repo", "log", str(tmp_path / "nothing")), 3, "no such repository"),
        (("kv", "put", path, "main", "notes", "k"), 2, "exactly one"),
        (("kv", "put", path, "main", "notes", "k", "--file", str(tmp_path / "absent")), 2, "--file: cannot read"),
    ]
    for argv, code, text in cases:
        got, _, err = cli(capsys, *argv)
        assert (got, text in err) == (code, True), (argv, got, err)
        assert err.count("\n") == 1  # one line on stderr
    assert json.loads(cli(capsys, "kv", "get", path, "main", "notes", "k", "--json")[1])["value"] == "v"


def test_console_script_runs_in_a_subprocess(tmp_path: Path) -> None:
    path = str(tmp_path / "repo")
    cmd = [sys.executable, "-m", "napari_shardscope"]
    done = subprocess.run([*cmd, "repo", "init", path, "--json"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    done = subprocess.run([*cmd, "repo", "branches", path, "--json"], capture_output=True, text=True, timeout=60)
    assert json.loads(done.stdout)[0]["name"] == "main"
    done = subprocess.run([*cmd, "repo", "log", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3 and "not a repository" in done.stderr


def test_a_refused_kv_put_creates_no_instance(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Putting into a committed version is refused; it used to create the instance first.
    path = str(tmp_path / "repo")
    cli(capsys, "repo", "init", path)
    cli(capsys, "repo", "commit", path, "main", "-m", "c")
    code, _, err = cli(capsys, "kv", "put", path, "main", "fresh", "k", "v")
    assert code == 6 and "committed" in err
    from napari_shardscope.core.versioned import open_repository

    with open_repository(path) as repo:
        assert [i.name for i in repo.instances()] == []
