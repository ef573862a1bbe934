"""``shardscope export``: materialise a volume as a new sharded precomputed or OME-Zarr v3 volume.

Runs as a Dask graph, one task per output shard: the threaded scheduler by default, or a
``dask.distributed`` scheduler given with ``--scheduler tcp://host:8786``. Progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from napari_shardscope.core.cli import EXIT_OK, print_json
from napari_shardscope.core.errors import ArgumentError, MetadataError
from napari_shardscope.core.export.precomputed import export_precomputed
from napari_shardscope.core.export.source import ExportSource, LabelmapSource, VolumeSource, labelmap_source
from napari_shardscope.core.export.zarr3 import export_zarr3
from napari_shardscope.core.formats.precomputed.sharding import ShardingSpec, parse_sharding_spec
from napari_shardscope.core.inspect_cli import StderrProgress, parse_coords, parse_positive_int
from napari_shardscope.core.versioned.repository import MARKER_FILE


def register(sub: Any) -> None:
    p = sub.add_parser(
        "export",
        help="write a volume as a new sharded volume (precomputed or OME-Zarr v3)",
        description="Materialise a volume (any format `shardscope open` reads) as a new sharded precomputed "
        "volume or an OME-Zarr 0.5 group of sharding_indexed Zarr v3 arrays, every scale. One Dask task per "
        "output shard (no two tasks write one file); the threaded scheduler unless --scheduler names a "
        "dask.distributed scheduler.",
    )
    p.add_argument("source", help="volume path or URL to read, or a repository directory (with --labelmap)")
    p.add_argument("dest", help="new directory (or writable URL) to create")
    p.add_argument("--format", choices=("precomputed", "zarr3"), default="precomputed")
    p.add_argument(
        "--chunk",
        type=parse_shape,
        metavar="X,Y,Z",
        help="chunk size (precomputed, x,y,z; default 64,64,64) or inner chunk (zarr3, z,y,x)",
    )
    p.add_argument(
        "--sharding",
        metavar="JSON",
        help="precomputed: the sharding spec of every scale, as in an info file "
        '(\'{"@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 9, "hash": "murmurhash3_x86_128", ...}\'), '
        "a JSON list of one spec per scale, or @FILE holding either (default: identity hash + preshift, "
        "about 1000 chunks per minishard)",
    )
    p.add_argument(
        "--shard-bytes",
        type=parse_size,
        metavar="SIZE",
        help="target uncompressed bytes per shard for the default sharding, e.g. 512M or 2G (default 2G)",
    )
    p.add_argument(
        "--shard-shape",
        type=parse_shape,
        metavar="Z,Y,X",
        help="zarr3: the shard shape in voxels, whole inner chunks "
        "(default: grown from the inner chunk to --shard-bytes)",
    )
    p.add_argument(
        "--scheduler",
        metavar="ADDR",
        help="'threads' (default), 'sync' or a dask.distributed scheduler address like tcp://host:8786",
    )
    p.add_argument("--workers", type=parse_positive_int, metavar="N", help="threads for the threaded scheduler")
    p.add_argument("--overwrite", action="store_true", help="replace an existing dataset at DEST")
    p.add_argument("--labelmap", metavar="NAME",
                   help="SOURCE is a repository: export this labelmap instance at --version")
    p.add_argument("--version", metavar="REF",
                   help="version to export (branch name = its head, or a UUID prefix; default main)")
    p.add_argument("--supervoxels", action="store_true",
                   help="export supervoxel ids (the base patched by splits) instead of body ids")
    p.add_argument("--allow-open", action="store_true",
                   help="export an open (uncommitted) version as it is now (default: committed versions only)")
    p.add_argument("--json", action="store_true", help="machine-readable summary")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=cmd_export)


def export_source(args: argparse.Namespace) -> ExportSource:
    """A volume, or with ``--labelmap`` a labelmap version of the repository at SOURCE."""
    is_repo = (Path(args.source) / MARKER_FILE).is_file()
    if args.labelmap is None:
        given = [opt for opt, value in (("--version", args.version), ("--supervoxels", args.supervoxels),
                                        ("--allow-open", args.allow_open)) if value]
        if given:
            raise ArgumentError(f"{', '.join(given)}: only for a labelmap export; add --labelmap NAME "
                                "(with SOURCE a repository directory)")
        if is_repo:
            raise ArgumentError(f"{args.source} is a repository: name the labelmap to export with --labelmap NAME")
        return VolumeSource(args.source)
    if not is_repo:
        raise ArgumentError(f"--labelmap needs SOURCE to be a repository directory; {args.source} is not one")
    return labelmap_source(args.source, args.labelmap, args.version or "main",
                           labels="supervoxels" if args.supervoxels else "bodies", allow_open=args.allow_open)


_SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> int:
    """``"512M"`` → 536870912: a positive byte count with an optional K/M/G/T (binary) suffix."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = t[-1:] if t[-1:] in _SIZE_UNITS else ""
    try:
        number = float(t[: len(t) - len(unit)]) * _SIZE_UNITS[unit]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a size like 512M or 2G, got {text!r}") from exc
    if not math.isfinite(number):  # "inf", "nan", "1e400": float() accepts them, int() does not
        raise argparse.ArgumentTypeError(f"expected a finite size like 512M or 2G, got {text!r}")
    value = int(number)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"a size must be positive, got {text!r}")
    return value


def parse_shape(text: str) -> list[int]:
    """``"64,64,32"`` → ``[64, 64, 32]``: exactly three positive integers (a chunk or shard shape)."""
    values = parse_coords(text)
    if len(values) != 3 or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"expected 3 positive integers like 64,64,64, got {text!r}")
    return values


def parse_sharding_option(text: str) -> ShardingSpec | list[ShardingSpec]:
    """``--sharding``: a spec object, a list of one spec per scale, or ``@FILE`` holding either.

    Raises
    ------
    ArgumentError
        Naming the file or the option and what is wrong (the spec's own field errors included).
    """
    where = "--sharding"
    if text.startswith("@"):
        path = Path(text[1:])
        where = str(path)
        try:
            text = path.read_text()
        except OSError as exc:
            raise ArgumentError(f"--sharding: cannot read {path}: {exc.strerror or exc}") from exc
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ArgumentError(f"{where}: not JSON: {exc}") from exc
    try:
        if isinstance(obj, list):
            return [parse_sharding_spec(o, key=where, where=f"sharding[{i}]") for i, o in enumerate(obj)]
        return parse_sharding_spec(obj, key=where)
    except MetadataError as exc:
        raise ArgumentError(str(exc)) from exc


def cmd_export(args: argparse.Namespace) -> int:
    if args.format == "zarr3" and args.sharding is not None:
        raise ArgumentError("--sharding is a precomputed sharding spec; for --format zarr3 use --shard-shape")
    if args.format == "precomputed" and args.shard_shape is not None:
        raise ArgumentError("--shard-shape is for --format zarr3; for precomputed use --sharding or --shard-bytes")
    sharding = None if args.sharding is None else parse_sharding_option(args.sharding)
    source = export_source(args)
    progress = None if args.quiet else StderrProgress("export")
    common: dict[str, Any] = {
        "scheduler": args.scheduler,
        "num_workers": args.workers,
        "progress": progress,
        "overwrite": args.overwrite,
    }
    if args.shard_bytes is not None:
        common["shard_bytes"] = args.shard_bytes
    if args.format == "precomputed":
        report = export_precomputed(source, args.dest, chunk_size=args.chunk or (64, 64, 64), sharding=sharding,
                                    **common)
    else:
        report = export_zarr3(source, args.dest, inner_chunk=args.chunk or (64, 64, 64), shard_shape=args.shard_shape,
                              **common)
    summary = report.to_json()
    if isinstance(source, LabelmapSource):
        summary["source"] = {"repository": source.repository, "labelmap": source.instance,
                             "version": source.version, "labels": source.labels}
    if args.json:
        print_json(summary)
    else:
        print(
            f"wrote {summary['shard_files']} shard files ({summary['bytes']} bytes) for scales "
            f"{', '.join(summary['scales'])} to {summary['dest']}"
        )
    return EXIT_OK
