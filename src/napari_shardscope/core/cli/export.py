"""``shardscope export`` and ``shardscope index``: the Dask jobs over whole volumes.

``export`` materialises a volume (or a labelmap version) as a new sharded precomputed or OME-Zarr v3
volume; ``index`` counts a labelmap's base segmentation into its label index. Both run as Dask
graphs: the threaded scheduler by default, or a ``dask.distributed`` scheduler given with
``--scheduler tcp://host:8786``; progress on stderr.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from napari_shardscope.core.cli.common import (
    print_json,
    progress_unless_quiet,
    read_argument_file,
)
from napari_shardscope.core.encoding import DEFAULT_GZIP_LEVEL as DEFAULT_VOLUME_GZIP
from napari_shardscope.core.errors import EXIT_OK, ArgumentError, MetadataError
from napari_shardscope.core.export.precomputed import export_precomputed
from napari_shardscope.core.export.source import ExportSource, LabelmapSource, VolumeSource, labelmap_source
from napari_shardscope.core.export.zarr3 import export_zarr3
from napari_shardscope.core.formats.precomputed.sharding import ShardingSpec, parse_sharding_spec
from napari_shardscope.core.json_document import load_json
from napari_shardscope.core.labelmap.opening import index_meta
from napari_shardscope.core.versioned import open_repository
from napari_shardscope.core.versioned.repository import MARKER_FILE


def export_source(args: argparse.Namespace) -> ExportSource:
    """A volume, or a labelmap version of the repository at SOURCE (``--labelmap``, default its only one)."""
    is_repo = (Path(args.source) / MARKER_FILE).is_file()
    if not is_repo:
        given = [opt for opt, value in (("--labelmap", args.labelmap), ("--version", args.version),
                                        ("--supervoxels", args.supervoxels), ("--allow-open", args.allow_open))
                 if value]
        if given:
            raise ArgumentError(f"{', '.join(given)}: only for a labelmap export, with SOURCE a repository "
                                f"directory; {args.source} is not one")
        return VolumeSource(args.source)
    name = args.labelmap or only_labelmap(args.source)
    return labelmap_source(args.source, name, args.version or "main",
                           labels="supervoxels" if args.supervoxels else "bodies", allow_open=args.allow_open)


def only_labelmap(path: str) -> str:
    """The repository's one labelmap instance (what ``--labelmap`` defaults to), or a bad argument naming them."""
    with open_repository(path) as repo:
        names = [i.name for i in repo.instances() if i.type == "labelmap"]
    if len(names) != 1:
        raise ArgumentError(f"{path} holds {len(names)} labelmaps ({', '.join(names) or 'none'}): "
                            "name one with --labelmap LABELMAP")
    return names[0]


def parse_sharding_option(text: str) -> ShardingSpec | list[ShardingSpec]:
    """``--sharding``: a spec object, a list of one spec per scale, or ``@FILE`` holding either.

    Raises
    ------
    ArgumentError
        Naming the file or the option and what is wrong (the spec's own field errors included).
    """
    where = "--sharding"
    document: str | bytes = text
    if text.startswith("@"):
        where = text[1:]
        document = read_argument_file(where, "--sharding")
    try:
        obj = load_json(document, key=where)
        if isinstance(obj, list):
            return [parse_sharding_spec(o, key=where, where=f"sharding[{i}]") for i, o in enumerate(obj)]
        return parse_sharding_spec(obj, key=where)
    except MetadataError as exc:
        raise ArgumentError(str(exc)) from exc


def _zyx(shape: list[int] | None, xyz: bool) -> tuple[int, int, int] | None:
    if shape is None:
        return None
    a, b, c = shape
    return (c, b, a) if xyz else (a, b, c)


def cmd_export(args: argparse.Namespace) -> int:
    if args.annotations is not None:
        return cmd_export_annotations(args)
    annotation_only = [opt for opt, value in (("--geometry", args.geometry), ("--unsharded", args.unsharded),
                                              ("--properties", args.properties), ("--tags", args.tags)) if value]
    if annotation_only:
        raise ArgumentError(f"{', '.join(annotation_only)}: only with --annotations INSTANCE")
    if args.format == "zarr3" and args.sharding is not None:
        raise ArgumentError("--sharding is a precomputed sharding spec; for --format zarr3 use --shard-shape")
    if args.format == "precomputed" and args.shard_shape is not None:
        raise ArgumentError("--shard-shape is for --format zarr3; for precomputed use --sharding or --shard-bytes")
    sharding = None if args.sharding is None else parse_sharding_option(args.sharding)
    source = export_source(args)
    progress = progress_unless_quiet(args, "export")
    common: dict[str, Any] = {
        "scheduler": args.scheduler,
        "num_workers": args.workers,
        "progress": progress,
        "overwrite": args.overwrite,
    }
    if args.shard_bytes is not None:
        common["shard_bytes"] = args.shard_bytes
    # --chunk and --shard-shape are z,y,x like every shape and voxel of the command line (x,y,z with --xyz)
    chunk_zyx = _zyx(args.chunk, args.xyz) or (64, 64, 64)
    if args.format == "precomputed":
        chunk_xyz = (chunk_zyx[2], chunk_zyx[1], chunk_zyx[0])  # the info file's order
        report = export_precomputed(source, args.dest, chunk_size=chunk_xyz, sharding=sharding,
                                    gzip_level=args.gzip_level, **common)
    else:
        report = export_zarr3(source, args.dest, inner_chunk=chunk_zyx, shard_shape=_zyx(args.shard_shape, args.xyz),
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


def cmd_index(args: argparse.Namespace) -> int:
    """``shardscope index`` (and ``labelmap index``): the base label index as a Dask job."""
    from napari_shardscope.core.labelmap.index_job import build_label_index

    with open_repository(args.path) as repo:
        if index_meta(repo, args.name) is not None and not args.overwrite:
            meta = index_meta(repo, args.name)
            built = False
        else:
            build_label_index(repo, args.name, scheduler=args.scheduler, num_workers=args.workers,
                              progress=progress_unless_quiet(args, "index"), overwrite=args.overwrite)
            meta = index_meta(repo, args.name)
            built = True
    assert meta is not None
    if args.json:
        print_json({**meta, "built": built})
    else:
        state = "built" if built else "already built (--overwrite rebuilds it)"
        print(f"base index of {args.name} {state}: {meta['supervoxels']} supervoxels, {meta['voxels']} voxels, "
              f"largest id {meta['max_id']}")
    return EXIT_OK


def cmd_export_meshes(args: argparse.Namespace) -> int:
    """``shardscope export-meshes``: a version's changed bodies as sharded multilod Draco meshes."""
    from napari_shardscope.core.export.meshes import export_meshes
    from napari_shardscope.core.labelmap import open_labelmap

    name = args.labelmap or only_labelmap(args.path)
    with open_repository(args.path) as repo:
        lm = open_labelmap(repo, name)
        report = export_meshes(lm, args.version or "main", args.dest, bodies=args.bodies, overwrite=args.overwrite,
                               lod=args.lod, progress=progress_unless_quiet(args, "export-meshes"))
    if args.json:
        print_json(report.to_json())
    else:
        linked = f"; {report.linked_info} now names it as its mesh" if report.linked_info else ""
        print(f"wrote meshes of {len(report.bodies)} bodies ({report.shard_files} shard files, {report.bytes} bytes) "
              f"to {report.dest}{linked}")
    return EXIT_OK


#: Options of a volume export that an annotation export does not take (and the value meaning "not given").
_VOLUME_ONLY = (("--format", "format", "precomputed"), ("--chunk", "chunk", None), ("--sharding", "sharding", None),
                ("--shard-bytes", "shard_bytes", None), ("--gzip-level", "gzip_level", DEFAULT_VOLUME_GZIP),
                ("--shard-shape", "shard_shape", None), ("--scheduler", "scheduler", None),
                ("--workers", "workers", None), ("--xyz", "xyz", False), ("--supervoxels", "supervoxels", False))


def _names(text: str | None) -> list[str] | None:
    return None if text is None else [n for n in (t.strip() for t in text.split(",")) if n]


def cmd_export_annotations(args: argparse.Namespace) -> int:
    """``shardscope export REPO DEST --annotations INSTANCE``: a version's annotations as precomputed annotations."""
    from napari_shardscope.core.annotation import open_annotation_instance

    given = [opt for opt, name, unset in _VOLUME_ONLY if getattr(args, name, unset) != unset]
    if given:
        raise ArgumentError(f"{', '.join(given)}: options of a volume export, not of --annotations")
    if not (Path(args.source) / MARKER_FILE).is_file():
        raise ArgumentError(f"--annotations exports an annotation instance of a repository; {args.source} is not "
                            "a repository directory")
    with open_repository(args.source) as repo:
        syn = open_annotation_instance(repo, args.annotations)
        if args.labelmap is not None and args.labelmap != syn.labelmap.name:
            raise ArgumentError(f"annotation instance {args.annotations!r} is bound to labelmap "
                                f"{syn.labelmap.name!r}, not {args.labelmap!r}")
        version = syn.at(args.version or "main")
        if not version.version.locked and not args.allow_open:
            raise ArgumentError(f"version {version.version.short} is open (still editable): commit it, or pass "
                                "--allow-open to export it as it is now")
        report = version.export(args.dest, sharded=not args.unsharded, geometry=args.geometry or "lines",
                                properties=_names(args.properties), tags=_names(args.tags),
                                overwrite=args.overwrite, progress=progress_unless_quiet(args, "export"))
    if args.json:
        print_json(report.to_json())
    else:
        what = "synapse lines" if report.geometry == "lines" else "annotations"
        unpaired = f" ({report.unpaired} annotations in no pre->post pair left out)" if report.unpaired else ""
        print(f"wrote {report.written} {what} of {report.annotations} annotations of {report.instance} at "
              f"{report.version[:8]}{unpaired} to {report.url} ({report.write.files} files, "
              f"{report.write.bytes_written} bytes)")
    return EXIT_OK
