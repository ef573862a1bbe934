"""The ``shardscope`` argument parser, built in one place from the verbs each module declares.

A verb module does not touch argparse: it lists its verbs in a module-level ``VERBS`` tuple of
:class:`Verb` and :class:`VerbGroup` records, each argument an :func:`arg` with argparse's own keywords.
The core verbs are declared in :mod:`.verbs`, the GUI verbs in :mod:`napari_shardscope.napari_plugin.cli`.
A verb names the function that runs it with :func:`lazy` (``lazy("napari_shardscope.core.cli.inspect",
"cmd_inspect")``): the module that holds it (and the library it imports: numpy, TensorStore, the
formats, the store) is imported only when that verb runs, so ``shardscope --help``, ``--version``, a
verb's help and a usage error cost an interpreter start and argparse, not the whole library.

:func:`build_parser` turns the declarations into subcommands, so the conventions every verb shares
are applied here once, not remembered by each module: every verb gets ``--json`` (unless it has no
machine-readable output, like the GUI verbs), usage errors are raised as :class:`UsageError` (an
:class:`ArgumentError`, so they exit like one), every ``--help`` names the exit codes (the table in
``shardscope --help``, from :data:`~napari_shardscope.core.errors.EXIT_MEANINGS`), and ``shardscope
--version`` prints the package version.

One name per verb: a verb offered in a group (``body cleave``, ``labelmap index``) is spelt with its
group; the same verb at the top level (``cleave``, ``index``) and the old spellings of
:func:`deprecated` still run, hidden from ``--help``, after one line on stderr naming the spelling
to use. Old option names (:func:`deprecated_option`) work the same way.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, NoReturn

from napari_shardscope import __version__
from napari_shardscope.core.errors import EXIT_MEANINGS, ArgumentError, ShardscopeError

#: Runs a verb on its parsed arguments and returns the exit code (0, or 1 when a check found problems).
Handler = Callable[[argparse.Namespace], int]
#: Extra top-level fields for a verb's ``--json`` error document (e.g. the conflicts a merge left).
ErrorDetails = Callable[[ShardscopeError], dict[str, Any]]

#: Modules whose ``VERBS`` make up the core command line, in ``--help`` order. Imported to build the parser,
#: so they hold declarations only (their verbs' functions are :func:`lazy` references).
CORE_VERB_MODULES: tuple[str, ...] = ("napari_shardscope.core.cli.verbs",)

JSON_HELP = "machine-readable output on stdout (errors too, as {\"error\": {...}})"


@dataclass(frozen=True)
class LazyRef:
    """A function named by its module and name, imported the first time it is called.

    What a :class:`Verb` runs (and its ``error_details``): declaring a verb then costs a string, and
    the verb's module, with everything it imports, loads only when that verb runs.
    """

    module: str
    name: str

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return resolve(self)(*args, **kwargs)

    def __str__(self) -> str:
        return f"{self.module}:{self.name}"


def lazy(module: str, name: str) -> LazyRef:
    """The function ``name`` of ``module``, imported when called (``lazy(_INSPECT, "cmd_inspect")``)."""
    return LazyRef(module, name)


def resolve(function: Callable[..., Any]) -> Callable[..., Any]:
    """The function itself: a :class:`LazyRef` imported (an ``AttributeError`` if it names nothing there)."""
    if isinstance(function, LazyRef):
        target: Callable[..., Any] = getattr(importlib.import_module(function.module), function.name)
        return target
    return function


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
    run
        The function that runs the verb, usually a :func:`lazy` reference to it: the module holding it is
        imported when the verb runs, not when the parser is built (``--help`` stays cheap).
    also_in
        Names of :class:`VerbGroup` s that offer this verb as an action (``index`` is ``labelmap index``):
        the group's spelling is the verb's name; the top-level one still runs, hidden from ``--help``,
        as a deprecated alias.
    hidden
        Left out of the parent's ``--help`` (deprecated spellings).
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
    hidden: bool = False
    usage: str | None = None


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


# -- old spellings ------------------------------------------------------------------------------------------
def deprecated(verb: Verb, old: str, new: str) -> Verb:
    """``verb`` under its old top-level name ``old``: hidden from ``--help``, it runs the same after one line
    on stderr naming ``new``."""
    def run(args: argparse.Namespace) -> int:
        print(f"shardscope {old}: deprecated spelling, use 'shardscope {new}' (same arguments)", file=sys.stderr)
        return verb.run(args)

    return replace(verb, name=old, run=run, help=f"deprecated: use '{new}'", also_in=(), hidden=True)


class _DeprecatedOption(argparse.Action):
    """An old option name: stores into the new option's ``dest`` after one line on stderr naming the new one."""

    def __init__(self, option_strings: Sequence[str], dest: str, replacement: str = "", **kwargs: Any) -> None:
        self.replacement = replacement
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(f"{parser.prog}: {option_string} is deprecated, use {self.replacement}", file=sys.stderr)
        setattr(namespace, self.dest, self.const if self.nargs == 0 else values)


def deprecated_option(old: str, new: str, *, dest: str, switch: bool = False) -> Arg:
    """The old name ``old`` of option ``new`` (same ``dest``): hidden from ``--help``, it still works.

    ``switch``: the option takes no value (``--force`` for ``--overwrite``).
    """
    options: dict[str, Any] = {"dest": dest, "action": _DeprecatedOption, "replacement": new,
                               "default": argparse.SUPPRESS, "help": argparse.SUPPRESS}
    if switch:
        options.update(nargs=0, const=True)
    return arg(old, **options)


# -- help texts ---------------------------------------------------------------------------------------------
def exit_codes_table() -> str:
    """The exit codes and their meaning, one per line (``shardscope --help``'s epilog)."""
    return "exit codes:\n" + "\n".join(f"  {code:>2}  {word}: {sentence}" for code, word, sentence in EXIT_MEANINGS)


#: The line every verb's ``--help`` ends with.
EXIT_CODES_LINE = ("exit codes: " + ", ".join(f"{code} {word}" for code, word, _ in EXIT_MEANINGS)
                   + " (shardscope --help explains them)")


def build_parser(extra_modules: Iterable[str] = ()) -> argparse.ArgumentParser:
    """The full ``shardscope`` parser: the core verbs, then those of ``extra_modules``."""
    parser = _Parser(
        prog="shardscope",
        description="Inspect, open and proofread sharded connectomics volumes "
        "(Neuroglancer precomputed, Zarr v3 sharding_indexed, N5).",
        epilog=exit_codes_table() + "\n\nEvery voxel is typed and printed z,y,x from 0 (the reader's array index); "
        "byte ranges are [start, end).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
    p = sub.add_parser(group.name, help=group.help, description=group.description, epilog=EXIT_CODES_LINE)
    actions = p.add_subparsers(dest=f"{group.name}_command", metavar="ACTION", parser_class=_Parser)
    actions.required = True
    for verb in group.verbs:
        _add_verb(actions, verb, f"{group.name} {verb.name}")
    return actions


def _add_verb(sub: Any, verb: Verb, full_name: str) -> None:
    if verb.also_in and " " not in full_name:  # the top-level spelling of a group's verb: the old one
        verb = deprecated(verb, verb.name, f"{verb.also_in[0]} {verb.name}")
    epilog = f"{verb.epilog}\n\n{EXIT_CODES_LINE}" if verb.epilog else EXIT_CODES_LINE
    # a hidden verb gets no help= at all: argparse would list it (as "==SUPPRESS==") even with SUPPRESS
    listed = {} if verb.hidden else {"help": verb.help}
    p = sub.add_parser(verb.name, **listed, description=verb.description or verb.help, epilog=epilog,
                       usage=verb.usage)
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
