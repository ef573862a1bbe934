"""The ``shardscope`` command line: inspection commands and the assembly point for the rest.

Every capability of the library is scriptable. Conventions shared by all subcommands:

* ``--json`` prints machine-readable output on stdout;
* exit code 0 = ok, 1 = a check failed (e.g. ``validate`` found problems), 2 = bad arguments or
  a path that is not a dataset;
* errors go to stderr as one line.

Subcommands live next to the code they drive: a module registers its commands with a
``register(subparsers)`` function (see :data:`CORE_COMMAND_MODULES`). GUI commands (``open``,
``demo``) are registered by :mod:`napari_shardscope.cli`, outside ``core``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from napari_shardscope.core.errors import ArgumentError, NotADatasetError, ShardscopeError

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

#: Modules whose ``register(subparsers)`` adds subcommands, in ``--help`` order.
CORE_COMMAND_MODULES: tuple[str, ...] = (
    "napari_shardscope.core.inspect_cli",
    "napari_shardscope.core.versioned.cli",
    "napari_shardscope.core.export.cli",
    "napari_shardscope.core.labelmap.cli",
)

Handler = Callable[[argparse.Namespace], int]


class _Parser(argparse.ArgumentParser):
    """An argparse parser that exits with code 2 and a one-line message on bad arguments."""

    def error(self, message: str) -> Any:  # argparse's signature returns NoReturn
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def build_parser(extra_modules: Iterable[str] = ()) -> argparse.ArgumentParser:
    """The full ``shardscope`` parser: core commands plus those of ``extra_modules``."""
    parser = _Parser(
        prog="shardscope",
        description="Inspect, open and proofread sharded connectomics volumes "
        "(Neuroglancer precomputed, Zarr v3 sharding_indexed, N5).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name in (*CORE_COMMAND_MODULES, *extra_modules):
        importlib.import_module(name).register(sub)
    return parser


def print_json(obj: Any) -> None:
    """Write ``obj`` as JSON on stdout (one document, sorted keys for stable diffs)."""
    json.dump(obj, sys.stdout, indent=2, sort_keys=True, default=_json_default)
    sys.stdout.write("\n")


def _json_default(obj: Any) -> Any:
    import numpy as np

    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def run(argv: Sequence[str] | None = None, extra_modules: Iterable[str] = ()) -> int:
    """Parse ``argv`` and run the chosen subcommand; return the exit code."""
    parser = build_parser(extra_modules)
    args = parser.parse_args(argv)
    handler: Handler = args.func
    try:
        return handler(args)
    except (ArgumentError, NotADatasetError) as exc:
        print(f"shardscope {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ShardscopeError as exc:
        print(f"shardscope {args.command}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except BrokenPipeError:  # output piped into `head`
        return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point for the core (no GUI) commands."""
    return run(argv)
