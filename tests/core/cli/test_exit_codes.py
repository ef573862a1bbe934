"""Each error group's exit code, from a real command line, through the one map in ``core/errors.py``.

Every case checks the code, that stderr is one ``shardscope VERB: ...`` line, and, for ``--json``,
that stdout holds ``{"error": {"group", "message", "key", "offset"}}``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import napari_shardscope
from napari_shardscope.cli import main as console_main
from napari_shardscope.core.cli import run
from napari_shardscope.core.errors import EXIT_CODES, ArgumentError, exit_code_for
from tests.core.labelmap.test_labelmap import dumbbell
from tests.core.labelmap.volumes import write_precomputed
from tests.precomputed_data import SHARDING_MURMUR_GZIP, write_ts_volume


def shardscope(capsys: pytest.CaptureFixture[str], *argv: str, extra: tuple[str, ...] = ()) -> tuple[int, str, str]:
    code = run(list(argv), extra_modules=extra)
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str, verb: str) -> str:
    """The one stderr line of a failed verb (asserting there is exactly one)."""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"shardscope {verb}: "), err
    return lines[0]


def json_error(out: str) -> dict[str, object]:
    doc = json.loads(out)
    assert isinstance(doc, dict) and set(doc["error"]) == {"group", "message", "key", "offset"}, doc
    error: dict[str, object] = doc["error"]
    return error


@pytest.fixture(scope="module")
def volume(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("exit") / "vol"
    write_ts_volume(path, SHARDING_MURMUR_GZIP, scales=1)
    return path


def test_the_map_is_the_documented_table() -> None:
    assert sorted(code for _, code in EXIT_CODES) == [2, 3, 4, 5, 6, 7, 8]
    assert EXIT_CODES[-1] == (ArgumentError, 2)  # the catch-all group is tried last
    assert exit_code_for(ZeroDivisionError()) == 70


def test_validate_with_problems_exits_1(volume: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "vol"
    broken.mkdir()
    for f in volume.rglob("*"):
        if f.is_file():
            (broken / f.relative_to(volume)).parent.mkdir(parents=True, exist_ok=True)
            (broken / f.relative_to(volume)).write_bytes(f.read_bytes())
    assert shardscope(capsys, "validate", str(broken), "--quiet")[0] == 0
    shard = next(broken.rglob("*.shard"))
    shard.write_bytes(shard.read_bytes()[:20])
    code, out, err = shardscope(capsys, "validate", str(broken), "--quiet")
    assert code == 1 and "shard index truncated" in out and err == ""
    code, out, _ = shardscope(capsys, "validate", str(broken), "--quiet", "--json")
    assert code == 1 and json.loads(out)["ok"] is False


def test_a_bad_option_exits_2(volume: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = shardscope(capsys, "inspect", str(volume), "--bogus")
    assert code == 2 and out == ""
    assert err.startswith("usage: shardscope inspect")  # argparse's usage, then its one error line
    assert err.splitlines()[-1] == "shardscope inspect: error: unrecognized arguments: --bogus"
    code, out, _ = shardscope(capsys, "locate", str(volume), "--voxel", "a,b", "--json")
    assert code == 2 and json_error(out)["group"] == "argument"


def test_a_bad_argument_value_exits_2(volume: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = shardscope(capsys, "locate", str(volume), "--voxel", "1,2", "--json")
    assert code == 2 and "voxel" in one_line(err, "locate")
    assert json_error(out)["group"] == "argument"


def test_a_missing_path_exits_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = shardscope(capsys, "inspect", str(tmp_path / "nothing"), "--json")
    assert code == 3 and "not a precomputed, zarr v3, N5 or zarr v2 dataset" in one_line(err, "inspect")
    error = json_error(out)
    assert error["group"] == "not_found" and "nothing" in str(error["message"])
    code, _, err = shardscope(capsys, "repo", "log", str(tmp_path / "nothing"))
    assert code == 3 and "no such repository" in one_line(err, "repo log")


def test_a_corrupt_info_exits_4_naming_the_key_and_offset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "info").write_bytes(b'{"type": "image", "scales": [}')
    code, out, err = shardscope(capsys, "inspect", str(tmp_path), "--json")
    assert code == 4 and one_line(err, "inspect").endswith("info: invalid JSON (Expecting value) at byte 29")
    error = json_error(out)
    assert error["group"] == "corrupt" and str(error["key"]).endswith("info") and error["offset"] == 29


def test_a_write_to_a_committed_version_exits_6(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = str(tmp_path / "repo")
    assert shardscope(capsys, "repo", "init", repo)[0] == 0
    assert shardscope(capsys, "kv", "put", repo, "main", "notes", "k", "v")[0] == 0
    assert shardscope(capsys, "repo", "commit", repo, "main", "-m", "done")[0] == 0
    code, out, err = shardscope(capsys, "kv", "put", repo, "main", "notes", "k", "v2", "--json")
    assert code == 6 and "committed" in one_line(err, "kv put")
    assert json_error(out)["group"] == "refused_write"


def test_an_unresolved_branch_merge_conflict_exits_7_and_lists_it(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    base = tmp_path / "seg"
    write_precomputed(base, dumbbell(), ((1, 1, 1),))
    repo = str(tmp_path / "repo")
    for argv in (("repo", "init", repo), ("labelmap", "create", repo, "seg", str(base), "--block", "8"),
                 ("repo", "commit", repo, "main", "-m", "base"), ("repo", "branch", repo, "main", "alt"),
                 ("repo", "branch", repo, "main"),
                 ("body", "merge", repo, "main", "seg", "10", "30"), ("body", "merge", repo, "alt", "seg", "10", "40"),
                 ("repo", "commit", repo, "main", "-m", "ours"), ("repo", "commit", repo, "alt", "-m", "theirs")):
        assert shardscope(capsys, *argv)[0] == 0, argv
    code, out, err = shardscope(capsys, "branch", "merge", repo, "main", "alt", "seg")
    assert code == 7 and "edited on both sides" in one_line(err, "branch merge")
    assert "unresolved body:10: mine: merge of 30 into 10; theirs: merge of 40 into 10" in out
    code, out, err = shardscope(capsys, "branch", "merge", repo, "main", "alt", "seg", "--json")
    assert code == 7 and one_line(err, "branch merge")
    doc = json.loads(out)
    assert doc["error"]["group"] == "conflict" and [c["key"] for c in doc["conflicts"]] == ["body:10"]
    code, _, err = shardscope(capsys, "merge-branches", repo, "main", "alt", "seg", "--dry-run")  # the old spelling
    assert code == 7 and err.splitlines()[0] == ("shardscope merge-branches: deprecated spelling, use 'shardscope "
                                                 "branch merge' (same arguments)")
    assert shardscope(capsys, "branch", "merge", repo, "main", "alt", "seg", "--resolve", "body:10=both")[0] == 0


def test_a_store_that_fails_exits_8(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a path the filesystem refuses (ENAMETOOLONG): the storage failed, the data is not known to be damaged
    code, out, err = shardscope(capsys, "inspect", str(tmp_path / ("x" * 300)), "--json")
    assert code == 8 and "File name too long" in one_line(err, "inspect")
    assert json_error(out)["group"] == "store"


def test_a_link_loop_where_the_metadata_should_be_is_damage_exits_4(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    # the entry is there and leads nowhere: the dataset is broken at that key (a dangling link, issue 27)
    (tmp_path / "info").symlink_to("info")
    code, out, err = shardscope(capsys, "inspect", str(tmp_path), "--json")
    assert code == 4 and "symbolic link loop" in one_line(err, "inspect")
    assert json_error(out)["group"] == "corrupt" and json_error(out)["key"] == "info"


def test_a_bug_exits_70_with_one_line(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    extra = ("tests.core.cli.broken_verbs",)
    monkeypatch.delenv("SHARDSCOPE_DEBUG", raising=False)
    code, out, err = shardscope(capsys, "divide-by-zero", "7", extra=extra)
    assert code == 70 and out == ""
    assert one_line(err, "divide-by-zero") == ("shardscope divide-by-zero: internal error: ZeroDivisionError: "
                                               "division by zero (run with SHARDSCOPE_DEBUG=1 for the traceback)")
    code, out, _ = shardscope(capsys, "divide-by-zero", "7", "--json", extra=extra)
    assert code == 70 and json_error(out) == {"group": "internal", "message": "division by zero", "key": None,
                                              "offset": None}
    monkeypatch.setenv("SHARDSCOPE_DEBUG", "1")
    code, _, err = shardscope(capsys, "divide-by-zero", "7", extra=extra)
    assert code == 70 and err.startswith("Traceback") and "in cmd_divide" in err
    assert err.splitlines()[-1] == "shardscope divide-by-zero: internal error: ZeroDivisionError: division by zero"


def test_version() -> None:
    proc = subprocess.run([sys.executable, "-m", "napari_shardscope", "--version"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout == f"shardscope {napari_shardscope.__version__}\n"


def _commands(help_text: str) -> list[str]:
    """The subcommand names argparse lists under COMMAND or ACTION in a help text."""
    names = []
    listing = False
    for line in help_text.splitlines():
        if line.strip() in ("COMMAND", "ACTION"):
            listing = True
        elif listing and (m := re.match(r"^    (\S+)", line)):
            names.append(m.group(1))
        elif listing and not line.startswith(" " * 5):
            listing = False
    return names


def test_every_verb_takes_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert console_main(["--help"]) == 0
    top = _commands(capsys.readouterr().out)
    assert {"inspect", "repo", "kv", "labelmap", "export", "open", "demo"} <= set(top)
    # one name per verb: old spellings and a group's verbs at the top level run, but are not listed
    hidden = {"index", "merge", "split-body", "merge-branches", "cleave", "size", "history", "split-supervoxel"}
    assert not hidden & set(top)
    for name in hidden:
        assert console_main([name, "--help"]) == 0 and "--json" in capsys.readouterr().out
    verbs: list[list[str]] = []
    for name in top:
        assert console_main([name, "--help"]) == 0
        text = capsys.readouterr().out
        actions = _commands(text)
        verbs.extend([[name, a] for a in actions] if actions else [[name]])
    assert ["repo", "init"] in verbs and ["kv", "get"] in verbs and ["labelmap", "index"] in verbs
    for verb in verbs:
        assert console_main([*verb, "--help"]) == 0
        text = capsys.readouterr().out
        if verb in (["open"], ["demo"]):  # they open a window: nothing to print as JSON
            assert "--json" not in text
        else:
            assert "--json" in text, verb


def test_an_unsupported_feature_exits_5(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = {"zarr_format": 3, "node_type": "array", "shape": [4, 4, 4], "data_type": "float128",
           "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4, 4, 4]}},
           "chunk_key_encoding": {"name": "default"}, "fill_value": 0, "codecs": [{"name": "bytes"}]}
    (tmp_path / "zarr.json").write_text(json.dumps(doc))
    code, out, err = shardscope(capsys, "inspect", str(tmp_path), "--json")
    assert code == 5 and "float128" in one_line(err, "inspect") and "is not supported" in err
    assert json_error(out)["group"] == "unsupported"


def test_an_error_in_no_group_exits_9(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = shardscope(capsys, "groupless", "--json", extra=("tests.core.cli.broken_verbs",))
    assert code == 9 and one_line(err, "groupless") == "shardscope groupless: an error of ours in no group"
    assert json_error(out)["group"] == "other"


def test_repo_verify_with_problems_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The README's row 1 for ``repo verify``: a consistent store exits 0, one with a stray key 1 (not an error)."""
    import sqlite3

    repo = str(tmp_path / "repo")
    assert shardscope(capsys, "repo", "init", repo, "--engine", "sqlite")[0] == 0
    assert shardscope(capsys, "kv", "put", repo, "main", "notes", "k", "v")[0] == 0
    assert shardscope(capsys, "repo", "verify", repo)[0] == 0
    with sqlite3.connect(tmp_path / "repo" / "store.sqlite") as db:  # a data key no version owns
        db.execute("INSERT INTO kv VALUES (?, ?)", (b"\xff" * 3 + b"stray", b"x"))
    code, out, err = shardscope(capsys, "repo", "verify", repo)
    assert code == 1 and err == "" and "problem" in out
