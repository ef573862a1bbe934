"""Benchmark: precomputed annotations — encoding, decoding and a view's spatial query, against the wheel.

Run: ``PYTHONPATH=src:. .venv/bin/python bench/annotations.py [--rounds 5] [--peer-points 100000] [--large]``

Data: synapse-like points (x, y, z in nm over 10 x 10 x 1 µm, a float32 ``score``, ``pre``/``post``
relationships of one segment each), the same arrays for both sides. Peer: the ``neuroglancer`` wheel
(its ``write_annotations.AnnotationWriter`` and ``read_precomputed_annotations.AnnotationReader``), in
the same process, round by round, the order alternating:

1. *encode* ``N`` points in the multiple-annotation encoding (a spatial cell or a relationship list):
   ``encode_multiple`` of the columns vs the wheel's ``add_point`` per annotation and its list
   serialiser (the wheel's only path from values to bytes);
2. *decode* the same bytes: ``decode_multiple`` (columns) vs the reader's ``_decode_multiple_annotations``
   (one object per annotation, its only decoder);
3. *decode by_id*: every annotation's single encoding (what ``by_id`` holds), ``decode_single_many``
   vs the reader's ``_decode_single_annotation`` per annotation;
4. *a view's box*: a collection of ``N`` synapses written sharded (multi-level spatial index, limit
   10 000), a 2 x 2 x 0.5 µm box queried through every level, cold (fresh readers): ``query_box`` vs
   the wheel's ``get_within_spatial_bounds`` (TensorStore's sharded kvstore underneath).

The wheel spends about 75 µs of Python per annotation each way (measured here), so 1–3 are paired at
``--peer-points`` (10⁵: about a minute a round for the wheel); our throughput at 10⁶ points is recorded
alone, and ``--large`` adds 10⁷ (the wheel would need hours and memory for 10⁷ Python objects):
encode, decode, and the complete sharded write (by_id, relationships, spatial index). The view's box
(4) is paired on a collection of 10⁶ synapses.
"""

from __future__ import annotations

import argparse
import io
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import Row, paired_rounds, rate, record, record_pair, save, spread, timed

from napari_shardscope.core.formats import open_annotations
from napari_shardscope.core.formats.precomputed.annotations.encoding import (
    decode_multiple,
    decode_single_many,
    encode_multiple,
    encode_single_many,
)
from napari_shardscope.core.formats.precomputed.annotations.schema import (
    AnnotationSchema,
    Dimension,
    PropertySpec,
)
from napari_shardscope.core.formats.precomputed.annotations.table import Annotations, make_annotations
from napari_shardscope.core.formats.precomputed.annotations.writer import write_annotations

BENCH = "annotations"
SCHEMA = AnnotationSchema("point", (Dimension("x", 1, "nm"), Dimension("y", 1, "nm"), Dimension("z", 1, "nm")),
                          (PropertySpec("score", "float32"),), ("pre", "post"))
EXTENT = np.array([10_000.0, 10_000.0, 1_000.0])
VIEW = (np.array([4_000.0, 4_000.0, 250.0]), np.array([6_000.0, 6_000.0, 750.0]))


def synapses(n: int, seed: int = 0) -> Annotations:
    rng = np.random.default_rng(seed)
    return make_annotations(SCHEMA, np.arange(1, n + 1, dtype=np.uint64),
                            (rng.random((n, 3)) * EXTENT).astype(np.float32),
                            {"score": rng.random(n, dtype=np.float32)},
                            {"pre": rng.integers(1, n // 50 + 2, n).astype(np.uint64),
                             "post": rng.integers(1, n // 50 + 2, n).astype(np.uint64)})


def wheel_writer():  # type: ignore[no-untyped-def]
    import neuroglancer
    from neuroglancer import write_annotations as ng

    space = neuroglancer.CoordinateSpace(names=["x", "y", "z"], units="nm", scales=[1, 1, 1])
    return ng.AnnotationWriter(space, "point", relationships=["pre", "post"],
                               properties=[neuroglancer.AnnotationPropertySpec(id="score", type="float32")])


def wheel_reader(path: Path):  # type: ignore[no-untyped-def]
    from neuroglancer.read_precomputed_annotations import AnnotationReader

    return AnnotationReader(path.as_uri())


def wheel_encode(batch: Annotations) -> bytes:
    writer = wheel_writer()
    geometry = batch.geometry.tolist()
    score = batch.properties["score"].tolist()
    assert batch.relationships is not None
    pre = batch.relationships["pre"].values.tolist()
    post = batch.relationships["post"].values.tolist()
    for i, (p, s, a, b) in enumerate(zip(geometry, score, pre, post, strict=True)):
        writer.add_point(p, id=i + 1, score=s, pre=a, post=b)
    out = io.BytesIO()
    writer._serialize_annotations(out, writer.annotations)
    return out.getvalue()


def bench_codec(n: int, rounds: int, work: Path) -> None:
    batch = synapses(n)
    ours_bytes = encode_multiple(batch)
    assert wheel_encode(batch.take(np.arange(1000))) == encode_multiple(batch.take(np.arange(1000)))
    record_pair(BENCH, f"encode {n:.0e} points (multiple encoding)", "-",
                paired_rounds(lambda: encode_multiple(batch), lambda: wheel_encode(batch), rounds),
                "neuroglancer wheel AnnotationWriter", 10.0)
    write_annotations(work / "small", batch.take(np.arange(100)), sharded=False)
    reader = wheel_reader(work / "small")
    got = decode_multiple(ours_bytes, SCHEMA, key="bench")
    assert np.array_equal(got.geometry, batch.geometry)
    record_pair(BENCH, f"decode {n:.0e} points (multiple encoding)", "-",
                paired_rounds(lambda: decode_multiple(ours_bytes, SCHEMA, key="bench"),
                              lambda: reader._decode_multiple_annotations(None, ours_bytes), rounds),
                "neuroglancer wheel AnnotationReader", 10.0)
    buf, starts, ends = encode_single_many(batch)
    blob = buf.tobytes()
    ids = batch.ids

    def ours_by_id() -> object:
        return decode_single_many(blob, starts, ends, ids, SCHEMA, where=lambda i: ("bench", 0))

    def wheel_by_id() -> object:
        return [reader._decode_single_annotation(int(ids[i]), blob[int(starts[i]):int(ends[i])]) for i in range(n)]

    record_pair(BENCH, f"decode {n:.0e} by_id records (single encoding)", "-",
                paired_rounds(ours_by_id, wheel_by_id, rounds), "neuroglancer wheel AnnotationReader", 10.0)


def bench_view(n: int, rounds: int, work: Path) -> None:
    batch = synapses(n, seed=1)
    dest = work / "syn"
    t0 = time.perf_counter()
    report = write_annotations(dest, batch, sharded=True)
    print(f"  wrote {n} synapses sharded in {time.perf_counter() - t0:.1f} s: levels {report.level_counts}")
    inside = np.all((batch.geometry >= VIEW[0]) & (batch.geometry <= VIEW[1]), axis=1)
    counts: list[int] = []

    def ours() -> None:
        counts.append(len(open_annotations(dest).query_box(*VIEW)))

    def peer() -> None:
        counts.append(sum(1 for _ in wheel_reader(dest).get_within_spatial_bounds(lower_bound=VIEW[0],
                                                                                   upper_bound=VIEW[1])))

    pair = paired_rounds(ours, peer, rounds)
    assert set(counts) == {int(inside.sum())}, (set(counts), int(inside.sum()))
    record_pair(BENCH, f"a view's box (2x2x0.5 um, {int(inside.sum())} of {n:.0e} synapses), every level, cold",
                "-", pair, "neuroglancer wheel get_within_spatial_bounds", 1.0, setting="sharded, limit 10000")


def bench_alone(n: int, rounds: int, work: Path, *, write: bool) -> None:
    batch = synapses(n, seed=2)
    enc = [timed(lambda: encode_multiple(batch)) for _ in range(rounds)]
    data = encode_multiple(batch)
    dec = [timed(lambda: decode_multiple(data, SCHEMA, key="bench")) for _ in range(rounds)]
    for case, times in (("encode", enc), ("decode", dec)):
        record(Row(BENCH, f"{case} {n:.0e} points (multiple encoding), ours alone", "-",
                   rate(n, times, "M points/s"), "-", "-", "-", "-", None, rounds))
    if not write:
        return
    writes = []
    for r in range(min(rounds, 3)):
        dest = work / f"large{r}"
        writes.append(timed(lambda dest=dest: write_annotations(dest, batch, sharded=True)))
        shutil.rmtree(dest)
    record(Row(BENCH, f"write {n:.0e} synapses: by_id, 2 relationships, spatial index, sharded", "-",
               spread(writes, "{:.1f}") + " s", "-", "-", "-", "-", None, len(writes)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--peer-points", type=int, default=100_000, help="points of the paired codec rows")
    parser.add_argument("--points", type=int, default=1_000_000, help="synapses of the view's collection, and "
                        "of the rows of ours alone")
    parser.add_argument("--large", action="store_true", help="add the 1e7-point rows (ours alone)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-annotations-") as tmp:
        work = Path(tmp)
        bench_codec(args.peer_points, args.rounds, work)
        bench_alone(args.points, args.rounds, work, write=True)
        bench_view(args.points, args.rounds, work)
        if args.large:
            bench_alone(10_000_000, args.rounds, work, write=True)
    save(BENCH)


if __name__ == "__main__":
    main()
