"""The documentation site: it builds strictly and offline, its generated reference follows the code, and every
Python example in it runs.

The build runs the way CI and a reader run it (``python -m mkdocs build --strict`` in a subprocess, with the
repository's ``mkdocs.yml``), with every proxy variable pointing at a closed port, so a theme or plugin that
tried to download fonts or assets would fail the build. The examples are the pages' ```` ```python ```` blocks,
run page by page, each top to bottom in a fresh process and directory of its own as a reader would paste them
(forked from one that imported numpy and TensorStore: ``tests/docs/page_runner.py``; blocks fenced
```` ```{.python .no-run} ```` need a napari window or a server and are only shown).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from napari_shardscope.core import errors
from napari_shardscope.core.sample_data import CACHE_DIR_ENV, SampleDataset
from tests.volume_cases import sample  # noqa: F401  (fixture: the session's sample, read only)

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGE_RUNNER = Path(__file__).resolve().parent / "page_runner.py"
sys.path.insert(0, str(ROOT / "scripts"))
import docs_reference  # noqa: E402  (scripts/ is not a package: the hook module, imported by path)

pytestmark = pytest.mark.docs

#: A fenced ```` ```python ```` block (not ``{.python .no-run}``), at the start of a line.
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
PAGES_WITH_EXAMPLES = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")
                             if "pending" not in p.parts and PYTHON_BLOCK.search(p.read_text(encoding="utf-8")))
#: Any download attempt goes to a port nothing listens on.
OFFLINE = {name: "http://127.0.0.1:9" for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
                                                   "http_proxy", "https_proxy", "all_proxy")}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, **OFFLINE, "NO_PROXY": "", "no_proxy": "", "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                           str(ROOT / "mkdocs.yml"), "--site-dir", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def _html(site: Path, page: str) -> str:
    return (site / page / "index.html").read_text(encoding="utf-8")


def _verbs(parser: argparse.ArgumentParser) -> list[str]:
    """``prog`` of every subcommand, nested ones included (``shardscope repo init``)."""
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                out.append(sub.prog)
                out.extend(_verbs(sub))
    return out


def test_site_builds_offline_with_every_page_and_nothing_remote(site: Path) -> None:
    pages = {p.parent.relative_to(site).as_posix() for p in site.rglob("index.html")}
    for page in DOCS.rglob("*.md"):
        rel = page.relative_to(DOCS).with_suffix("")
        if "pending" in rel.parts:
            continue
        assert (rel.as_posix() if rel.name != "index" else rel.parent.as_posix()) in pages | {"."}, rel
    assert not (site / "pending").exists()  # the staging area is not published
    for html in site.rglob("*.html"):
        text = html.read_text(encoding="utf-8")
        assert "fonts.googleapis" not in text and "fonts.gstatic" not in text, html
        assert not re.search(r'<(script|link)[^>]+(src|href)="https?://', text), html


def test_cli_reference_has_every_verb_and_option_of_the_parser(site: Path) -> None:
    html = _html(site, "reference/cli")
    parser = docs_reference.shardscope_parser()
    verbs = _verbs(parser)
    assert len(verbs) > 40
    for prog in verbs:
        assert f'id="{docs_reference._slug(prog)}"' in html, prog
    for prog in ("shardscope export", "shardscope body split", "shardscope clone"):
        sub = next(s for s in _subparsers(parser) if s.prog == prog)
        for action in sub._actions:
            for flag in action.option_strings:
                assert f"<code>{flag}" in html or f"<code>{flag} " in html or f", {flag}" in html, (prog, flag)


def _subparsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                out += [sub, *_subparsers(sub)]
    return out


def test_errors_page_is_the_one_map(site: Path) -> None:
    html = _html(site, "reference/errors")
    for group, code in errors.EXIT_CODES:
        row = re.search(rf"<td>{code}</td>\s*<td><code>{group.__name__}</code> \(<code>[a-z_]+</code>\)</td>", html)
        assert row, (group.__name__, code)
    assert "<code>NotADatasetError</code>" in html and "<code>UsageError</code>" in html


def test_api_page_documents_every_listed_object(site: Path) -> None:
    html = _html(site, "reference/api")
    for _title, paths in docs_reference.API_REFERENCE:
        for path in paths:
            assert f'id="{path}"' in html, path


def test_api_page_lists_every_public_name() -> None:
    """The page follows the namespace: a name added to ``napari_shardscope.__all__`` (or the gui's) without
    an entry in ``API_REFERENCE`` fails here (the error groups are on it through ``core.errors``)."""
    import napari_shardscope as ss
    from napari_shardscope import gui

    listed = {path for _title, paths in docs_reference.API_REFERENCE for path in paths}
    not_pages = {"__version__", "remotes", "create_repository"}  # a string, a module, init_repository's old name
    missing = [f"napari_shardscope.{name}" for name in ss.__all__
               if name not in not_pages and f"napari_shardscope.{name}" not in listed
               and not (isinstance(getattr(ss, name), type) and issubclass(getattr(ss, name), errors.ShardscopeError))]
    missing += [f"napari_shardscope.gui.{name}" for name in gui.__all__
                if f"napari_shardscope.gui.{name}" not in listed]
    assert missing == [], f"add them to API_REFERENCE in scripts/docs_reference.py: {missing}"
    assert "napari_shardscope.core.errors" in listed


@pytest.fixture(scope="module")
def sample_cache(sample: SampleDataset) -> Path:  # noqa: F811
    """The session's sample cache (generated once per worker, shared with the other files that read it): the
    examples only read the sample (what they write goes to their working directory, ``tmp_path``)."""
    return sample.root.parent


@pytest.fixture(scope="module")
def page_runs(sample_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, str, str]]:
    """Every page's examples run (``tests/docs/page_runner.py``: one process per page, each forked from one
    that imported numpy and TensorStore, in a fresh directory of its own): exit code, stdout, stderr by page."""
    where = tmp_path_factory.mktemp("pages")
    pages = []
    for i, page in enumerate(PAGES_WITH_EXAMPLES):
        cwd = where / f"{i:02d}"
        cwd.mkdir()
        blocks = PYTHON_BLOCK.findall((DOCS / page).read_text(encoding="utf-8"))
        script = cwd / "examples.py"
        script.write_text("\n\n".join(blocks), encoding="utf-8")
        pages.append({"script": str(script), "cwd": str(cwd)})
    results, spec = where / "results.json", where / "spec.json"
    spec.write_text(json.dumps({"pages": pages, "results": str(results)}), encoding="utf-8")
    env = {**os.environ, CACHE_DIR_ENV: str(sample_cache), **OFFLINE}
    done = subprocess.run([sys.executable, str(PAGE_RUNNER), str(spec)], cwd=where, env=env, capture_output=True,
                          text=True, timeout=600 * len(pages), stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    codes = json.loads(results.read_text(encoding="utf-8"))
    assert len(codes) == len(pages), f"{done.stdout}\n{done.stderr}"
    return {page: (code, (Path(p["cwd"]) / "stdout.txt").read_text(encoding="utf-8", errors="replace"),
                   (Path(p["cwd"]) / "stderr.txt").read_text(encoding="utf-8", errors="replace"))
            for page, p, code in zip(PAGES_WITH_EXAMPLES, pages, codes, strict=True)}


@pytest.mark.parametrize("page", PAGES_WITH_EXAMPLES)
def test_python_examples_of_the_page_run(page: str, page_runs: dict[str, tuple[int, str, str]]) -> None:
    code, stdout, stderr = page_runs[page]
    assert code == 0, f"{page}:\n{stdout}\n{stderr}"


def test_every_page_with_python_is_tested() -> None:
    """The pages whose examples run must include the task pages that show Python (a renamed page still counts)."""
    assert {"open.md", "labelmap.md", "proofread.md", "remotes.md", "export.md", "notebook.md"} <= set(
        PAGES_WITH_EXAMPLES)
