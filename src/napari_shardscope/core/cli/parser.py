"""The ``shardscope`` argument parser, built in one place from the verbs each module declares.

A verb module (:mod:`.inspect`, :mod:`.repo`, :mod:`.export`, :mod:`.labelmap`, and outside core
:mod:`napari_shardscope.napari_plugin.cli`) does not touch argparse: it lists its verbs in a
module-level ``VERBS`` tuple of :class:`Verb` and :class:`VerbGroup` records, each argument an
:func:`arg` with argparse's own keywords. :func:`build_parser` turns them into subcommands, so the
conventions every verb shares are applied here once, not remembered by each module: every verb
gets ``--json`` (unless it has no machine-readable output, like the GUI verbs), usage errors are
raised as :class:`UsageError` (an :class:`ArgumentError`, so they exit like one), and
``shardscope --version`` prints the package version.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

from napari_shardscope import __version__
from napari_shardscope.core.errors import ArgumentError, ShardscopeError

#: Runs a verb on its parsed arguments and returns the exit code (0, or 1 when a check found problems).
Handler = Callable[[argparse.Namespace], int]
#: Extra top-level fields for a verb's ``--json`` error document (e.g. the conflicts a merge left).
ErrorDetails = Callable[[ShardscopeError], dict[str, Any]]

#: Modules whose ``VERBS`` make up the core command line, in ``--help`` order.
CORE_VERB_MODULES: tuple[str, ...] = (
    "napari_shardscope.core.cli.inspect",
    "napari_shardscope.core.cli.repo",
    "napari_shardscope.core.cli.export",
    "napari_shardscope.core.cli.labelmap",
    "napari_shardscope.core.cli.serve",
    "napari_shardscope.core.cli.remote",
)

JSON_HELP = "machine-readable output on stdout (errors too, as {\"error\": {...}})"


@dataclass(frozen=True)
class Arg:
    """One argument: ``argparse.add_argument(*flags, **options)``."""

    flags: tuple[str, ...]
    options: Mapping[str, Any]


def arg(*flags: str, **options: Any) -> Arg:
    """Declare an argument with argparse's own vocabulary (``arg("--scale", metavar="KEY")``)."""
    return Arg(flags, options)


@dataclass(frozen=True)
class OneOf:
    """Mutually exclusive arguments (``required``: exactly one must be given)."""

    args: tuple[Arg, ...]
    required: bool = False


@dataclass(frozen=True)
class Verb:
    """A subcommand: its name, what it does, its arguments and the function that runs it.

    Attributes
    ----------
    also_in
        Names of :class:`VerbGroup` s that offer this verb as an action too (``labelmap index`` is
        ``index``), so one declaration serves both spellings.
    machine_output
        False for verbs with nothing to print as JSON (``open``, ``demo``): they get no ``--json``.
    error_details
        Adds fields to the ``--json`` error document, for errors that carry results worth a script's
        attention (the conflicts a merge could not resolve).
    """

    name: str
    run: Handler
    help: str
    args: tuple[Arg | OneOf, ...] = ()
    description: str | None = None
    epilog: str | None = None
    also_in: tuple[str, ...] = ()
    machine_output: bool = True
    error_details: ErrorDetails | None = None


@dataclass(frozen=True)
class VerbGroup:
    """A command with actions (``repo init``, ``kv get``, ``labelmap create``)."""

    name: str
    help: str
    description: str
    verbs: tuple[Verb, ...] = ()


class UsageError(ArgumentError):
    """A command line argparse refused (unknown option, bad value, missing argument).

    Raised instead of argparse's own exit so that :func:`~napari_shardscope.core.cli.main.run`
    reports it like every other error (exit code from the one map, JSON with ``--json``).
    """

    def __init__(self, message: str, parser: argparse.ArgumentParser) -> None:
        super().__init__(message)
        self.prog = parser.prog
        self.usage = parser.format_usage()


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message, self)


def build_parser(extra_modules: Iterable[str] = ()) -> argparse.ArgumentParser:
    """The full ``shardscope`` parser: the core verbs, then those of ``extra_modules``."""
    parser = _Parser(
        prog="shardscope",
        description="Inspect, open and proofread sharded connectomics volumes "
        "(Neuroglancer precomputed, Zarr v3 sharding_indexed, N5).",
    )
    parser.add_argument("--version", action="version", version=f"shardscope {__version__}")
    parser.add_argument("--timeout", type=float, metavar="SECONDS", default=None,
                        help="remote I/O: connect timeout and the longest a request may stall without data "
                             "(default: $SHARDSCOPE_TIMEOUT_S or 3)")
    parser.add_argument("--retries", type=int, metavar="N", default=None,
                        help="remote I/O: how many times a failed request is retried "
                             "(default: $SHARDSCOPE_RETRIES or 2); an unreachable host fails after about "
                             "(N + 1) x timeout seconds")
    parser.add_argument(
        "--follow-symlinks", action="store_true",
        help="read through symbolic links that lead out of a dataset (refused by default: a link planted in "
             "a dataset could make any command read files elsewhere); writes never follow such links")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    groups: dict[str, Any] = {}
    aliases: list[tuple[str, Verb]] = []
    for module in (*CORE_VERB_MODULES, *extra_modules):
        for command in importlib.import_module(module).VERBS:
            if isinstance(command, VerbGroup):
                groups[command.name] = _add_group(sub, command)
            else:
                _add_verb(sub, command, command.name)
                aliases.extend((group, command) for group in command.also_in)
    for group, verb in aliases:
        _add_verb(groups[group], verb, f"{group} {verb.name}")
    return parser


def _add_group(sub: Any, group: VerbGroup) -> Any:
    p = sub.add_parser(group.name, help=group.help, description=group.description)
    actions = p.add_subparsers(dest=f"{group.name}_command", metavar="ACTION", parser_class=_Parser)
    actions.required = True
    for verb in group.verbs:
        _add_verb(actions, verb, f"{group.name} {verb.name}")
    return actions


def _add_verb(sub: Any, verb: Verb, full_name: str) -> None:
    p = sub.add_parser(verb.name, help=verb.help, description=verb.description or verb.help, epilog=verb.epilog)
    for a in verb.args:
        if isinstance(a, OneOf):
            group = p.add_mutually_exclusive_group(required=a.required)
            for one in a.args:
                group.add_argument(*one.flags, **one.options)
        else:
            p.add_argument(*a.flags, **a.options)
    if verb.machine_output:
        p.add_argument("--json", action="store_true", help=JSON_HELP)
    p.set_defaults(func=verb.run, verb=full_name, verb_parser=p, json=False, error_details=verb.error_details)
