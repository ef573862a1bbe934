"""Shared fixtures: a range-capable HTTP server on loopback; the hypothesis profile; the Qt binding of this
environment for qtpy and pytest-qt alike; ``slow`` tests only on request (``-m slow``); the run spread over
every core (pytest-xdist) unless told otherwise."""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import signal
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path


def keep_bytecode() -> None:
    """Compile each module once per checkout, not once per process, even under ``PYTHONDONTWRITEBYTECODE``.

    A harness that exports ``PYTHONDONTWRITEBYTECODE=1`` (this machine's does) makes every Python process
    compile every module it imports from source: each xdist worker compiled and assertion-rewrote every test
    module at collection, and every ``shardscope`` child process compiled our modules again. The run writes
    bytecode where Python writes it by default (``__pycache__`` beside each source, ignored by git), and the
    workers and children inherit that. The environment's own modules (numpy, napari, TensorStore) were
    compiled when ``scripts/install.sh`` installed them (``uv pip install --compile-bytecode``, as ``pip``
    does by default), so no process compiles them: an earlier version kept the run's bytecode under a
    ``PYTHONPYCACHEPREFIX``, which hides an environment's bytecode, and a fresh clone's first run then compiled
    napari's and numpy's modules in both workers at once (10 CPU s each at collection). A
    ``PYTHONPYCACHEPREFIX`` the caller set is kept.
    """
    if not (os.environ.get("PYTHONDONTWRITEBYTECODE") or sys.dont_write_bytecode):
        return
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False


keep_bytecode()
from tests.scratch import remove_at_exit, use_run_scratch  # noqa: E402  (after keep_bytecode)

#: This run's ``TMPDIR`` (``tests/scratch.py``): set before pytest makes its first directory, removed at exit.
RUN_SCRATCH = use_run_scratch()
remove_at_exit(RUN_SCRATCH)

import pytest  # noqa: E402  (after keep_bytecode: the imports below are cached too)
from hypothesis import settings  # noqa: E402

from tests.http_range_server import RangeServer  # noqa: E402
from tests.realdata import REALDATA, have_realdata, missing  # noqa: E402

#: The bindings qtpy and pytest-qt both know, in qtpy's order of preference.
QT_BINDINGS = {"pyqt5": "PyQt5", "pyqt6": "PyQt6", "pyside6": "PySide6"}


def qt_binding() -> str | None:
    """The Qt binding the tests use: ``QT_API`` when set, else the one installed (PyQt5 first, as qtpy picks).

    Nothing in the configuration names a binding: ``.venv`` has PyQt6 and ``.venv-pyqt5`` PyQt5, and each
    test run follows its environment.
    """
    chosen = os.environ.get("QT_API", "").lower()
    if chosen:
        return chosen
    return next((api for api, module in QT_BINDINGS.items() if importlib.util.find_spec(module)), None)


# Decided before anything imports Qt (this conftest loads before pytest-qt configures itself), and put in the
# environment so that qtpy, pytest-qt and every child process (the screenshot script, the notebook kernel,
# `shardscope demo`) load the same binding.
_BINDING = qt_binding()
if _BINDING is not None:
    os.environ.setdefault("QT_API", _BINDING)
    os.environ.setdefault("PYTEST_QT_API", _BINDING)
    if os.environ["PYTEST_QT_API"].lower() != os.environ["QT_API"].lower():
        raise pytest.UsageError(f"PYTEST_QT_API={os.environ['PYTEST_QT_API']} and QT_API={os.environ['QT_API']} "
                                "name different Qt bindings: pytest-qt and qtpy must load the same one")

# Ctrl-C reaches the command lines the tests start. A shell starts a background job (`bash .ci/run &`,
# `nohup …`) with SIGINT ignored, and a process that starts with SIGINT ignored passes that on to its
# children and gets no KeyboardInterrupt: the tests that stop `shardscope serve` with SIGINT, as a user's
# Ctrl-C does, then waited for it in vain. The test run restores the default, so what a child does with
# Ctrl-C is its own code's doing, however the run was started.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Hypothesis profiles. No per-example deadline in any: the machine is shared and noisy, and tests never assert
# on timing. "ci" (the default) bounds the examples of every test that does not set its own count; "long"
# (`pytest --hypothesis-profile long`, with the slow tests: `-m "slow or not slow"`) searches twenty times deeper.
# A test that sets max_examples keeps its count in both (its author sized it).
settings.register_profile("ci", deadline=None, print_blob=True, max_examples=50)
settings.register_profile("long", deadline=None, print_blob=True, max_examples=1000)
settings.load_profile("ci")


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """``pytest`` (the README's test command) runs on every core: pytest-xdist with one worker more than
    the cores, ``--dist loadfile``.

    One more worker than cores: about a fifth of the test time waits (on loopback servers that model a
    bucket's round trip, on browsers and child processes, on watchdogs that must see a stall), and a third
    worker on two cores runs tests in those waits (measured on this 2-core machine: 350 s with two workers,
    333 s with three, the same tests). ``PYTEST_XDIST_AUTO_NUM_WORKERS`` still sets the count.

    Set here rather than in ``addopts`` so that ``-p no:xdist`` (one process, no xdist at all) still parses,
    and so that an explicit ``-n N`` / ``-n 0`` / ``--dist`` wins. ``loadfile`` keeps each test file on one
    worker: many files build a costly module fixture once (a fuzz campaign, a written dataset, a server) that
    handing out single tests would build on every worker. This hook runs before xdist's own (both try first;
    a conftest registers later). Never inside a worker: it would spawn workers of its own.

    A crashed worker is not replaced (``--max-worker-restart 0``): see below.
    """
    if not config.pluginmanager.has_plugin("xdist") or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    option = config.option
    if option.numprocesses is None and not option.collectonly and not option.usepdb:
        option.numprocesses = "auto" if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS") else (
            len(os.sched_getaffinity(0)) + 1)
        if option.dist == "no":
            option.dist = "loadfile"
            # Files are handed out in the order workers collected them: heaviest first (see
            # order_heaviest_files_first), not xdist's "most tests first", which put the few long files (a
            # crash loop, a fuzz campaign, the docs build) last, where one of them ran alone at the end.
            option.loadscopereorder = False
    if option.maxworkerrestart is None:
        # A worker that dies (a segfault in a GL driver, an abort) fails the run at once, with the test it was
        # running named in the summary. xdist's default (4 replacements per worker) is worse than useless
        # with --dist loadfile: the file goes back on the queue with the crashed test still pending, so each
        # replacement re-runs the same test and dies again (a Qt file costs minutes per round, which looked
        # like a hang), and a replacement that registers late can stop the controller with an INTERNALERROR
        # (KeyError in LoadScopeScheduling). ``--max-worker-restart N`` on the command line still wins.
        option.maxworkerrestart = "0"


def pytest_collection(session: pytest.Session) -> None:
    """In each xdist worker of a whole run, import the test modules from a different starting point: each
    worker then assertion-rewrites its share of them, and finds the others already rewritten by the others.

    pytest rewrites each test module's ``assert`` statements on import and keeps the result as bytecode beside
    the module. On a fresh clone there is none yet, and the workers, collecting in the same order at the same
    time, each rewrote all 216 modules. Started a third of the list apart, they do it about once between them:
    a fresh clone's collection took 9.3 CPU s per worker, now 7.2 (a second run's: 5). Collection then finds
    the modules imported; it still reports any module that fails to import (its import is simply left to it).
    Only for the whole suite (``pytest`` with no paths): a run of a few files imports just those.
    """
    config = session.config
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if (not worker.startswith("gw") or count < 2 or config.getoption("assertmode") != "rewrite"
            or config.args_source is not pytest.Config.ArgsSource.TESTPATHS):
        return
    tests = Path(__file__).parent
    modules = sorted(tests.rglob("test_*.py"))
    start = len(modules) * int(worker.removeprefix("gw")) // count
    for path in modules[start:] + modules[:start]:
        try:
            importlib.import_module(".".join(path.relative_to(tests.parent).with_suffix("").parts))
        except (Exception, pytest.skip.Exception, pytest.fail.Exception):
            return


def pytest_collection_finish(session: pytest.Session) -> None:
    """Move what collection built (the imported modules, napari, TensorStore, every test function and
    Hypothesis strategy: about 380,000 objects) out of the garbage collector's reach: :func:`gc.freeze`.

    They live until the process ends anyway, but every full collection walked them again: napari runs
    ``gc.collect()`` each time layers leave a viewer (``VispyCanvas._clean_and_update_scenegraph``) and
    ``make_napari_viewer`` around every viewer test, besides Python's own full collections. Measured on
    ``test_every_real_dataset_in_napari_equals_an_independent_reader`` (91 such collections): 20.9 -> 13.3
    CPU s in ``gc.collect``. Objects the tests create are still collected as before; the garbage collection
    left behind is collected first, so none of it is frozen.
    """
    gc.collect()
    gc.freeze()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """At the end of each test file, once its fixtures are torn down: collect its garbage, then freeze what
    survives (:func:`gc.freeze`), as :func:`pytest_collection_finish` does with what collection built.

    What outlives a file lives until the worker ends: the session's fixtures and caches, and the windows napari
    itself never frees (about 5,000 objects per viewer test). Left in the collector's reach they were walked
    again by every later full collection, which napari runs whenever a layer leaves a viewer: over a run the
    workers spent 34 CPU s in 370 full collections, each walking everything earlier files left behind; now
    15 CPU s in 590, these included. A test's own objects are never frozen while it runs, so what it expects
    the collector to free (a closed viewer, a dropped repository handle) is freed as before.
    """
    result = yield
    if nextitem is None or nextitem.path != item.path:
        gc.collect()
        gc.freeze()
    return result


@pytest.fixture
def http_root(tmp_path: Path) -> Iterator[tuple[Path, RangeServer]]:
    """A directory served over HTTP with Range support: ``(directory, server)``."""
    root = tmp_path / "served"
    root.mkdir()
    server = RangeServer(root)
    try:
        yield root, server
    finally:
        server.close()


@pytest.fixture
def realdata() -> Path:
    """The folder of real datasets written by other software (``tests/realdata.py``): the test is skipped
    with how to get them when they are absent, and fails instead where they are required (CI)."""
    if not have_realdata():
        missing()
    return REALDATA


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Tests marked ``realdata`` need the real datasets: skipped (failed, where required) without them."""
    if item.get_closest_marker("realdata") is not None and not have_realdata():
        missing()


#: Seconds each test file took (setup, call and teardown of its tests, on one worker of the 2-core CI machine):
#: the order in which xdist hands files out. The last run's figures (pytest's cache) take precedence; a file in
#: neither counts DEFAULT_TEST_SECONDS per test. ``pytest --record-file-seconds`` rewrites the table.
FILE_SECONDS = Path(__file__).with_name("file_seconds.json")
FILE_SECONDS_CACHE_KEY = "shardscope/file-seconds"
DEFAULT_TEST_SECONDS = 0.3


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--record-file-seconds", action="store_true",
                     help=f"write the seconds each test file took in this run to {FILE_SECONDS.name} (merged)")


def file_seconds(config: pytest.Config) -> dict[str, float]:
    """What each test file cost: the committed table, updated by the last run's figures where there are any."""
    known: dict[str, float] = json.loads(FILE_SECONDS.read_text(encoding="utf-8")) if FILE_SECONDS.exists() else {}
    cache = getattr(config, "cache", None)
    if cache is not None:
        known.update({f: seconds for f, (seconds, _) in cache.get(FILE_SECONDS_CACHE_KEY, {}).items()})
    return known


def order_heaviest_files_first(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put the test files in order of cost, heaviest first, each file's tests in their own order.

    With ``--dist loadfile`` a worker takes the next whole file when it runs dry, in collection order; a long
    file taken last leaves the other core idle until it ends. Heaviest first, the last files are the short
    ones and the workers finish together. Every worker computes the same order (the same table and cache:
    the controller writes the cache only when the run ends), as xdist requires.
    """
    by_file: dict[str, list[pytest.Item]] = {}
    for item in items:
        by_file.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    cost = file_seconds(config)
    ordered = sorted(by_file, key=lambda f: -cost.get(f, DEFAULT_TEST_SECONDS * len(by_file[f])))
    items[:] = [item for f in ordered for item in by_file[f]]


_seconds_this_run: defaultdict[str, float] = defaultdict(float)
_tests_this_run: defaultdict[str, set[str]] = defaultdict(set)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Add up each file's seconds (in the controller, from every worker's reports; or in a run without xdist)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        path = report.nodeid.split("::", 1)[0]
        _seconds_this_run[path] += report.duration
        _tests_this_run[path].add(report.nodeid)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Keep this run's seconds per file for the next run's order (and in the table, when asked). A file of
    which fewer tests ran than last time (``-k``, one test named) keeps its figure: a part is not the whole."""
    if os.environ.get("PYTEST_XDIST_WORKER") or not _seconds_this_run:
        return
    measured = {f: round(s, 1) for f, s in _seconds_this_run.items()}
    cache = getattr(session.config, "cache", None)
    if cache is not None:
        kept: dict[str, list[float]] = cache.get(FILE_SECONDS_CACHE_KEY, {})
        for f, seconds in measured.items():
            if len(_tests_this_run[f]) >= (kept[f][1] if f in kept else 0):
                kept[f] = [seconds, len(_tests_this_run[f])]
        cache.set(FILE_SECONDS_CACHE_KEY, kept)
    if session.config.getoption("record_file_seconds"):
        table = json.loads(FILE_SECONDS.read_text(encoding="utf-8")) if FILE_SECONDS.exists() else {}
        table.update(measured)
        FILE_SECONDS.write_text(json.dumps(dict(sorted(table.items(), key=lambda kv: -kv[1])), indent=1) + "\n",
                                encoding="utf-8")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``slow`` (long crash loops) run only when asked for: ``pytest -m slow``; they run as
    long as they need (no pytest-timeout limit, which guards the default run against a hang). Under xdist
    the files come heaviest first (:func:`order_heaviest_files_first`)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        order_heaviest_files_first(config, items)
    for item in items:
        if "slow" in item.keywords and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(0))
    if config.getoption("markexpr"):
        return
    skip = pytest.mark.skip(reason="slow: run with `pytest -m slow`")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
