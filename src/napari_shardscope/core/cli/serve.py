"""``shardscope serve``: hand datasets or a labelmap version to Neuroglancer from a loopback server.

Usage::

    shardscope serve DATASET|REPO... [--version REF] [--labelmap LABELMAP] [--port N] [--print-url] [--json]
                     [--segments ID,ID] [--cors ORIGIN]... [--equivalences]
                     [--annotations NAME,NAME | --no-annotations]

Prints the Neuroglancer link (``--json``: one JSON line with the link and the state, flushed at once
so a script can read it from a pipe while the server runs) and serves until Ctrl-C or SIGTERM (both stop it
cleanly: the annotation layers it generated are removed, exit status 0);
``--print-url`` prints the link and exits without serving. ``--equivalences`` prints, instead of
serving, a link to the hosted Neuroglancer with a state over the base itself and a merge-only
version's merges as ``equivalences`` (for a remote public base: no server needed). A repository's
annotation instances bound to the served labelmap (``--annotations`` names some) are served beside the
version as precomputed annotation layers linked to its segmentation layer.

The link opens the Neuroglancer client served by the server itself (same origin), so no other web
page may read what is served; ``--cors ORIGIN`` (repeatable) lets a Neuroglancer at that origin
(one the user runs, or a hosted one) read it too.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType

from napari_shardscope.core.cli.common import emit, print_json, print_json_line
from napari_shardscope.core.errors import EXIT_OK, ArgumentError


def _segments(text: str | None) -> tuple[int, ...]:
    if not text:
        return ()
    try:
        return tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError as exc:
        raise ArgumentError(f"--segments takes comma-separated body ids, got {text!r}") from exc


def _names(text: str | None) -> tuple[str, ...] | None:
    return None if text is None else tuple(n for n in (t.strip() for t in text.split(",")) if n)


#: The hosted Neuroglancer a merge-only hand-off links to (it reads the public base itself).
PUBLIC_CLIENT = "https://neuroglancer-demo.appspot.com/"


def run_serve(args: argparse.Namespace) -> int:
    from napari_shardscope.core.serve.handoff import serve

    if args.equivalences:
        if args.cors:
            raise ArgumentError("--cors applies to what is served; --equivalences serves nothing (the hosted "
                                "Neuroglancer reads the remote base itself)")
        return _print_equivalences(args)
    # Ctrl-C or SIGTERM stops serving with exit 0 from the moment the server runs, the link's printing included:
    # a stop that came between the link and the wait (a script that reads the link, then stops the server at
    # once) used to end the process by the signal (exit -2) instead.
    with contextlib.suppress(KeyboardInterrupt), _terminate_as_interrupt():
        handoff = serve(args.targets, version=args.version, instance=args.instance, port=args.port,
                        segments=_segments(args.segments), cors=args.cors or (),
                        annotations=() if args.no_annotations else _names(args.annotations))
        try:
            if args.json:  # one line, flushed: a script reads it with readline() while the server runs
                print_json_line({"url": handoff.url, "server": handoff.server.url, "state": handoff.state,
                                 "serving": not args.print_url})
            else:
                emit(handoff.url)
            if args.print_url:
                return EXIT_OK
            if not args.json:
                print(f"serving on {handoff.server.url} until Ctrl-C", file=sys.stderr, flush=True)
            threading.Event().wait()
        finally:
            handoff.stop()
    return EXIT_OK


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM (``kill``, a service manager's or a script's stop) ends serving as Ctrl-C does.

    Why: SIGTERM's default action ends the process at once, without ``handoff.stop()``: the annotation
    layers generated for the link stayed in the temporary directory after every stop that was not a
    Ctrl-C. Only the main thread may set a handler; elsewhere (``run_serve`` called from a thread) the
    caller's handling stands.
    """

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _print_equivalences(args: argparse.Namespace) -> int:
    from napari_shardscope.core.serve.handoff import is_repository, labelmap_of
    from napari_shardscope.core.serve.ngstate import LayerView, ViewDescription, build_state, state_url
    from napari_shardscope.core.serve.version_source import merge_equivalences
    from napari_shardscope.core.versioned import open_repository

    if len(args.targets) != 1 or not is_repository(args.targets[0]):
        raise ArgumentError("--equivalences takes one repository")
    repo = open_repository(args.targets[0])
    try:
        lm = labelmap_of(repo, args.instance)
        base = lm.config.base
        if "://" not in base or base.startswith("file://"):
            raise ArgumentError(f"the base {base} is local: Neuroglancer elsewhere cannot read it; serve the version")
        groups = merge_equivalences(lm, args.version or "main")
        g = lm.config.scales[0]
        center = tuple(g.translate[i] + g.voxel_size[i] * (g.shape[i] // 2) for i in range(3))
        layer = LayerView(lm.name, "segmentation", base if base.split("://", 1)[0] in (
            "precomputed", "zarr", "zarr3", "n5") else f"precomputed://{base}", "precomputed",
            segments=_segments(args.segments), equivalences=tuple(tuple(x) for x in groups))
        width = g.shape[2] * g.voxel_size[2]
        view = ViewDescription((layer,), (center[0], center[1], center[2]), g.voxel_size, 800 / width)
        state = build_state(view)
    finally:
        repo.close()
    url = state_url(PUBLIC_CLIENT, state)
    if args.json:
        print_json({"url": url, "state": state, "groups": len(groups)})
    else:
        print(url)
    return EXIT_OK
