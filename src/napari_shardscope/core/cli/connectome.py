"""``shardscope synapses|connections|connectome``: the connectome of a version, as rows.

Every verb prints rows: a text table by default, JSON Lines with ``--json`` (one record per row,
flushed as it is made), CSV with ``--csv``, or writes a Parquet file with ``--parquet FILE``
(pyarrow, the ``tables`` extra; the file appears whole or not at all).
"""

from __future__ import annotations

import argparse
import csv
import io
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from napari_shardscope.core.cli.common import emit, print_json_line
from napari_shardscope.core.errors import EXIT_OK, ArgumentError, UnsupportedFeatureError


def _instance(repo: Any, name: str | None) -> Any:
    from napari_shardscope.core.annotation import TYPE_NAME, open_annotation_instance

    if name is not None:
        return open_annotation_instance(repo, name)
    found = [i.name for i in repo.instances() if i.type == TYPE_NAME]
    if len(found) != 1:
        raise ArgumentError(f"the repository holds {len(found)} annotation instances "
                            f"({', '.join(found) or 'none'}): name one with --annotations")
    return open_annotation_instance(repo, found[0])


def write_rows(args: argparse.Namespace, columns: Sequence[str], rows: Iterable[dict[str, Any]]) -> int:
    """Print ``rows`` as text, JSON Lines (``--json``) or CSV, or write them to ``--parquet``."""
    if args.parquet:
        return _write_parquet(Path(args.parquet), columns, list(rows))
    if args.json:
        for r in rows:
            print_json_line(r)
        return EXIT_OK
    if args.csv:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="")
        w.writerow(columns)
        emit(buf.getvalue())
        for r in rows:
            buf.seek(0)
            buf.truncate()
            w.writerow([r[c] for c in columns])
            emit(buf.getvalue())
        return EXIT_OK
    emit("  ".join(f"{c:>12}" for c in columns))
    for r in rows:
        emit("  ".join(f"{r[c]!s:>12}" for c in columns))
    return EXIT_OK


def _write_parquet(path: Path, columns: Sequence[str], rows: list[dict[str, Any]]) -> int:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise UnsupportedFeatureError("--parquet output", detail="install pyarrow: pip install "
                                      "'napari-shardscope[tables]'") from exc
    table = pa.table({c: [r[c] for r in rows] for c in columns})
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    emit(f"wrote {len(rows)} rows to {path}")
    return EXIT_OK


def cmd_synapses(args: argparse.Namespace) -> int:
    from napari_shardscope.core.versioned import open_repository

    if args.todo is not None:
        return _synapse_todo(args)
    if args.body is None:
        raise ArgumentError("name the BODY whose synapses to list (or pass --todo orphans|weak to check the "
                            "whole version)")
    if args.save is not None:
        raise ArgumentError("--save stores a synapse to-do list: pass --todo orphans|weak with it")
    with open_repository(args.path) as repo:
        v = _instance(repo, args.instance).at(args.ref)
        sites = v.synapses(args.body)
    rows = (r for s in sites for r in s.rows())
    return write_rows(args, ("id", "kind", "z", "y", "x", "body", "partner", "partner_body"), rows)


def _synapse_todo(args: argparse.Namespace) -> int:
    """``synapses REPO REF [BODY] --todo orphans|weak``: the sites to look at, optionally saved as a to-do list."""
    from napari_shardscope.core.annotation.synapse_checks import find_synapse_issues
    from napari_shardscope.core.proofreading.synapse_todo import todo_items
    from napari_shardscope.core.proofreading.todo import TodoStore
    from napari_shardscope.core.versioned import open_repository

    for flag, value in (("--min-synapses", args.min_synapses), ("--min-body-synapses", args.min_body_synapses)):
        if value < 1:
            raise ArgumentError(f"{flag} is a whole number ≥ 1, got {value}")
    with open_repository(args.path) as repo:
        v = _instance(repo, args.instance).at(args.ref)
        found = find_synapse_issues(v, args.todo, args.body, min_synapses=args.min_synapses,
                                    min_body_synapses=args.min_body_synapses)
        if args.save is not None:
            if not found:
                raise ArgumentError(f"no {args.todo} found: nothing to save as to-do list {args.save!r}")
            TodoStore(repo).save(v.uuid, args.save, todo_items(found))
    code = write_rows(args, ("check", "id", "kind", "z", "y", "x", "body", "reasons", "partner_body", "count",
                             "note"), (f.to_json() for f in found))
    if args.save is not None and not (args.json or args.csv or args.parquet):
        emit(f"saved {len(found)} items as to-do list {args.save!r} at version {v.uuid[:8]}")
    return code


def cmd_connections(args: argparse.Namespace) -> int:
    from napari_shardscope.core.versioned import open_repository

    with open_repository(args.path) as repo:
        c = _instance(repo, args.instance).at(args.ref).connections(args.body)
    return write_rows(args, ("body", "direction", "partner", "count"), c.rows())


def cmd_connectome(args: argparse.Namespace) -> int:
    from napari_shardscope.core.annotation.connectome import diff_connectivity
    from napari_shardscope.core.versioned import open_repository

    bodies = args.bodies or None
    with open_repository(args.path) as repo:
        inst = _instance(repo, args.instance)
        v = inst.at(args.ref)
        if args.against is not None:
            d = diff_connectivity(inst.at(args.against), v, bodies)
            rows: Iterable[dict[str, Any]] = [c.to_json() for c in d.changes]
            return write_rows(args, ("pre", "post", "before", "after", "status"), rows)
        table = v.connectivity(bodies, within=args.within)
    return write_rows(args, ("pre", "post", "count"), table.rows())
