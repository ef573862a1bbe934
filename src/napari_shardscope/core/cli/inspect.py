"""``shardscope inspect | locate | ls | validate``: what is inside the shards of a dataset.

Coordinate conventions (also in ``--help``): ``locate --voxel`` takes z,y,x as the reader (napari,
``open_volume``, ``shardscope label``) indexes the volume, from 0 at its first voxel, whatever the
format stores; ``--xyz`` takes Neuroglancer's x,y,z, absolute (a precomputed ``voxel_offset``
included). Records report positions as the format stores them (``voxel``, ``grid_position``: x,y,z
for precomputed and N5, ``shape`` order for zarr), and ``voxel_zyx`` in the reader's order.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from napari_shardscope.core.cli.common import (
    emit,
    print_json,
    print_json_line,
    progress_unless_quiet,
)
from napari_shardscope.core.errors import EXIT_CHECK_FAILED, EXIT_OK, ArgumentError
from napari_shardscope.core.formats import Dataset, DatasetInspector, open_dataset


def cmd_inspect(args: argparse.Namespace) -> int:
    inspector = open_dataset(args.path).inspector()
    result = inspector.inspect(args.scale)
    if args.json:
        print_json(result)
    else:
        print_inspect(result)
    return EXIT_OK


#: Fields shown on a scale's first line, in this order, when the format has them.
_GEOMETRY = (
    "size",
    "shape",
    "dimensions",
    "voxel_offset",
    "resolution",
    "chunk_size",
    "chunk_shape",
    "shard_shape",
    "inner_chunk_shape",
    "blockSize",
    "grid_shape",
    "encoding",
    "data_type",
    "dataType",
)
_SUMMARY = (
    "shards_present",
    "num_shards",
    "chunk_files",
    "chunks_present",
    "num_chunks",
    "chunks",
    "data_bytes",
    "manifest_bytes",
    "fragment_bytes",
    "shards",
    "sharding",
    "key",
    "path",
    "compression",
    "codecs",
    "index_codecs",
    "bytes_read",
    "requests",
)


def print_inspect(result: dict[str, Any]) -> None:
    """Human summary: one block per scale, one line per shard file."""
    head = f"{result.get('format')}  {result.get('url')}"
    if "type" in result:
        head += f"  {result['type']} {result.get('data_type')} x{result.get('num_channels')}"
    print(head)
    if isinstance(result.get("annotations"), dict):
        print_annotation_summary(result["annotations"])
    for sc in result.get("scales", []):
        geometry = "  ".join(f"{f}={_short(sc[f])}" for f in _GEOMETRY if sc.get(f) is not None)
        print(f"  scale {sc.get('key') or sc.get('path') or '(root)'}  {geometry}")
        sharding = sc.get("sharding")
        if isinstance(sharding, dict):
            print("    sharding " + ", ".join(f"{k}={v}" for k, v in sharding.items() if k != "@type"))
        compression = sc.get("compression")
        if isinstance(compression, dict):
            print("    compression " + ", ".join(f"{k}={v}" for k, v in compression.items()))
        for field in ("codecs", "index_codecs"):
            if isinstance(sc.get(field), list):
                print(f"    {field} " + " -> ".join(_codec_name(c) for c in sc[field]))
        if sc.get("chunk_files") is not None and "shards_present" not in sc:  # unsharded: one file per chunk
            data = f"; {sc['data_bytes']} data bytes" if sc.get("data_bytes") is not None else ""
            print(f"    {sc['chunk_files']} chunk files; {sc.get('num_chunks', '?')} chunks in the grid{data}")
        # a multilod mesh source's entries are segments: a manifest and the fragments stored just before it
        meshes = "fragment_bytes" in sc
        entries = "segments" if meshes else "chunks"
        if "shards_present" in sc:
            split = f" ({sc['manifest_bytes']} in manifests, {sc['fragment_bytes']} in fragments)" if meshes else ""
            print(
                f"    {sc['shards_present']} shard files present of {sc.get('num_shards', '?')}; "
                f"{sc.get('chunks', 0)} {entries}; {sc.get('data_bytes', 0)} data bytes{split}"
            )
        for sh in sc.get("shards", []):
            minis = f"{sh['minishards']} minishards, " if sh.get("minishards") is not None else ""
            print(f"    {sh.get('file')}: {minis}{sh.get('chunks')} {entries}, {sh.get('data_bytes')} bytes")
        for k, v in sc.items():
            if k not in _GEOMETRY and k not in _SUMMARY and v is not None and not isinstance(v, (dict, list)):
                print(f"    {k}: {v}")
    print(f"  read {result.get('bytes_read', 0)} bytes in {result.get('requests', '?')} requests")


def print_annotation_summary(summary: dict[str, Any]) -> None:
    """The schema of an annotation collection, in two or three lines."""
    dims = ", ".join(f"{name} {_number(scale)} {unit}".rstrip()
                     for name, (scale, unit) in summary["dimensions"].items())
    print(f"  annotations {summary['annotation_type']} in {summary['rank']} dimensions ({dims}); bounds "
          f"{_short(summary['lower_bound'])} .. {_short(summary['upper_bound'])}; "
          f"{summary['spatial_levels']} spatial levels")
    props = [f"{p['id']} {p['type']}" + (f" (enum of {len(p['enum_values'])})" if "enum_values" in p else "")
             for p in summary["properties"]]
    print(f"  properties: {', '.join(props) if props else 'none'}; relationships: "
          f"{', '.join(summary['relationships']) if summary['relationships'] else 'none'}")


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _short(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


def _codec_name(codec: Any) -> str:
    if isinstance(codec, dict):
        name = str(codec.get("name", "?"))
        config = codec.get("configuration")
        if isinstance(config, dict) and config and name != "sharding_indexed":
            return f"{name}({', '.join(f'{k}={_short(v)}' for k, v in config.items())})"
        return name
    return str(codec)


def print_record(record: Any) -> None:
    """One ``field: value`` line per field (lists inline) — the human form of a JSON record. Byte ranges are
    half-open, ``[start, end)``, as ``ls`` and the shard browser print them."""
    records = record if isinstance(record, list) else [record]
    for i, rec in enumerate(records):
        if i:
            print()
        for key in sorted(rec):
            value = rec[key]
            if value is None:
                text = "-"
            elif key.endswith("byte_range") and isinstance(value, list) and len(value) == 2:
                text = f"[{value[0]}, {value[1]})"
            else:
                text = _short(value)
            print(f"{key}: {text}")


def cmd_locate(args: argparse.Namespace) -> int:
    dataset = open_dataset(args.path)
    result: Any
    if args.annotation is not None or args.cell is not None or args.point is not None:
        result = _locate_annotation(dataset.inspector(), args)
    elif args.voxel is not None:
        if getattr(dataset.inspector(), "annotation_info", None) is not None:
            raise ArgumentError("a precomputed annotation collection is keyed by id, not by voxel: locate "
                                "--point X,Y,Z, --cell I,J,K, --annotation ID or --segment ID")
        result = dataset.locate_voxel(_reader_voxel(dataset, args), args.scale)
    else:
        result = _locate_by_id(dataset, args)
        if "grid_position" in result:  # a chunk id: its grid position in the reader's order too
            result = dataset.geometry(result.get("scale")).reader_record(result)
    if args.json:
        print_json(result)
    else:
        print_record(result)
    return EXIT_OK


def _reader_voxel(dataset: Dataset, args: argparse.Namespace) -> tuple[int, ...]:
    """``--voxel`` as the reader's index (z, y, x from 0): as typed, or with ``--xyz`` Neuroglancer's x, y, z
    (absolute: a precomputed voxel_offset included) turned around."""
    geo = dataset.geometry(args.scale)
    values = [int(v) for v in args.voxel]
    wanted = geo.ndim if geo.ndim <= 3 else 3  # a channel axis before z, y, x is taken at 0
    if len(values) not in (wanted, geo.ndim):
        order = ",".join(reversed(geo.array_axes[-wanted:]) if args.xyz else geo.array_axes[-wanted:])
        raise ArgumentError(f"--voxel takes {wanted} coordinates ({order}) for scale {geo.scale!r}, got {args.voxel}")
    if not args.xyz:
        return tuple(values)
    values.reverse()
    values = [0] * (geo.ndim - len(values)) + values
    array_origin = geo.to_array_order(geo.origin)
    return tuple(v - o for v, o in zip(values, array_origin, strict=True))


def _locate_annotation(inspector: DatasetInspector, args: argparse.Namespace) -> Any:
    """``--annotation ID``, ``--cell I,J,K`` and ``--point X,Y,Z`` of a precomputed annotation collection."""
    # Only an annotation collection's inspector has an ``annotation_info`` (the same test as --voxel's): asked
    # of the object, not its class, so no format's class is named outside its package.
    if getattr(inspector, "annotation_info", None) is None:
        raise ArgumentError("--annotation, --cell and --point apply to precomputed annotation collections "
                            "(neuroglancer_annotations_v1)")
    located: Any = inspector
    if args.annotation is not None:
        return located.locate_annotation(args.annotation)
    if args.cell is not None:
        return located.locate_cell(args.cell, args.scale)
    return located.locate_point(args.point, args.scale)


def _locate_by_id(dataset: Dataset, args: argparse.Namespace) -> Any:
    """``--chunk-id`` / ``--segment``: asked of the dataset, whose format refuses what it lacks (exit 5)."""
    if args.chunk_id is not None:
        return dataset.locate_chunk_id(args.chunk_id, args.scale)
    return dataset.locate_segment(args.segment)


def cmd_ls(args: argparse.Namespace) -> int:
    dataset = open_dataset(args.path)
    inspector = dataset.inspector()
    filters = {k: v for k, v in (("shard", args.shard), ("minishard", args.minishard)) if v is not None}
    geometries = {key: dataset.geometry(key) for key in dataset.layout_backend().spatial_scales()}
    for found in inspector.list_chunks(args.scale, **filters):
        geo = geometries.get(str(found.get("scale")))
        rec = geo.reader_record(found) if geo is not None else found  # a segment-keyed record has no voxels
        if args.json:
            print_json_line(rec)
        else:
            emit(_ls_line(rec))
    return EXIT_OK


def _ls_line(rec: dict[str, Any]) -> str:
    if "byte_range" in rec and rec.get("byte_range") is not None:
        where = rec.get("shard_file") or rec.get("shard_key") or rec.get("chunk_key")
        start, end = rec["byte_range"]
        ident = rec.get("chunk_id", rec.get("inner_chunk"))
        parts = [f"{where} bytes [{start}, {end}) ({end - start} bytes)"]
        if ident is not None:
            parts.append(f"chunk={_short(ident)}")
        if "minishard" in rec:
            parts.append(f"shard={rec['shard']} minishard={rec['minishard']}")
        if rec.get("grid_position") is not None:
            parts.append(f"grid={_short(rec['grid_position'])}")
        return " ".join(parts)
    key = rec.get("chunk_key") or rec.get("block_path")
    return f"{key} {rec.get('size')} bytes"


def cmd_validate(args: argparse.Namespace) -> int:
    inspector = open_dataset(args.path).inspector()
    progress = progress_unless_quiet(args, "validate")
    problems = []
    for problem in inspector.validate(args.scale, progress):
        problems.append(problem)
        if not args.json:
            emit(str(problem))
    if args.json:
        print_json({"ok": not problems, "problems": [p.to_json() for p in problems]})
    elif not problems and not args.quiet:
        print("validate: no problems found", file=sys.stderr)
    return EXIT_CHECK_FAILED if problems else EXIT_OK
