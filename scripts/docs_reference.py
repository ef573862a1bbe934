"""The generated parts of the documentation site: the CLI reference, the exit codes and the API page.

Used two ways:

* as an MkDocs hook (``hooks:`` in ``mkdocs.yml``): while the site builds, each page's marker comment
  (``<!-- shardscope:cli-reference -->`` and the others in :data:`MARKERS`) is replaced by Markdown
  rendered from the code as it is now — the ``shardscope`` argparse parser, ``core/errors.py``'s one
  map of error groups to exit codes, and :data:`API_REFERENCE` for mkdocstrings. Nothing here is
  maintained by hand, so the reference follows every change to a verb, an option or an error group;
  a marker that no page holds fails the build.
* as a script, to read what a page will get without building the site::

      .venv/bin/python scripts/docs_reference.py cli      # or: exit-codes, errors, api, bench
"""

from __future__ import annotations

import argparse
import contextlib
import html
import importlib
import os
import pkgutil
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

#: The API reference page, one section per task: a title and the objects mkdocstrings renders under it.
#: This one list decides what the page shows. Paths name the public namespace (``napari_shardscope.X``,
#: ``napari_shardscope.gui.X``: what users import, see ``napari_shardscope/__init__.py``); the few objects
#: the namespace does not name (records a call returns) keep their module path.
API_REFERENCE: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("One import", (
        "napari_shardscope",
    )),
    ("Open and read volumes", (
        "napari_shardscope.open_volume",
        "napari_shardscope.open_volumes",
        "napari_shardscope.Volume",
        "napari_shardscope.core.volumes.ScaleLevel",
        "napari_shardscope.LazyArray",
        "napari_shardscope.core.volumes.set_cache_pool_size",
        "napari_shardscope.ensure_sample_dataset",
    )),
    ("Datasets: metadata, inspect, locate, validate, meshes and skeletons", (
        "napari_shardscope.open_dataset",
        "napari_shardscope.Dataset",
        "napari_shardscope.core.formats.DatasetInspector",
        "napari_shardscope.core.formats.VolumeSpec",
        "napari_shardscope.core.formats.LevelSpec",
        "napari_shardscope.core.formats.Problem",
    )),
    ("Annotations and sorted tables", (
        "napari_shardscope.open_annotations",
        "napari_shardscope.core.formats.precomputed.annotations.reader.AnnotationSource",
        "napari_shardscope.open_sorted_table",
        "napari_shardscope.write_sorted_table",
        "napari_shardscope.core.tables.SortedTable",
    )),
    ("The shard layout (what the Shard browser shows)", (
        "napari_shardscope.open_layout",
        "napari_shardscope.core.layout.LayoutTree",
    )),
    ("Versioned repositories", (
        "napari_shardscope.init_repository",
        "napari_shardscope.open_repository",
        "napari_shardscope.Repository",
        "napari_shardscope.Version",
    )),
    ("Labelmaps: proofreading data", (
        "napari_shardscope.create_labelmap",
        "napari_shardscope.open_labelmap",
        "napari_shardscope.Labelmap",
        "napari_shardscope.LabelmapVersion",
        "napari_shardscope.Mutation",
        "napari_shardscope.BodySplit",
        "napari_shardscope.plan_branch_merge",
        "napari_shardscope.merge_branches",
        "napari_shardscope.review_branch",
    )),
    ("Versioned annotations (synapses) on a labelmap", (
        "napari_shardscope.create_annotation_instance",
        "napari_shardscope.open_annotation_instance",
        "napari_shardscope.AnnotationInstance",
        "napari_shardscope.AnnotationVersion",
        "napari_shardscope.Annotation",
        "napari_shardscope.SynapseColumns",
        "napari_shardscope.add_many",
        "napari_shardscope.Connections",
        "napari_shardscope.ConnectionTable",
        "napari_shardscope.diff_connectivity",
        "napari_shardscope.synapse_todo",
        "napari_shardscope.merge_with_labelmap",
    )),
    ("Remotes: clone, fetch, pull, push", (
        "napari_shardscope.add_remote",
        "napari_shardscope.clone",
        "napari_shardscope.fetch",
        "napari_shardscope.pull",
        "napari_shardscope.push",
        "napari_shardscope.pull_merger",
        "napari_shardscope.reserve_labelmap_ids",
        "napari_shardscope.core.versioned.remotes.status",
        "napari_shardscope.core.versioned.remotes.remaining_ids",
    )),
    ("Export", (
        "napari_shardscope.export",
        "napari_shardscope.core.export.precomputed.export_precomputed",
        "napari_shardscope.core.export.zarr3.export_zarr3",
        "napari_shardscope.core.export.source.labelmap_source",
        "napari_shardscope.core.export.meshes.export_meshes",
    )),
    ("Neuroglancer hand-off", (
        "napari_shardscope.serve",
        "napari_shardscope.Handoff",
    )),
    ("The proofreading controller (what the panels drive)", (
        "napari_shardscope.ProofreadingController",
    )),
    ("The command line, from Python", (
        "napari_shardscope.shardscope",
    )),
    ("In a napari viewer", (
        "napari_shardscope.gui",
        "napari_shardscope.gui.add_volumes",
        "napari_shardscope.gui.open_in_background",
        "napari_shardscope.gui.sample_volumes",
        "napari_shardscope.gui.controller_for",
        "napari_shardscope.gui.session_for",
        "napari_shardscope.gui.ViewerSession",
        "napari_shardscope.gui.canvas_for",
        "napari_shardscope.gui.add_on_grid",
        "napari_shardscope.gui.neuroglancer_url",
    )),
    ("Errors", (
        "napari_shardscope.core.errors",
    )),
)

#: Modules rendered for their docstring only: their names have entries of their own above.
DOCSTRING_ONLY = frozenset({"napari_shardscope", "napari_shardscope.gui"})

#: Objects whose docstring griffe cannot fully parse as numpydoc, each with the reason: rendered with the
#: parser's warnings off (everywhere else a warning fails the strict build, so a stale docstring shows up).
QUIET_DOCSTRINGS: dict[str, str] = {
    "napari_shardscope.core.layout.LayoutTree": "a paragraph follows the Parameters section without a heading",
}

#: Line width of the usage blocks (argparse wraps to the terminal otherwise, which would make the page
#: depend on where it was built).
USAGE_WIDTH = 78


# -- the command line -------------------------------------------------------------------------------------
def shardscope_parser() -> argparse.ArgumentParser:
    """The parser the ``shardscope`` console script runs: the core verbs and the GUI verbs."""
    from napari_shardscope.cli import GUI_VERB_MODULES
    from napari_shardscope.core.cli.parser import build_parser

    return build_parser(GUI_VERB_MODULES)


@contextlib.contextmanager
def _columns(width: int) -> Iterator[None]:
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(width + 2)  # argparse's HelpFormatter keeps 2 columns free
    try:
        yield
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """``(name, one-line help, parser)`` of each subcommand, in ``--help`` order."""
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            out.extend((name, helps.get(name, ""), sub) for name, sub in action.choices.items())
    return out


#: Literal text in a docstring or help: ````x````, ```x``` or a reST role (``:class:`~a.B```).
_LITERAL = re.compile(r"``(.+?)``|(?::[\w:]+:)?`([^`]+)`")


def _text(value: str) -> str:
    """Help or docstring text as Markdown prose: literals become code, nothing else is read as markup or HTML."""
    value = " ".join(value.split())
    out, last = [], 0
    for match in _LITERAL.finditer(value):
        out.append(_escape(value[last:match.start()]))
        literal = match.group(1) or match.group(2)
        if match.group(2) is not None and match.group(0).startswith(":"):  # a role: the name it points at
            literal = literal.lstrip("~.")
        out.append(_code(literal))
        last = match.end()
    out.append(_escape(value[last:]))
    return "".join(out)


def _escape(value: str) -> str:
    return re.sub(r"([\\`*_\[\]|#])", r"\\\1", html.escape(value, quote=False))


def _code(value: str) -> str:
    fence = "``" if "`" in value else "`"
    pad = " " if value.startswith("`") or value.endswith("`") else ""
    return f"{fence}{pad}{value}{pad}{fence}"


def _describe_action(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    formatter = parser._get_formatter()
    invocation = formatter._format_action_invocation(action)
    help_text = formatter._expand_help(action) if action.help else ""
    notes = []
    if action.required and action.option_strings:
        notes.append("required")
    default = action.default
    if (action.option_strings and default not in (None, False, argparse.SUPPRESS, [], ())
            and "default" not in help_text.lower() and not isinstance(action, argparse._VersionAction)):
        notes.append(f"default: {_code(str(default))}")
    line = f"- {_code(invocation)}"
    if help_text:
        line += f": {_text(help_text)}"
    if notes:
        line += f" ({'; '.join(notes)})"
    return line


def _arguments(parser: argparse.ArgumentParser, *, skip_help: bool = True) -> list[str]:
    positionals, options = [], []
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or isinstance(action, argparse._SubParsersAction):
            continue
        if skip_help and isinstance(action, argparse._HelpAction):
            continue
        (options if action.option_strings else positionals).append(_describe_action(parser, action))
    lines: list[str] = []
    if positionals:
        lines += ["**Arguments**", "", *positionals, ""]
    if options:
        lines += ["**Options**", "", *options, ""]
    return lines


def _usage(parser: argparse.ArgumentParser) -> list[str]:
    with _columns(USAGE_WIDTH):
        usage = parser.format_usage().strip()
    return ["```text", usage, "```", ""]


def _verb(name: str, one_line: str, parser: argparse.ArgumentParser, level: int) -> list[str]:
    lines = [f"{'#' * level} {parser.prog}", ""]
    if one_line.startswith("deprecated"):  # an old spelling: say where it went, not its options again
        return [*lines, f"{_text(one_line)}.", ""]
    if one_line:
        lines += [f"*{_text(one_line)}*", ""]
    lines += _usage(parser)
    if parser.description and parser.description.strip() != one_line.strip():
        lines += [_text(parser.description), ""]
    children = _subcommands(parser)
    if children:
        lines += ["| action | what it does |", "| --- | --- |"]
        lines += [f"| [{child}](#{_slug(sub.prog)}) | {_text(text)} |" for child, text, sub in children]
        lines.append("")
    else:
        lines += _arguments(parser)
    if parser.epilog:
        lines += [_text(parser.epilog), ""]
    for child, text, sub in children:
        lines += _verb(child, text, sub, level + 1)
    return lines


def _slug(heading: str) -> str:
    """The anchor Python-Markdown's toc extension gives a heading (its default ``slugify``)."""
    from markdown.extensions.toc import slugify

    return slugify(heading, "-")


def render_cli_reference(parser: argparse.ArgumentParser | None = None) -> str:
    """Every verb of ``shardscope``: its usage, description, arguments and options, as Markdown."""
    parser = parser or shardscope_parser()
    lines = ["## Global options", "", "Given before the verb (`shardscope --timeout 10 inspect URL`).", ""]
    lines += _usage(parser)
    lines += _arguments(parser, skip_help=False)
    lines += ["## Verbs", "", "| verb | what it does |", "| --- | --- |"]
    verbs = _subcommands(parser)
    lines += [f"| [{name}](#{_slug(sub.prog)}) | {_text(text)} |" for name, text, sub in verbs]
    lines.append("")
    for name, text, sub in verbs:
        lines += _verb(name, text, sub, 3)
    return "\n".join(lines)


# -- errors and exit codes ----------------------------------------------------------------------------------
def _first_line(doc: str | None) -> str:
    return " ".join((doc or "").strip().split("\n\n")[0].split())


def render_exit_codes() -> str:
    """The exit-code table, from ``core/errors.py``'s one map (``EXIT_CODES``, ``exit_code_for``)."""
    from napari_shardscope.core import errors
    from napari_shardscope.core.cli.main import DEBUG_VARIABLE

    rows = [(errors.EXIT_OK, "", "success"),
            (errors.EXIT_CHECK_FAILED, "", "a check ran and found problems (`validate`, `repo verify`); not an error")]
    for group, code in errors.EXIT_CODES:
        name = errors.group_name(group.__new__(group))
        rows.append((code, f"`{group.__name__}` (`{name}`)", _text(_first_line(group.__doc__))))
    other = errors.ShardscopeError.__new__(errors.ShardscopeError)
    rows.append((errors.exit_code_for(other), f"(`{errors.group_name(other)}`)",
                 "an error of ours in no group (should not happen)"))
    bug = RuntimeError()
    rows.append((errors.exit_code_for(bug), f"(`{errors.group_name(bug)}`)",
                 f"a bug: one line `internal error: TYPE: message`; run with `{DEBUG_VARIABLE}=1` for the "
                 "traceback, and report it"))
    lines = ["| exit | group (`--json` `group`) | meaning |", "| --- | --- | --- |"]
    lines += [f"| {code} | {group} | {meaning} |" for code, group, meaning in sorted(rows)]
    return "\n".join(lines) + "\n"


def _import_core() -> None:
    """Import every module of ``napari_shardscope.core``, so every error class is defined."""
    import napari_shardscope.core as core

    for info in pkgutil.walk_packages(core.__path__, prefix="napari_shardscope.core."):
        importlib.import_module(info.name)


def render_error_classes() -> str:
    """Every typed error the library raises, by group: its name, where it lives, what it means."""
    from napari_shardscope.core import errors

    _import_core()
    seen: dict[type[Any], None] = {}
    stack = list(errors.ShardscopeError.__subclasses__())
    while stack:
        cls = stack.pop()
        if cls not in seen and cls.__module__.startswith("napari_shardscope."):
            seen[cls] = None
            stack.extend(cls.__subclasses__())
    groups = [group for group, _code in errors.EXIT_CODES]
    lines: list[str] = []
    for group, code in sorted(errors.EXIT_CODES, key=lambda item: item[1]):
        members = sorted((cls for cls in seen if cls is not group and issubclass(cls, group)
                          and errors.exit_code_for(cls.__new__(cls)) == code), key=lambda c: c.__name__)
        lines += [f"### {group.__name__} (exit {code})", "", _text(_first_line(group.__doc__)), ""]
        lines += [f"- `{cls.__name__}` (`{cls.__module__}`): {_text(_first_line(cls.__doc__))}" for cls in members]
        lines.append("")
    loose = sorted((cls for cls in seen if cls not in groups and not any(issubclass(cls, g) for g in groups)),
                   key=lambda c: c.__name__)
    if loose:
        lines += ["### In no group (exit 9)", ""]
        lines += [f"- `{cls.__name__}` (`{cls.__module__}`): {_text(_first_line(cls.__doc__))}" for cls in loose]
        lines.append("")
    return "\n".join(lines)


# -- the API page ----------------------------------------------------------------------------------------------
def render_api_reference() -> str:
    """mkdocstrings directives for :data:`API_REFERENCE`, one section per task."""
    lines: list[str] = []
    for title, paths in API_REFERENCE:
        lines += [f"## {title}", ""]
        for path in paths:
            lines.append(f"::: {path}")
            options = []
            if path in QUIET_DOCSTRINGS:
                options += ["      docstring_options:", "        warnings: false"]
            if path in DOCSTRING_ONLY:
                options += ["      members: false"]
            if options:
                lines += ["    options:", *options]
            lines.append("")
    return "\n".join(lines)


# -- the benchmarks ----------------------------------------------------------------------------------------------
ROOT = Path(__file__).resolve().parent.parent


def render_bench_readme() -> str:
    """``bench/README.md`` without its title: how the benchmarks measure, and the table ``bench/table.py`` renders.

    Included, not copied, so the site shows the table as the bench scripts last regenerated it.
    """
    text = (ROOT / "bench" / "README.md").read_text(encoding="utf-8")
    lines = text.splitlines()
    if lines and lines[0].startswith("# "):
        lines = lines[1:]
    return "\n".join(lines).strip() + "\n"


#: Marker comment → what replaces it.
MARKERS: dict[str, Callable[[], str]] = {
    "<!-- shardscope:cli-reference -->": render_cli_reference,
    "<!-- shardscope:exit-codes -->": render_exit_codes,
    "<!-- shardscope:error-classes -->": render_error_classes,
    "<!-- shardscope:api-reference -->": render_api_reference,
    "<!-- shardscope:bench-readme -->": render_bench_readme,
}


# -- MkDocs hook events -------------------------------------------------------------------------------------
_replaced: set[str] = set()


def on_pre_build(config: Any) -> None:
    """Start each build with no marker replaced (``mkdocs serve`` rebuilds in one process)."""
    _replaced.clear()
    src = str(ROOT / "src")
    if src not in sys.path:  # the package is installed in .venv; this also serves a bare checkout
        sys.path.insert(0, src)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Replace each marker on the page by what :data:`MARKERS` renders for it, from the code as it is."""
    for marker, render in MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, render())
            _replaced.add(marker)
    return markdown


#: A reST role left in a docstring that mkdocstrings rendered (``:func:`x``` becomes ``:func:<code>x</code>``).
_ROLE_BEFORE_CODE = re.compile(r":(?:py:)?(?:func|class|meth|mod|data|attr|exc|obj|const|term):<code>([^<]*)</code>")


def _role_target(match: re.Match[str]) -> str:
    name = match.group(1)
    if name.startswith("~"):  # Sphinx's "~a.b.C" shows "C"
        name = name.rsplit(".", 1)[-1]
    return f"<code>{name.lstrip('.')}</code>"


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    """Drop the reST role markers docstrings use (``:class:`` …), as Sphinx would: the name stays, as code."""
    return _ROLE_BEFORE_CODE.sub(_role_target, html)


def on_post_build(config: Any) -> None:
    """Fail the build when a generated part has no page left to hold it."""
    missing = sorted(set(MARKERS) - _replaced)
    if missing:
        raise RuntimeError(f"no documentation page holds {', '.join(missing)} (see scripts/docs_reference.py)")


def main(argv: list[str] | None = None) -> int:
    names = {"cli": render_cli_reference, "exit-codes": render_exit_codes, "errors": render_error_classes,
             "api": render_api_reference, "bench": render_bench_readme}
    args = argparse.ArgumentParser(description="Print a generated part of the documentation.")
    args.add_argument("part", choices=sorted(names))
    print(names[args.parse_args(argv).part]())
    return 0


if __name__ == "__main__":
    sys.exit(main())
