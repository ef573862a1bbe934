"""``run(argv)``: parse a ``shardscope`` command line, run the verb, turn what it raised into an exit code.

Conventions every verb shares, enforced here once:

* ``--json`` prints machine-readable output on stdout, and an error as
  ``{"error": {"group": ..., "message": ..., "key": ..., "offset": ...}}``;
* the exit code comes from :func:`napari_shardscope.core.errors.exit_code_for` and nowhere else:
  0 ok, 1 a check found problems (``validate``, ``repo verify``), 2 bad argument, 3 not found,
  4 corrupt data, 5 unsupported feature, 6 refused write, 7 conflict, 8 store I/O, 70 a bug;
* an error is one line on stderr, ``shardscope VERB: message``; an exception that is not ours (a
  bug) is one line too, ``shardscope VERB: internal error: TYPE: message``; ``SHARDSCOPE_DEBUG=1``
  prints the traceback before the line.

The verbs are declared by the modules :mod:`.parser` lists; the GUI verbs (``open``, ``demo``) by
:mod:`napari_shardscope.napari_plugin.cli`, which :mod:`napari_shardscope.cli` (the console script)
passes as an extra module so that ``core`` never imports napari.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import sys
import traceback
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from napari_shardscope.core.cli.common import print_json
from napari_shardscope.core.cli.parser import ErrorDetails, Handler, UsageError, build_parser
from napari_shardscope.core.errors import EXIT_OK, Remedy, ShardscopeError, exit_code_for, group_name

#: Set to ``1`` to see the traceback of an internal error (a bug) as well as its one line.
DEBUG_VARIABLE = "SHARDSCOPE_DEBUG"


def run(argv: Sequence[str] | None = None, extra_modules: Iterable[str] = ()) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``), run the chosen verb and return its exit code.

    Never raises for a bad command line or a failed verb: both become an exit code and a line on
    stderr, as a shell would see them (``--help`` and ``--version`` return 0 after printing).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = parser_for(tuple(extra_modules))
    try:
        args, unknown = parser.parse_known_args(argv)
        if unknown:  # named by the verb's own parser (argparse would blame the top-level one)
            args.verb_parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    except UsageError as exc:
        sys.stderr.write(exc.usage)
        return report_error(exc, f"{exc.prog}: error", as_json="--json" in argv)
    except SystemExit as exc:  # --help, --version
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    handler: Handler = args.func
    try:
        from napari_shardscope.core.bytestore import follow_symlinks  # the store, for a verb about to use it

        links = follow_symlinks(True) if getattr(args, "follow_symlinks", False) else contextlib.nullcontext()
        apply_global_options(args)
        with links:
            return handler(args)
    except BrokenPipeError:  # output piped into `head`
        return EXIT_OK
    except Exception as exc:
        return report_error(exc, f"shardscope {args.verb}", as_json=args.json, details=args.error_details,
                            parser=args.verb_parser)


@functools.lru_cache(maxsize=4)
def parser_for(extra_modules: tuple[str, ...]) -> argparse.ArgumentParser:
    """The parser of :func:`run`, built once per process and set of extra verb modules.

    Building it declares every verb's sub-parser (about 70, each with its options): 20 ms of CPU, which a
    program calling :func:`run` many times (a notebook, the fuzz suite's 800 command lines per seeded run)
    paid on every call. Parsing does not change the parser (argparse writes only to the namespace it
    returns, copying list defaults), and what a verb runs is a :class:`~.parser.LazyRef` resolved when it
    runs, so one parser serves every call.
    """
    return build_parser(extra_modules)


def apply_global_options(args: Any) -> None:
    """Apply the options that come before the verb (``--timeout``, ``--retries``) to the shared context.

    Done before the verb runs, so the timeout reaches TensorStore before its first HTTP request.
    """
    from napari_shardscope.core.bytestore.context import remote_limits, set_remote_limits

    if args.timeout is not None or args.retries is not None:
        set_remote_limits(args.timeout, args.retries)
    else:
        remote_limits()  # a bad SHARDSCOPE_TIMEOUT_S / SHARDSCOPE_RETRIES is an argument error now, not mid-read


def option_spelling(parser: argparse.ArgumentParser | None) -> Callable[[Remedy], str]:
    """How the command line spells an error's :class:`~napari_shardscope.core.errors.Remedy`: the verb's own
    option for that argument (``overwrite`` → ``--overwrite``, ``instance`` → ``--labelmap LABELMAP``), never
    the library's ``overwrite=True``."""

    def spell(remedy: Remedy) -> str:
        flag = "--" + remedy.name.replace("_", "-")
        value = None if remedy.value is True else str(remedy.value)
        for action in parser._actions if parser is not None else ():
            if action.dest == remedy.name and action.option_strings and action.help is not argparse.SUPPRESS:
                flag = max(action.option_strings, key=len)
                value = None if action.nargs == 0 else str(action.metavar or value or "VALUE")
                break
        return flag if value is None else f"{flag} {value}"

    return spell


def report_error(exc: Exception, prefix: str, *, as_json: bool, details: ErrorDetails | None = None,
                 parser: argparse.ArgumentParser | None = None) -> int:
    """Print ``exc`` as one line on stderr (and as a JSON document on stdout with ``--json``); its exit code.

    An error that names a remedy says it in the command line's words (the option of ``parser``, the verb's).
    """
    ours = isinstance(exc, ShardscopeError)
    debug = os.environ.get(DEBUG_VARIABLE, "") not in ("", "0")
    text = exc.rendered(option_spelling(parser)) if isinstance(exc, ShardscopeError) else str(exc)
    message = one_line(text)
    if debug:
        traceback.print_exception(exc, file=sys.stderr)
    if ours:
        line = f"{prefix}: {message}"
    else:
        kind = type(exc).__qualname__
        if type(exc).__module__ != "builtins":
            kind = f"{type(exc).__module__}.{kind}"
        line = f"{prefix}: internal error: {kind}: {message}"
        if not debug:
            line += f" (run with {DEBUG_VARIABLE}=1 for the traceback)"
    print(line, file=sys.stderr)
    if as_json:
        doc: dict[str, Any] = {}
        if isinstance(exc, ShardscopeError) and details is not None:
            doc.update(details(exc))
        key = getattr(exc, "key", None) or getattr(exc, "path", None)  # a storage fault names its path
        doc["error"] = {"group": group_name(exc), "message": text, "key": _json_scalar(key),
                        "offset": _json_scalar(getattr(exc, "offset", None))}
        print_json(doc)
    return exit_code_for(exc)


def one_line(text: str) -> str:
    """A message on one line: its lines joined with ``"; "`` (stderr errors are one line each)."""
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())


def _json_scalar(value: object) -> str | int | None:
    if value is None or isinstance(value, (str, int)):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    return str(value)

