"""``shardscope export``: materialise a volume as a new sharded precomputed or OME-Zarr v3 volume.

Runs as a Dask graph, one task per output shard: the threaded scheduler by default, or a
``dask.distributed`` scheduler given with ``--scheduler tcp://host:8786``. Progress on stderr.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from napari_shardscope.core.cli import EXIT_OK, print_json
from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.export.precomputed import export_precomputed
from napari_shardscope.core.export.source import ExportSource, LabelmapSource, VolumeSource, labelmap_source
from napari_shardscope.core.export.zarr3 import export_zarr3
from napari_shardscope.core.inspect_cli import StderrProgress, parse_coords
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
    p.add_argument("--labelmap", metavar="NAME",
                   help="SOURCE is a repository: export this labelmap instance at --version")
    p.add_argument("--version", metavar="REF", default="main",
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
        if is_repo:
            raise ArgumentError(f"{args.source} is a repository: name the labelmap to export with --labelmap NAME")
        return VolumeSource(args.source)
    if not is_repo:
        raise ArgumentError(f"--labelmap needs SOURCE to be a repository directory; {args.source} is not one")
    return labelmap_source(args.source, args.labelmap, args.version,
                           labels="supervoxels" if args.supervoxels else "bodies", allow_open=args.allow_open)


def cmd_export(args: argparse.Namespace) -> int:
    source = export_source(args)
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
