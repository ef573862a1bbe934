"""``shardscope inspect | locate | ls | validate``: what is inside the shards of a dataset.

Coordinate conventions (also in ``--help``): precomputed voxels and grid positions are x,y,z, as
the format stores them (absolute, ``voxel_offset`` included); zarr v3 voxels follow the array's
``shape`` order; N5 voxels follow ``attributes.json``'s ``dimensions`` order (fastest-first, x,y,z).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from napari_shardscope.core.cli import EXIT_FAILED, EXIT_OK, print_json
from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.formats import open_dataset
from napari_shardscope.core.formats.api import DatasetInspector

COORDS_HELP = (
    "coordinates: precomputed x,y,z (absolute voxels, the format's order); zarr v3 in the "
    "array's shape order; N5 in attributes.json 'dimensions' order (x,y,z)"
)


def parse_coords(text: str) -> list[int]:
    """``"10,20,30"`` → ``[10, 20, 30]`` (argument errors name the value)."""
    try:
        return [int(v) for v in text.replace(" ", "").split(",") if v != ""]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers like 10,20,30, got {text!r}") from exc


def parse_positive_int(text: str) -> int:
    """``"4"`` → 4: an argparse type for counts (``--workers``); zero, negatives and non-integers are a
    usage error (exit 2, one line) instead of a traceback further down."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def parse_uint64(text: str) -> int:
    try:
        value = int(text, 0)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from exc
    if not 0 <= value < 1 << 64:
        raise argparse.ArgumentTypeError(f"{value} is not a uint64")
    return value


def register(sub: Any) -> None:
    """Add the inspection subcommands to the ``shardscope`` parser."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("path", help="dataset path or URL (local, file://, http(s)://, gs://, s3://)")
    common.add_argument(
        "--scale",
        metavar="KEY",
        help="scale key / array path (default: all for inspect and validate, the finest otherwise)",
    )
    common.add_argument("--json", action="store_true", help="machine-readable output")

    p = sub.add_parser(
        "inspect",
        parents=[common],
        help="summarise shards, minishards, chunks and bytes",
        description="Summarise the sharded layout, reading only index bytes (the JSON reports bytes_read).",
    )
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser(
        "locate",
        parents=[common],
        help="where one chunk is stored",
        description="Where the chunk holding a voxel (or a chunk id / segment id) is stored: "
        "shard file, minishard and byte range [start, end). " + COORDS_HELP + ".",
        epilog=COORDS_HELP,
    )
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--voxel", type=parse_coords, metavar="X,Y,Z", help="a voxel (" + COORDS_HELP + ")")
    what.add_argument(
        "--chunk-id",
        type=parse_uint64,
        metavar="ID",
        help="a precomputed chunk id (compressed Morton code of the grid position)",
    )
    what.add_argument(
        "--segment",
        type=parse_uint64,
        metavar="ID",
        help="a segment id: its mesh, skeleton or annotations (precomputed)",
    )
    p.set_defaults(func=cmd_locate)

    p = sub.add_parser(
        "ls",
        parents=[common],
        help="list stored chunks with their byte ranges",
        description="One record per stored chunk. With --json, JSON Lines (one object a line).",
    )
    p.add_argument("--shard", type=int, metavar="N", help="only this shard")
    p.add_argument("--minishard", type=int, metavar="M", help="only this minishard (needs --shard)")
    p.set_defaults(func=cmd_ls)

    p = sub.add_parser(
        "validate",
        parents=[common],
        help="check every shard's indexes and data",
        description="Check index ranges (inside the file, no overlaps), minishard indexes, "
        "sorted unique ids that hash to the shard and minishard holding them, decodable data, "
        "crc32c (zarr v3). Exit 0 clean, 1 with one line per problem, 2 bad arguments.",
    )
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=cmd_validate)


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
    "chunks",
    "data_bytes",
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
        if "shards_present" in sc:
            print(
                f"    {sc['shards_present']} shard files present of {sc.get('num_shards', '?')}; "
                f"{sc.get('chunks', 0)} chunks; {sc.get('data_bytes', 0)} data bytes"
            )
        for sh in sc.get("shards", []):
            minis = f"{sh['minishards']} minishards, " if sh.get("minishards") is not None else ""
            print(f"    {sh.get('file')}: {minis}{sh.get('chunks')} chunks, {sh.get('data_bytes')} bytes")
        for k, v in sc.items():
            if k not in _GEOMETRY and k not in _SUMMARY and v is not None and not isinstance(v, (dict, list)):
                print(f"    {k}: {v}")
    print(f"  read {result.get('bytes_read', 0)} bytes in {result.get('requests', '?')} requests")


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
    """One ``field: value`` line per field (lists inline) — the human form of a JSON record."""
    records = record if isinstance(record, list) else [record]
    for i, rec in enumerate(records):
        if i:
            print()
        for key in sorted(rec):
            print(f"{key}: {_short(rec[key]) if rec[key] is not None else '-'}")


def cmd_locate(args: argparse.Namespace) -> int:
    inspector = open_dataset(args.path).inspector()
    result: Any
    if args.voxel is not None:
        result = inspector.locate_voxel(args.voxel, args.scale)
    else:
        result = _locate_by_id(inspector, args)
    if args.json:
        print_json(result)
    else:
        print_record(result)
    return EXIT_OK


def _locate_by_id(inspector: DatasetInspector, args: argparse.Namespace) -> Any:
    from napari_shardscope.core.formats.precomputed.inspector import PrecomputedInspector

    if not isinstance(inspector, PrecomputedInspector):
        raise ArgumentError(f"--chunk-id and --segment apply to precomputed datasets, not {inspector.format_name}")
    if args.chunk_id is not None:
        return inspector.locate_chunk_id(args.chunk_id, args.scale)
    return inspector.locate_segment(args.segment)


def cmd_ls(args: argparse.Namespace) -> int:
    inspector = open_dataset(args.path).inspector()
    filters = {k: v for k, v in (("shard", args.shard), ("minishard", args.minishard)) if v is not None}
    out = sys.stdout
    for rec in inspector.list_chunks(args.scale, **filters):
        if args.json:
            out.write(json.dumps(rec, sort_keys=True) + "\n")
        else:
            out.write(_ls_line(rec) + "\n")
    return EXIT_OK


def _ls_line(rec: dict[str, Any]) -> str:
    if "byte_range" in rec and rec.get("byte_range") is not None:
        where = rec.get("shard_file") or rec.get("shard_key")
        start, end = rec["byte_range"]
        ident = rec.get("chunk_id", rec.get("inner_chunk"))
        extra = f" shard={rec['shard']} minishard={rec['minishard']}" if "minishard" in rec else ""
        pos = f" grid={rec['grid_position']}" if rec.get("grid_position") is not None else ""
        return f"{where} [{start}, {end}) {end - start} bytes  chunk={ident}{extra}{pos}"
    key = rec.get("chunk_key") or rec.get("block_path")
    return f"{key} {rec.get('size')} bytes"


class StderrProgress:
    """Progress on stderr: a rewritten line on a terminal, a line every few seconds otherwise."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.tty = sys.stderr.isatty()
        self.last = 0.0

    def __call__(self, done: int, total: int, what: str) -> None:
        now = time.monotonic()
        final = done >= total
        if not final and now - self.last < (0.1 if self.tty else 5.0):
            return
        self.last = now
        text = f"{self.label}: {done}/{total} {what}"
        if self.tty:
            sys.stderr.write("\r" + text[:120].ljust(120) + ("\n" if final else ""))
        else:
            sys.stderr.write(text + "\n")
        sys.stderr.flush()


def cmd_validate(args: argparse.Namespace) -> int:
    inspector = open_dataset(args.path).inspector()
    progress = None if args.quiet else StderrProgress("validate")
    problems = []
    for problem in inspector.validate(args.scale, progress):
        problems.append(problem)
        if not args.json:
            print(str(problem), flush=True)
    if args.json:
        print_json({"ok": not problems, "problems": [p.to_json() for p in problems]})
    elif not problems and not args.quiet:
        print("validate: no problems found", file=sys.stderr)
    return EXIT_FAILED if problems else EXIT_OK
