"""GUI subcommands of ``shardscope``: ``open`` and ``demo``.

Declared like the core verbs (a ``VERBS`` tuple for :mod:`napari_shardscope.core.cli.parser`) and
added to the parser by :data:`napari_shardscope.cli.GUI_VERB_MODULES`. Volumes are opened (metadata
only) *before* napari is imported, so a bad path fails in a fraction of a second with a one-line
error and the exit code of its group (3: not found) instead of after a window has appeared. They
print nothing to parse, so they take no ``--json``.

Usage::

    shardscope open PATH_OR_URL... [--screenshot out.png] [--cache-mb 1024] [--sync | --async]
    shardscope demo [--screenshot out.png]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from napari_shardscope.core.cli.parser import Arg, OneOf, Verb, arg
from napari_shardscope.core.errors import EXIT_OK, ArgumentError


def _slicing(args: argparse.Namespace) -> bool | None:
    """``--sync`` / ``--async`` as asked; ``None``: asynchronous only for remote volumes (see viewer.py)."""
    return False if args.sync else (True if args.async_slicing else None)


def _apply_cache(args: argparse.Namespace) -> None:
    if args.cache_mb is None:
        return
    if args.cache_mb < 0:
        raise ArgumentError(f"--cache-mb must be >= 0, got {args.cache_mb}")
    from napari_shardscope.core.volumes import set_cache_pool_size

    set_cache_pool_size(int(args.cache_mb * 1024 * 1024))


def neuroglancer_state_text(path: str) -> str | None:
    """The Neuroglancer state text ``path`` holds: a link (``#!{…}``, ``#!<URL of a state>``) or a state JSON file."""
    if "#!" in path or path.lstrip().startswith("{"):
        return path
    if path.endswith(".json") and "://" not in path:
        file = Path(path)
        if file.is_file() and file.stat().st_size < (64 << 20) and file.name not in ("zarr.json", "attributes.json"):
            text = file.read_text(encoding="utf-8", errors="replace")
            if '"layers"' in text:
                return text
    return None


def run_open(args: argparse.Namespace) -> int:
    """``shardscope open``: open every PATH (or the sources of a Neuroglancer link / state file), then show them."""
    import sys

    from napari_shardscope.core.serve.ngstate import parse_state
    from napari_shardscope.core.serve.states import load_state
    from napari_shardscope.core.volumes import open_volumes
    from napari_shardscope.napari_plugin.viewer import show_volumes

    _apply_cache(args)
    volumes = []
    states = []
    for path in args.paths:
        text = neuroglancer_state_text(path)
        if text is None:
            volumes.extend(open_volumes(path))
            continue
        parsed = parse_state(load_state(text))
        for s in parsed.not_opened:
            print(f"shardscope open: not opened: layer {s.layer!r} ({s.url or 'no source'}): {s.reason}",
                  file=sys.stderr)
        for problem in parsed.problems:
            print(f"shardscope open: {problem}", file=sys.stderr)
        for s in parsed.openable:
            assert s.open_url is not None
            volumes.extend(open_volumes(s.open_url))
        states.append(parsed)
    if not volumes:
        raise ArgumentError("nothing to open: the Neuroglancer state has no source the project can read")
    prepare = None
    if states:
        from napari_shardscope.napari_plugin.neuroglancer import apply_state

        def prepare(viewer: object, layers: list[object]) -> None:
            apply_state(viewer, states[0], layers)

    show_volumes(volumes, screenshot=args.screenshot, async_slicing=_slicing(args), prepare=prepare)
    return EXIT_OK


def run_demo(args: argparse.Namespace) -> int:
    """``shardscope demo``: the sample dataset, generated on first use, then shown."""
    from napari_shardscope.napari_plugin.sample import sample_volumes
    from napari_shardscope.napari_plugin.viewer import show_volumes

    _apply_cache(args)
    show_volumes(sample_volumes(), screenshot=args.screenshot, async_slicing=_slicing(args),
                 title="shardscope demo")
    return EXIT_OK


#: How the window is shown: for both verbs.
_VIEW: tuple[Arg | OneOf, ...] = (
    arg("--screenshot", type=Path, metavar="FILE",
        help="render one frame to FILE (PNG) and exit, e.g. on a machine without a screen (run under xvfb-run -a)"),
    arg("--cache-mb", type=float, metavar="MB",
        help="TensorStore cache pool size in MiB (default: $SHARDSCOPE_CACHE_MB, else an eighth of the available "
        "memory, 256 MiB to 4 GiB)"),
    OneOf((arg("--sync", action="store_true",
        help="slice on the GUI thread (default for local volumes: a z step reads prefetched chunks in ~1-2 ms, "
        "so the frame comes sooner than through napari's slicing thread)"),
    arg("--async", dest="async_slicing", action="store_true",
        help="napari's asynchronous slicing: the window stays responsive while chunks load (default when a volume "
        "is remote)"))),
)

VERBS = (
    Verb("open", run_open, "open volumes in napari (precomputed, zarr v3 / OME-Zarr, N5; paths or URLs)",
         (arg("paths", nargs="+", metavar="PATH", help="volume path or URL, or a Neuroglancer link / state file"),
          *_VIEW),
         description="Open one or more volumes lazily in napari: only the chunks on screen are read. PATH may be "
         "a local directory, file://, http(s)://, gs:// or s3:// URL, optionally prefixed precomputed://, zarr3:// "
         "or n5://; or a Neuroglancer link ('https://…#!{…}', quoted) or a state JSON file: its readable sources "
         "open at its position, zoom and selected segments, and the sources it could not open are named.",
         machine_output=False),
    Verb("demo", run_demo, "open the synthetic EM sample (generated into the cache on first use)", _VIEW,
         description="Generate (once) and open a synthetic EM image with its supervoxel segmentation, stored as "
         "sharded precomputed.", machine_output=False),
)
