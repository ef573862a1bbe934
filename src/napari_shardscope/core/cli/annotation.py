"""``shardscope annotation import``: an annotation instance whose base is a synapse table or precomputed annotations.

Loaded only when the verb runs (:mod:`.verbs` declares it): the import reads the table with pyarrow.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from napari_shardscope.core.annotation import create_annotation_instance
from napari_shardscope.core.annotation.base_import import SynapseColumns
from napari_shardscope.core.cli.common import print_json
from napari_shardscope.core.errors import EXIT_OK, ArgumentError
from napari_shardscope.core.versioned import open_repository


def _xyz(text: str | None, what: str) -> str | tuple[str, str, str] | None:
    """One list column, or three comma-separated x,y,z columns."""
    if text is None:
        return None
    parts = [p.strip() for p in text.split(",")]
    if len(parts) == 1 and parts[0]:
        return parts[0]
    if len(parts) != 3 or not all(parts):
        raise ArgumentError(f"{what} is one list column or three columns X,Y,Z, got {text!r}")
    return parts[0], parts[1], parts[2]


def _columns(args: argparse.Namespace) -> SynapseColumns | None:
    pre = _xyz(args.pre, "--pre")
    post = _xyz(args.post, "--post")
    props = None if args.properties is None else tuple(p for p in args.properties.split(",") if p)
    if pre is None:
        if post is not None or args.id_column is not None or props is not None:
            raise ArgumentError("--post, --id-column and --properties go with --pre (the pre sites' columns)")
        return None
    return SynapseColumns(pre, post, args.id_column, props)


def cmd_import(args: argparse.Namespace) -> int:
    with open_repository(args.path) as repo:
        t0 = time.perf_counter()
        inst = create_annotation_instance(repo, args.name, labelmap=args.labelmap, base=args.source,
                                          columns=_columns(args), voxel_size=args.voxel_size,
                                          base_dir=args.base_dir, base_format=args.format)
        took = time.perf_counter() - t0
        base = inst.base
        assert base is not None
        info: dict[str, Any] = {"name": inst.name, "labelmap": inst.labelmap.name, "annotations": len(base),
                                "max_id": base.max_id, "records": base.config.records, "spatial": base.config.spatial,
                                "source": base.config.source,
                                "properties": [p.to_json() for p in base.config.properties], "seconds": took}
    if args.json:
        print_json(info)
    else:
        props = ", ".join(p["name"] for p in info["properties"]) or "none"
        print(f"imported {info['annotations']} annotations from {info['source']} as the base of {args.name} "
              f"(labelmap {info['labelmap']}) in {took:.1f} s; properties: {props}; tables in "
              f"{base.config.records.rsplit('/', 1)[0]}")
    return EXIT_OK
