"""One name and one order per concept at every door: errors in the door's words, the scale key, the labelmap
instance's place, ``--resolve``'s syntax, exit codes in ``--help``, the schemes that exist.

Command lines run as a user runs them (a subprocess) where the words a person reads are the point; the
in-process :func:`run` where only the parse or the exit code is.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from napari_shardscope.cli import GUI_VERB_MODULES
from napari_shardscope.core.bytestore.url import FORMAT_PREFIXES
from napari_shardscope.core.cli import run
from napari_shardscope.core.cli.common import parse_resolutions
from napari_shardscope.core.cli.parser import EXIT_CODES_LINE, build_parser
from napari_shardscope.core.errors import (
    EXIT_CODES,
    EXIT_MEANINGS,
    ArgumentError,
    RefusedDestinationError,
)
from napari_shardscope.core.export.precomputed import export_precomputed
from napari_shardscope.core.export.source import VolumeSource
from tests.cli_batch import run_commands
from tests.core.cli.test_every_verb import leaf_verbs
from tests.core.labelmap.test_labelmap import dumbbell
from tests.core.labelmap.volumes import write_precomputed


def shardscope(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "napari_shardscope", *argv], capture_output=True, text=True,
                          timeout=180, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def seg(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("vocab") / "seg"
    write_precomputed(path, dumbbell(), ((1, 1, 1), (1, 2, 2)), sharded=True)
    return path


@pytest.fixture
def repo(seg: Path, tmp_path: Path) -> str:
    path = str(tmp_path / "repo")
    assert run(["repo", "init", path]) == 0
    assert run(["labelmap", "create", path, "seg", str(seg), "--block", "8", "--quiet"]) == 0
    return path


def test_a_refusal_names_the_cli_option_on_the_cli_and_the_keyword_in_the_library(seg: Path, tmp_path: Path) -> None:
    """The four command lines run in order in one child (``tests/cli_batch.py``: each through the console
    script's ``main`` on real pipes; the words are the point here, not a fresh start-up); the library is
    asked afterwards, of the same destination (which exists before and after the overwrite alike)."""
    dest = tmp_path / "out"
    export = ["export", str(seg), str(dest)]
    first, again, json_again, overwritten = run_commands([[*export, "--quiet"], export, [*export, "--json"],
                                                          [*export, "--overwrite", "--quiet"]])
    assert first.returncode == 0, first.stderr
    assert again.returncode == 6 and "pass --overwrite to replace it" in again.stderr
    assert "overwrite=True" not in again.stderr
    assert "pass --overwrite" in json_again.stdout and "overwrite=True" not in json_again.stdout
    with pytest.raises(RefusedDestinationError, match=r"pass overwrite=True to replace it") as caught:
        export_precomputed(VolumeSource(str(seg)), str(dest))
    assert "--overwrite" not in str(caught.value)
    assert overwritten.returncode == 0, overwritten.stderr


def test_a_version_error_names_the_option_of_the_verb(repo: str, tmp_path: Path) -> None:
    """export's refusal of an open labelmap version used to say "(CLI: --allow-open)" to everyone."""
    out = shardscope("export", repo, str(tmp_path / "lm"), "--quiet")
    assert out.returncode == 2 and "pass --allow-open to export it as it is now" in out.stderr, out.stderr
    from napari_shardscope.core.export.source import labelmap_source

    with pytest.raises(ArgumentError, match="pass allow_open=True to export it"):
        labelmap_source(repo, "seg", "main")


def test_branching_from_an_open_head_names_the_committed_version_and_the_commands(repo: str) -> None:
    assert run(["repo", "commit", repo, "main", "-m", "base"]) == 0
    assert run(["repo", "branch", repo, "main"]) == 0  # main's head is open again
    refused = shardscope("repo", "branch", repo, "main", "alt")
    assert refused.returncode == 6, refused.stderr
    from napari_shardscope.core.versioned import open_repository

    with open_repository(repo) as r:
        head = r.version("main")
        parent = head.parents[0][:8]
    assert f"commit it first (shardscope repo commit {repo} {head.short} -m MESSAGE)" in refused.stderr
    suggested = f"shardscope repo branch {repo} {parent} alt"
    assert refused.stderr.rstrip().endswith(suggested)
    done = shardscope(*suggested.split()[1:])
    assert done.returncode == 0 and "on branch alt" in done.stdout


def test_exit_codes_are_in_every_help_from_the_one_map() -> None:
    assert {code for code, _, _ in EXIT_MEANINGS} == {0, 1, 9, 70} | {code for _, code in EXIT_CODES}
    top = shardscope("--help")
    assert top.returncode == 0
    for code, word, sentence in EXIT_MEANINGS:
        assert f"{code:>2}  {word}: {sentence}" in top.stdout
    parser = build_parser(GUI_VERB_MODULES)
    for name, sub in leaf_verbs(parser).items():
        assert " ".join(EXIT_CODES_LINE.split()) in " ".join(sub.format_help().split()), name


def test_the_top_level_lists_each_verb_once() -> None:
    listed = shardscope("--help").stdout
    names = [line.split()[0] for line in listed.split("COMMAND\n", 1)[1].split("\noptions:")[0].splitlines()
             if line.startswith("    ") and not line.startswith("          ")]
    assert len(names) == len(set(names)) == 30  # 36 before dropping old spellings; +4 annotation verbs
    assert not {"index", "merge", "cleave", "size", "history", "split-supervoxel", "split-body",
                "merge-branches"} & set(names)


def test_a_mistyped_scheme_lists_what_exists(seg: Path) -> None:
    out = shardscope("inspect", f"precomputd://{seg}")
    assert out.returncode == 2 and "did you mean precomputed://?" in out.stderr
    for prefix in (*FORMAT_PREFIXES, "file://", "gs://", "s3://", "http(s)://"):
        assert prefix in out.stderr


def test_scale_is_always_a_key(repo: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["label", repo, "main", "seg", "2", "7", "6", "--scale", "8_8_40", "--json"]) == 0
    assert '"scale": "8_8_40"' in capsys.readouterr().out
    assert run(["label", repo, "main", "seg", "2", "7", "6", "--scale", "1"]) == 2  # an index is not a key
    err = capsys.readouterr().err
    assert "--scale takes a scale key; '1' is not one of 4_4_40, 8_8_40" in err


def test_resolve_has_one_syntax_for_branch_merge_and_pull(repo: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_resolutions(["body:12=ours", "supervoxel:7=both", "annotation:5=theirs"]) == {
        "body:12": "ours", "supervoxel:7": "both", "annotation:5": "theirs"}
    for bad in ("body:12", "body:x=ours", "bodies:1=ours", "body:1=mine"):
        with pytest.raises(ArgumentError, match="KIND:ID=SIDE"):
            parse_resolutions([bad])
    assert run(["remote", "add", repo, "origin", repo + "-remote"]) == 0
    capsys.readouterr()
    for verb in (["branch", "merge", repo, "main", "main", "seg"], ["pull", repo]):
        assert run([*verb, "--resolve", "body:1=mine"]) == 2
        assert "--resolve takes KIND:ID=SIDE with KIND body, supervoxel or annotation and SIDE ours|theirs|both" in \
            capsys.readouterr().err
    help_text = " ".join(build_parser()._subparsers._group_actions[0].choices["pull"].format_help().split())  # type: ignore[union-attr]
    assert "--resolve KIND:ID=SIDE" in help_text


def test_the_labelmap_comes_after_the_version(repo: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["labelmap", "info", repo, "main", "seg", "--json"]) == 0
    new, err = capsys.readouterr()
    assert err == ""
    assert run(["labelmap", "info", repo, "seg", "main", "--json"]) == 0  # the old order still works …
    old, err = capsys.readouterr()
    assert old == new and "deprecated order, use 'shardscope labelmap info REPO main seg'" in err  # … and says so
    assert run(["labelmap", "info", repo, "seg", "--json"]) == 0  # no version: configuration only
    assert '"version"' not in capsys.readouterr().out
    assert run(["labelmap", "index", repo, "seg", "--force", "--quiet"]) == 0  # the old name of --overwrite
    assert "--force is deprecated, use --overwrite" in capsys.readouterr().err
    assert run(["export", repo, repo + "-out", "--labelmap", "nope"]) == 3  # --labelmap, as for every verb


def test_every_labelmap_option_is_spelt_alike() -> None:
    """Where the labelmap is optional it is ``--labelmap``; where required, the positional LABELMAP after REF."""
    parser = build_parser(GUI_VERB_MODULES)
    for name, sub in leaf_verbs(parser).items():
        help_text = sub.format_help()
        options = {s for a in sub._actions for s in a.option_strings if a.help is not argparse.SUPPRESS}
        assert not {"--instance", "--name"} & options, name
        usage = sub.format_usage()
        if "LABELMAP" in usage and "--labelmap" not in usage:
            words = usage.split()
            assert words.index("LABELMAP") > words.index("REPO"), name
            if "REF" in words:
                assert words.index("LABELMAP") > words.index("REF"), name
        assert "overwrite=True" not in help_text
