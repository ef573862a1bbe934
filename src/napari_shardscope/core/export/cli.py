"""``shardscope export``: materialise a volume as a new sharded precomputed or OME-Zarr v3 volume.

Runs as a Dask graph, one task per output shard: the threaded scheduler by default, or a
``dask.distributed`` scheduler given with ``--scheduler tcp://host:8786``. Progress on stderr.
"""

from __future__ import annotations

import argparse
from typing import Any

from napari_shardscope.core.cli import EXIT_OK, print_json
from napari_shardscope.core.export.precomputed import export_precomputed
from napari_shardscope.core.export.source import VolumeSource
from napari_shardscope.core.export.zarr3 import export_zarr3
from napari_shardscope.core.inspect_cli import StderrProgress, parse_coords


def register(sub: Any) -> None:
    p = sub.add_parser(
        "export",
        help="write a volume as a new sharded volume (precomputed or OME-Zarr v3)",
        description="Materialise a volume (any format `shardscope open` reads) as a new sharded precomputed "
        "volume or an OME-Zarr 0.5 group of sharding_indexed Zarr v3 arrays, every scale. One Dask task per "
        "output shard (no two tasks write one file); the threaded scheduler unless --scheduler names a "
        "dask.distributed scheduler.",
    )
    p.add_argument("source", help="volume path or URL to read")
    p.add_argument("dest", help="new directory (or writable URL) to create")
    p.add_argument("--format", choices=("precomputed", "zarr3"), default="precomputed")
    p.add_argument(
        "--chunk",
        type=parse_coords,
        metavar="X,Y,Z",
        help="chunk size (precomputed, x,y,z; default 64,64,64) or inner chunk (zarr3, z,y,x)",
    )
    p.add_argument(
        "--scheduler",
        metavar="ADDR",
        help="'threads' (default), 'sync' or a dask.distributed scheduler address like tcp://host:8786",
    )
    p.add_argument("--workers", type=int, metavar="N", help="threads for the threaded scheduler")
    p.add_argument("--overwrite", action="store_true", help="replace an existing dataset at DEST")
    p.add_argument("--json", action="store_true", help="machine-readable summary")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=cmd_export)


def cmd_export(args: argparse.Namespace) -> int:
    source = VolumeSource(args.source)
    progress = None if args.quiet else StderrProgress("export")
    common: dict[str, Any] = {
        "scheduler": args.scheduler,
        "num_workers": args.workers,
        "progress": progress,
        "overwrite": args.overwrite,
    }
    if args.format == "precomputed":
        report = export_precomputed(source, args.dest, chunk_size=args.chunk or (64, 64, 64), **common)
    else:
        report = export_zarr3(source, args.dest, inner_chunk=args.chunk or (64, 64, 64), **common)
    summary = report.to_json()
    if args.json:
        print_json(summary)
    else:
        print(
            f"wrote {summary['shard_files']} shard files ({summary['bytes']} bytes) for scales "
            f"{', '.join(summary['scales'])} to {summary['dest']}"
        )
    return EXIT_OK
