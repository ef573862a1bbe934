"""The public surface is deliberate, and every example in its docstrings runs.

* The snapshot: names and signatures of ``napari_shardscope.__all__`` and ``napari_shardscope.gui.__all__``
  (classes with their public members), compared with the committed ``tests/public_api.txt``; a change
  fails with the diff and the command that accepts it (:mod:`tests.public_api`).
* The doctests: the ``>>>`` examples of the public docstrings — the two namespaces, every object they
  name (methods included), and the package docstrings users read — run as a user would type them: in a
  fresh directory, with the sample dataset from the test cache, the gui's in a real napari viewer.
* No example hides from them: a public docstring shows code only as ``>>>`` examples, never as a
  ``::`` literal block, which nothing would run.
"""

from __future__ import annotations

import difflib
import doctest
import importlib
import inspect
import io
import re
from pathlib import Path
from typing import Any

import pytest

from napari_shardscope.core.sample_data import CACHE_DIR_ENV
from tests import public_api
from tests.volume_cases import sample  # noqa: F401  (fixture: the sample, generated once per session)

#: Modules whose own docstrings are public: the namespaces, and the packages the guides have users import.
PUBLIC_MODULES = (
    "napari_shardscope",
    "napari_shardscope.gui",
    "napari_shardscope.core.volumes",
    "napari_shardscope.core.formats",
    "napari_shardscope.core.layout",
    "napari_shardscope.core.serve",
    "napari_shardscope.core.proofreading",
    "napari_shardscope.core.export.api",
)


def test_public_api_matches_the_snapshot() -> None:
    expected = public_api.SNAPSHOT.read_text(encoding="utf-8")
    actual = public_api.render()
    if actual != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(keepends=True), actual.splitlines(keepends=True),
                                            fromfile="tests/public_api.txt (committed)", tofile="the code now"))
        pytest.fail(f"the public API changed:\n{diff}\nIf the change is deliberate, accept it with "
                    f"`{public_api.UPDATE_COMMAND}` and commit tests/public_api.txt.", pytrace=False)


def _public_objects() -> list[tuple[str, Any]]:
    """Every public object, once: the modules above, then the names of both namespaces."""
    found: dict[int, tuple[str, Any]] = {}
    for name in PUBLIC_MODULES:
        module = importlib.import_module(name)
        found.setdefault(id(module), (name, module))
    for namespace in public_api.NAMESPACES:
        module = importlib.import_module(namespace)
        for name in module.__all__:
            obj = getattr(module, name)
            if not isinstance(obj, str) and not inspect.ismodule(obj):
                found.setdefault(id(obj), (f"{namespace}.{name}", obj))
    return sorted(found.values(), key=lambda item: item[0])


def _doctests() -> list[doctest.DocTest]:
    finder = doctest.DocTestFinder(exclude_empty=True)
    tests: dict[str, doctest.DocTest] = {}
    for name, obj in _public_objects():
        module = obj if inspect.ismodule(obj) else inspect.getmodule(obj)
        # a module: its own docstring only (its names are public through the namespaces, or not at all)
        for test in finder.find(obj, name, module=module) if not inspect.ismodule(obj) else \
                [t for t in finder.find(obj, name) if t.name == name]:
            if test.examples:
                tests.setdefault(f"{test.name}:{test.lineno}", test)
    return [tests[key] for key in sorted(tests)]


DOCTESTS = _doctests()


def test_the_public_docstrings_have_examples_to_run() -> None:
    """The namespaces, export and the gui carry examples (a refactor that drops them fails here)."""
    names = {t.name for t in DOCTESTS}
    assert {"napari_shardscope", "napari_shardscope.gui", "napari_shardscope.export"} <= names, names
    assert sum(len(t.examples) for t in DOCTESTS) >= 40


@pytest.mark.parametrize("test", DOCTESTS, ids=[f"{t.name}:{t.lineno}" for t in DOCTESTS])
def test_docstring_examples_run(test: doctest.DocTest, sample: Any, tmp_path: Path,  # noqa: F811
                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CACHE_DIR_ENV, str(sample.root.parent))  # ensure_sample_dataset() finds the session's
    monkeypatch.chdir(tmp_path)                                  # repositories and exports land here
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    out = io.StringIO()
    try:
        runner.run(test, out=out.write, clear_globs=True)
    finally:
        if test.name == "napari_shardscope.gui":
            import napari

            napari.Viewer.close_all()  # a failing example must not leave its viewer to the next test
    results = runner.summarize(verbose=False)
    assert results.attempted == len(test.examples)
    assert results.failed == 0, out.getvalue()


#: A line ending in ``::`` (a reST literal block: code nothing runs), outside a ``>>>`` example.
_LITERAL_BLOCK = re.compile(r"::\s*$", re.M)


@pytest.mark.parametrize("name,obj", _public_objects(), ids=[name for name, _ in _public_objects()])
def test_public_docstrings_show_code_only_as_doctests(name: str, obj: Any) -> None:
    docs = [(name, inspect.getdoc(obj) or "")]
    if inspect.isclass(obj):
        docs += [(f"{name}.{attr}", inspect.getdoc(member) or "") for attr, member in vars(obj).items()
                 if not attr.startswith("_") and (inspect.isfunction(member) or isinstance(member, property))]
    blocks = [where for where, doc in docs if _LITERAL_BLOCK.search(doc)]
    assert blocks == [], f"write these examples as >>> doctests, so the test suite runs them: {blocks}"
