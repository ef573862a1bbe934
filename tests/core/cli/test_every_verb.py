"""Every verb of the ``shardscope`` parser, run the way a user runs it, in the three ways output is read.

The verbs are enumerated from the parser itself (:func:`leaf_verbs`), so a verb added to any module's
``VERBS`` fails :func:`test_every_verb_has_a_case` until it is given a case here. Each case is a
minimal real command line on a small world (a sharded precomputed segmentation, a repository with a
labelmap over it, two branches, a keyvalue instance and a directory remote), run as a subprocess
(``python -m napari_shardscope``) *without* ``--quiet``:

* ``pipe``: stdout and stderr are pipes (a script, CI, ``| less``);
* ``json``: with ``--json``, stdout a pipe read line by line while the verb runs; the document (or
  JSON Lines) must parse;
* ``terminal``: stdout and stderr are a pseudo-terminal (``isatty()`` is true), so the progress
  reporters draw their rewritten lines as they do for a person at a shell.

Every run must exit with its documented code (0 here) and never print ``internal error`` (an
exception that is not ours: a bug, like ``export-meshes`` calling its progress reporter with the
wrong arguments, which only ``--quiet`` used to hide).
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from napari_shardscope.cli import GUI_VERB_MODULES
from napari_shardscope.core.cli import run
from napari_shardscope.core.cli.parser import build_parser
from tests.cli_batch import SCRIPT as BATCH
from tests.cli_batch import split_cases
from tests.core.labelmap.test_labelmap import dumbbell
from tests.core.labelmap.volumes import write_precomputed
from tests.volume_cases import sample  # noqa: F401  (fixture: the demo's cached sample)

#: Seconds a verb may take before the test gives up on it (a bound on the loop, not a timing assertion).
TIMEOUT = 180
MODES = ("pipe", "json", "terminal")


# -- the verbs of the parser ----------------------------------------------------------------------------
def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The subcommands a parser accepts (hidden ones too), by name."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def leaf_verbs(parser: argparse.ArgumentParser, prefix: str = "") -> dict[str, argparse.ArgumentParser]:
    """Every runnable command line prefix (``"inspect"``, ``"repo commit"``) and its parser."""
    out: dict[str, argparse.ArgumentParser] = {}
    for name, sub in subcommands(parser).items():
        full = f"{prefix}{name}"
        if subcommands(sub):
            out.update(leaf_verbs(sub, full + " "))
        else:
            out[full] = sub
    return out


def takes_json(sub: argparse.ArgumentParser) -> bool:
    return any("--json" in a.option_strings for a in sub._actions)


PARSER = build_parser(GUI_VERB_MODULES)
VERBS = leaf_verbs(PARSER)


# -- the world the verbs run on -------------------------------------------------------------------------
@dataclass(frozen=True)
class World:
    root: Path

    @property
    def values(self) -> dict[str, str]:
        r = self.root
        return {"repo": str(r / "repo"), "seg": str(r / "seg"), "remote": str(r / "remote"),
                "out": str(r / "out"), "seeds": str(r / "seeds.json"), "voxels": str(r / "voxels.json"),
                "synapses": str(r / "synapses.csv")}

    def fill(self, argv: tuple[str, ...]) -> list[str]:
        return [a.format(**self.values) for a in argv]


def sh(*argv: str) -> None:
    """Set-up steps run in this process (the command line, without a subprocess)."""
    code = run(list(argv))
    assert code == 0, argv


def build_world(root: Path) -> None:
    """main: base edit committed, then an open version holding a keyvalue entry; alt: one more edit, committed;
    both branches pushed to a directory remote."""
    write_precomputed(root / "seg", dumbbell(), ((1, 1, 1), (1, 2, 2)), sharded=True)
    repo, seg = str(root / "repo"), str(root / "seg")
    sh("repo", "init", repo)
    sh("labelmap", "create", repo, "seg", seg, "--block", "8", "--quiet")
    sh("body", "merge", repo, "main", "seg", "10", "30")
    add_synapses(Path(repo))
    sh("repo", "commit", repo, "main", "-m", "base")
    sh("repo", "branch", repo, "main", "alt")
    sh("body", "merge", repo, "alt", "seg", "5", "40")
    sh("repo", "commit", repo, "alt", "-m", "alt work")
    sh("repo", "branch", repo, "main")
    sh("kv", "put", repo, "main", "notes", "greeting", "hello")
    sh("remote", "add", repo, "origin", str(root / "remote"))
    sh("push", repo, "origin", "main")
    sh("push", repo, "origin", "alt")
    (root / "seeds.json").write_text(json.dumps({"1": [[4, 8, 5]], "2": [[4, 8, 25]]}))
    (root / "voxels.json").write_text(json.dumps([[2, 13, 2], [2, 13, 3]]))
    (root / "synapses.csv").write_text("x_pre,y_pre,z_pre,x_post,y_post,z_post,confidence_pre\n"
                                       "5,14,4,25,8,4,0.9\n2,13,2,3,13,2,0.5\n")


def add_synapses(repo_path: Path) -> None:
    """An annotation instance with two synapses (no CLI verb creates one yet: the library does)."""
    from napari_shardscope.core.annotation import add_many, create_annotation_instance
    from napari_shardscope.core.versioned import open_repository

    with open_repository(repo_path) as repo:
        v = create_annotation_instance(repo, "synapses", labelmap="seg").at("main")
        add_many(v, ["pre", "post", "pre", "post"], [[4, 14, 5], [4, 8, 25], [4, 8, 25], [4, 14, 5]],
                   synapses=[(0, 1), (2, 3)])


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("verbs") / "world"
    root.mkdir()
    build_world(root)
    return root


@pytest.fixture
def world(template: Path, tmp_path: Path) -> World:
    return prepared_world(template, tmp_path / "world", Case(()))


# -- the cases ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """A verb's minimal command line (after the verb's words), set-up steps, and what it must print."""

    argv: tuple[str, ...]
    prepare: tuple[tuple[str, ...], ...] = ()
    #: A line on stderr every run prints (a deprecated spelling names its replacement).
    stderr_has: str | None = None
    env: dict[str, str] = field(default_factory=dict)


COMMIT_MAIN = ("repo", "commit", "{repo}", "main", "-m", "main work")
EDIT_MAIN = ("body", "merge", "{repo}", "main", "seg", "10", "40")
AT = ("{repo}", "main", "seg")

CASES: dict[str, Case] = {
    "inspect": Case(("{seg}",)),
    "locate": Case(("{seg}", "--voxel", "4,14,5")),
    "ls": Case(("{seg}",)),
    "validate": Case(("{seg}",)),
    "repo init": Case(("{out}/new",)),
    "repo log": Case(("{repo}", "--limit", "5")),
    "repo branches": Case(("{repo}",)),
    "repo commit": Case(("{repo}", "main", "-m", "done")),
    "repo branch": Case(("{repo}", "alt", "alt2")),
    "repo checkout": Case(("{repo}", "main")),
    "repo merge": Case(("{repo}", "main", "alt"), prepare=(COMMIT_MAIN,)),
    "repo note": Case(("{repo}", "main", "looks good")),
    "repo verify": Case(("{repo}",)),
    "repo migrate": Case(("{repo}",)),
    "kv get": Case(("{repo}", "main", "notes", "greeting")),
    "kv put": Case(("{repo}", "main", "notes", "other", "value")),
    "kv delete": Case(("{repo}", "main", "notes", "greeting")),
    "kv ls": Case(("{repo}", "main", "notes")),
    "export-meshes": Case(("{repo}", "{out}/meshes")),
    "export": Case(("{seg}", "{out}/export")),
    "labelmap create": Case(("{repo}", "seg2", "{seg}", "--block", "8")),
    "labelmap info": Case(AT),
    "labelmap index": Case(("{repo}", "seg", "--overwrite")),
    "annotation import": Case(("{repo}", "syn", "{synapses}", "--labelmap", "seg")),
    "body merge": Case((*AT, "10", "40")),
    "body split": Case((*AT, "10", "{seeds}")),
    "body cleave": Case((*AT, "10", "30")),
    "body split-supervoxel": Case((*AT, "30", "{voxels}")),
    "body size": Case((*AT, "10")),
    "body history": Case((*AT, "10")),
    "branch merge": Case(("{repo}", "main", "alt", "seg"), prepare=(COMMIT_MAIN,)),
    "label": Case((*AT, "4", "14", "5")),
    "undo": Case(AT, prepare=(EDIT_MAIN,)),
    "redo": Case(AT, prepare=(EDIT_MAIN, ("undo", *AT))),
    "diff": Case(("{repo}", "main", "alt", "seg")),
    "synapses": Case(("{repo}", "main", "10")),
    "connections": Case(("{repo}", "main", "10", "--csv")),
    # main cleaves the body its two synapses join (alt keeps it whole): a difference to list
    "connectome": Case(("{repo}", "main", "--against", "alt"), prepare=(("body", "cleave", *AT, "10", "30"),)),
    "serve": Case(("{seg}", "--print-url")),
    "remote add": Case(("{repo}", "backup", "{out}/backup")),
    "remote list": Case(("{repo}",)),
    "remote remove": Case(("{repo}", "origin")),
    "remote check": Case(("{remote}",)),
    "clone": Case(("{remote}", "{out}/clone")),
    "fetch": Case(("{repo}",)),
    "push": Case(("{repo}", "origin", "alt")),
    "pull": Case(("{repo}", "origin", "main")),
    "status": Case(("{repo}",)),
    "review": Case(("{repo}", "alt"), prepare=(COMMIT_MAIN,)),
    "ids": Case(("{repo}",)),
    "open": Case(("{seg}", "--screenshot", "{out}/open.png")),
    "demo": Case(("--screenshot", "{out}/demo.png")),
    # old spellings: hidden from --help, still working, each run says what to type instead
    "index": Case(("{repo}", "seg", "--overwrite"), stderr_has="use 'shardscope labelmap index'"),
    "cleave": Case((*AT, "10", "30"), stderr_has="use 'shardscope body cleave'"),
    "split-supervoxel": Case((*AT, "30", "{voxels}"), stderr_has="use 'shardscope body split-supervoxel'"),
    "size": Case((*AT, "10"), stderr_has="use 'shardscope body size'"),
    "history": Case((*AT, "10"), stderr_has="use 'shardscope body history'"),
    "merge": Case((*AT, "10", "40"), stderr_has="use 'shardscope body merge'"),
    "split-body": Case((*AT, "10", "{seeds}"), stderr_has="use 'shardscope body split'"),
    "merge-branches": Case(("{repo}", "main", "alt", "seg"), prepare=(COMMIT_MAIN,),
                           stderr_has="use 'shardscope branch merge'"),
}


def test_every_verb_has_a_case() -> None:
    """A verb added to the parser needs a case here (and so runs in every mode below)."""
    assert sorted(VERBS) == sorted(CASES)


#: Verbs that start napari (a window, Qt): a batch of their own (one process per mode for all of them, so napari
#: and Qt are imported once and never reach the other verbs' batch).
GUI_VERBS = ("open", "demo")


#: Runs another test makes already, with the same output streams and checks (and more): not started twice.
#: ``shardscope demo --screenshot`` piped is tests/core/test_sample_data.py::test_demo_screenshot, ``shardscope
#: open DATASETS --screenshot`` piped is tests/napari_plugin/test_reader.py::test_cli_open_screenshot (an OME-Zarr
#: and an N5 dataset; the sharded precomputed one is opened here on a terminal); both also check what the
#: screenshot shows. Each napari start costs about five seconds of CPU.
RUN_ELSEWHERE = {("demo", "pipe"), ("open", "pipe")}


def runs() -> Iterator[tuple[str, str]]:
    for verb in sorted(VERBS):
        for mode in MODES:
            if mode == "json" and not takes_json(VERBS[verb]):
                continue  # documented: the GUI verbs print nothing to parse
            if (verb, mode) in RUN_ELSEWHERE:
                continue
            yield verb, mode


# -- the three ways of running a verb -------------------------------------------------------------------
@dataclass(frozen=True)
class Outcome:
    code: int
    stdout: str
    stderr: str

    def shown(self) -> str:
        return f"exit {self.code}\nstdout:\n{self.stdout}\nstderr:\n{self.stderr}"


def command(verb: str, argv: list[str]) -> list[str]:
    return [sys.executable, "-m", "napari_shardscope", *verb.split(), *argv]


def run_piped(cmd: list[str], cwd: Path, env: dict[str, str]) -> Outcome:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT,
                          stdin=subprocess.DEVNULL)
    return Outcome(done.returncode, done.stdout, done.stderr)


def run_streamed(cmd: list[str], cwd: Path, env: dict[str, str]) -> Outcome:
    """stdout read line by line while the command runs (stderr drained by a thread so neither pipe fills)."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)
    assert proc.stdout is not None and proc.stderr is not None
    stderr = proc.stderr
    err: list[str] = []
    drain = threading.Thread(target=lambda: err.append(stderr.read()), daemon=True)
    drain.start()
    lines = list(proc.stdout)  # each line as it arrives; ends when the command closes stdout
    code = proc.wait(timeout=TIMEOUT)
    drain.join(timeout=TIMEOUT)
    return Outcome(code, "".join(lines), "".join(err))


def run_in_terminal(cmd: list[str], cwd: Path, env: dict[str, str], timeout: int = TIMEOUT) -> Outcome:
    """stdout and stderr on one pseudo-terminal, as in an interactive shell."""
    master, slave = os.openpty()
    try:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
    finally:
        os.close(slave)
    chunks: list[bytes] = []
    try:
        for _ in range(timeout * 10):  # bounded: at most `timeout` seconds of 0.1 s waits without output
            ready, _, _ = select.select([master], [], [], 0.1)
            if not ready:
                continue
            try:
                data = os.read(master, 1 << 16)
            except OSError:  # EIO: every writer of the terminal has gone
                data = b""
            if not data:
                break
            chunks.append(data)
        else:
            proc.kill()
            raise AssertionError(f"{cmd} still running after {timeout} s")
    finally:
        os.close(master)
    code = proc.wait(timeout=timeout)
    text = b"".join(chunks).decode("utf-8", "replace")
    return Outcome(code, text, text)


def verb_env(case: Case) -> dict[str, str]:
    return {**os.environ, "SHARDSCOPE_USER": "tester", "COLUMNS": "100", **case.env}


def prepared_world(template: Path, root: Path, case: Case) -> World:
    """A fresh copy of the world for one case (a verb may change it), its set-up steps run; the repository's
    remote points at the copy's."""
    shutil.copytree(template, root)
    remotes = root / "repo" / "remotes.json"
    remotes.write_text(remotes.read_text().replace(str(template), str(root)))
    (root / "out").mkdir()
    world = World(root)
    for step in case.prepare:
        sh(*world.fill(step))
    return world


def run_batch(mode: str, template: Path, where: Path, *, gui: bool = False,
              env_extra: dict[str, str] | None = None) -> dict[str, Outcome]:
    """Every non-GUI verb (``gui``: every GUI verb) of ``mode`` in one process (``tests/cli_batch.py``), its
    output cut into one piece per verb.

    Each verb runs through the console script's ``main`` exactly as ``shardscope VERB ...`` would, on
    stdout/stderr that are pipes or a terminal; only Python's start-up (for the GUI verbs: napari's import
    and Qt's application) is shared.
    """
    verbs = [v for v, m in runs() if m == mode and (v in GUI_VERBS) == gui]
    cases = []
    for i, verb in enumerate(verbs):
        world = prepared_world(template, where / f"{i:02d}", CASES[verb])
        argv = [*verb.split(), *world.fill(CASES[verb].argv), *(["--json"] if mode == "json" else [])]
        cases.append({"argv": argv, "cwd": str(world.root)})
    results = where / "results.json"
    spec = where / "spec.json"
    spec.write_text(json.dumps({"cases": cases, "results": str(results), "merged": mode == "terminal"}))
    env = {**verb_env(Case(())), **(env_extra or {})}
    cmd = [sys.executable, str(BATCH), str(spec)]
    runner = {"pipe": run_piped, "json": run_streamed, "terminal": run_in_terminal}[mode]
    whole = runner(cmd, where, env)
    assert whole.code == 0, whole.shown()
    codes = json.loads(results.read_text())
    assert len(codes) == len(verbs), whole.shown()
    outs = split_cases(whole.stdout, len(verbs))
    errs = outs if mode == "terminal" else split_cases(whole.stderr, len(verbs))
    return {v: Outcome(codes[i], outs[i], errs[i]) for i, v in enumerate(verbs)}


@pytest.fixture(scope="module")
def batches(template: Path, tmp_path_factory: pytest.TempPathFactory,
            request: pytest.FixtureRequest) -> Callable[[str, bool], dict[str, Outcome]]:
    """``get(mode, gui)``: the outcomes of the batch of ``mode`` (of the GUI verbs when ``gui``), run once."""
    done: dict[tuple[str, bool], dict[str, Outcome]] = {}

    def get(mode: str, gui: bool) -> dict[str, Outcome]:
        if (mode, gui) not in done:
            env_extra = {}
            if gui:  # demo opens the cached sample
                env_extra["SHARDSCOPE_CACHE_DIR"] = str(request.getfixturevalue("sample").root.parent)
            where = tmp_path_factory.mktemp(f"batch-{mode}{'-gui' if gui else ''}")
            done[mode, gui] = run_batch(mode, template, where, gui=gui, env_extra=env_extra)
        return done[mode, gui]

    return get


def parse_json_output(text: str) -> list[object]:
    """One JSON document, or JSON Lines (``ls --json``): the parsed values, at least one."""
    try:
        return [json.loads(text)]
    except json.JSONDecodeError:
        values = [json.loads(line) for line in text.splitlines() if line.strip()]
        assert values, "no JSON on stdout"
        return values


@pytest.mark.parametrize(("verb", "mode"), list(runs()), ids=lambda v: v.replace(" ", "-"))
def test_verb(verb: str, mode: str, batches: Callable[[str, bool], dict[str, Outcome]]) -> None:
    case = CASES[verb]
    out = batches(mode, verb in GUI_VERBS)[verb]
    assert "internal error" not in out.stderr and "Traceback" not in out.stderr, out.shown()
    assert out.code == 0, out.shown()
    if mode == "json":
        parse_json_output(out.stdout)
    if case.stderr_has is not None:
        assert case.stderr_has in out.stderr, out.shown()


def test_a_terminal_gets_progress_lines(world: World) -> None:
    """On a terminal a long verb redraws one progress line (carriage returns), in a pipe it writes plain lines."""
    env = {**os.environ, "COLUMNS": "100"}
    argv = command("export-meshes", world.fill(("{repo}", "{out}/meshes")))
    out = run_in_terminal(argv, world.root, env)
    assert out.code == 0, out.stdout
    assert "\rexport-meshes: 1/1" in out.stdout
    piped = run_piped(command("validate", [world.values["seg"]]), world.root, env)
    assert piped.code == 0 and "\r" not in piped.stderr and "validate: " in piped.stderr
