"""Benchmark: a body's mesh, cold and after a merge, against CloudVolume's mesh fetch of the same ids.

Run: ``.venv/bin/python bench/meshes.py [--rounds 5] [--bodies 8]``

Data: igneous's pinky40 segmentation (``../shared/realdata/igneous_pinky_sharded``: sharded
multilod Draco meshes, murmurhash), local and served over loopback HTTP (real range requests).
Per round, paired (the same ids, each side with fresh readers and caches, the order alternating):

1. first mesh — ``Labelmap.mesh`` of one body through a fresh mesher and mesh source (shard
   index, minishard index, manifest, fragments, Draco decode) vs ``CloudVolume(...).mesh.get(id)``
   of a fresh CloudVolume; local and HTTP;
2. update after a merge — body A merged with B, then A's mesh: ours reuses the supervoxel meshes
   it holds (what the viewer does after an edit); CloudVolume has no notion of the edit, so its
   peer is fetching both ids' meshes and concatenating them (what a client without our cache does).

Times are the core's (mesh ready for a layer), not GL drawing. Medians [min–max] over the rounds, after
one unmeasured warm-up round. ``--many``: bodies of 5120 supervoxels without a mesh source (no peer).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.http_range_server import RangeServer

from napari_shardscope.core.bytestore import open_store
from napari_shardscope.core.formats.precomputed.meshes import concatenate_meshes, open_mesh_source
from napari_shardscope.core.labelmap import create_labelmap
from napari_shardscope.core.labelmap.meshes import BodyMesher
from napari_shardscope.core.versioned import create_repository

PINKY = Path(__file__).resolve().parents[1] / ".." / "shared" / "realdata" / "igneous_pinky_sharded"
MESH_DIR = "mesh_mip_0_err_40.0"


def timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def fmt(xs: list[float]) -> str:
    return f"{statistics.median(xs) * 1e3:8.2f} ms [{min(xs) * 1e3:.2f}–{max(xs) * 1e3:.2f}]"


def report(name: str, ours: list[float], theirs: list[float]) -> None:
    ratios = [t / o for o, t in zip(ours, theirs, strict=True)]
    print(f"{name}\n  shardscope  {fmt(ours)}\n  cloudvolume {fmt(theirs)}\n"
          f"  ratio cloudvolume/shardscope per round: median {statistics.median(ratios):.2f}x "
          f"[{min(ratios):.2f}–{max(ratios):.2f}]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--bodies", type=int, default=8, help="bodies meshed per round")
    parser.add_argument("--many", action="store_true",
                        help="also: two bodies of 5120 supervoxels each (no mesh source), merge and undo updates")
    args = parser.parse_args()
    from cloudvolume import CloudVolume

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        served = tmp / "served"
        served.mkdir()
        shutil.copytree(PINKY, served / "pinky")
        local = served / "pinky"
        server = RangeServer(served)
        try:
            http = f"{server.url.rstrip('/')}/pinky"
            repo = create_repository(tmp / "repo")
            lm = create_labelmap(repo, "seg", local)
            source = open_mesh_source(open_store(local), MESH_DIR)
            ids = sorted(source.segment_ids(), key=lambda i: -len(source.mesh(i).faces))[: 2 * args.bodies]
            firsts, seconds = ids[: args.bodies], ids[args.bodies:]
            v = lm.at("main")
            print(f"pinky40, {len(ids)} bodies of {len(source.segment_ids())}; rounds: {args.rounds} "
                  f"(each round: {args.bodies} bodies per side)")

            for where, root in (("local", str(local)), ("loopback HTTP", http)):
                ours_t, cv_t = [], []
                for r in range(-1, args.rounds):  # round -1 warms imports and the base index up, unmeasured
                    def ours(root: str = root) -> None:
                        src = open_mesh_source(open_store(root), MESH_DIR)
                        mesher = BodyMesher(lm, source=src)
                        for body in firsts:
                            mesher.mesh(body, v)

                    def theirs(root: str = root) -> None:
                        cv = CloudVolume(root if root.startswith("http") else f"file://{root}", progress=False,
                                         cache=False, mesh_dir=MESH_DIR)
                        for body in firsts:
                            cv.mesh.get(body, lod=0)

                    if r < 0:
                        ours()
                        theirs()
                    elif r % 2:
                        cv_t.append(timed(theirs))
                        ours_t.append(timed(ours))
                    else:
                        ours_t.append(timed(ours))
                        cv_t.append(timed(theirs))
                report(f"first mesh of {args.bodies} bodies, {where} (fresh readers each round)", ours_t, cv_t)

            ours_t, cv_t = [], []
            mesher = lm.mesher()
            for body in ids:
                mesher.mesh(body, v)  # the view has shown both bodies before the merge
            cv = CloudVolume(f"file://{local}", progress=False, cache=False, mesh_dir=MESH_DIR)
            for r in range(args.rounds):
                def merge_and_mesh() -> None:
                    for a, b in zip(firsts, seconds, strict=True):
                        v.merge(a, [b])
                        lm.mesh(a, v.uuid)

                def theirs_both() -> None:
                    for a, b in zip(firsts, seconds, strict=True):
                        got = cv.mesh.get([a, b], lod=0)
                        concatenate_meshes(a, [_as_mesh(got[a]), _as_mesh(got[b])])

                if r % 2:
                    cv_t.append(timed(theirs_both))
                    ours_t.append(timed(merge_and_mesh))
                else:
                    ours_t.append(timed(merge_and_mesh))
                    cv_t.append(timed(theirs_both))
                for _ in firsts:
                    v.undo()
            report(f"merge + merged body's mesh, {args.bodies} merges (ours includes the merge's own commit)",
                   ours_t, cv_t)
            repo.close()
            if args.many:
                many_supervoxels(tmp, args.rounds)
        finally:
            server.close()


def many_supervoxels(tmp: Path, rounds: int) -> None:
    """Bodies of 5120 supervoxels (blocky base, no mesh source): first mesh, then merge/undo updates (no peer:
    CloudVolume has no per-version body meshes)."""
    import numpy as np
    from bench.blocky_base import write_blocky_base

    sv = write_blocky_base(tmp / "many", (64, 320, 512), (4, 16, 16), (64, 64, 64), 1)
    nx = 512 // 16
    agg = {int(i): 1_000_000 + (1 if (int(i) - 1) % nx < nx // 2 else 2) for i in np.unique(sv)}
    repo = create_repository(tmp / "many.repo")
    lm = create_labelmap(repo, "seg", tmp / "many", agglomeration=agg)
    v = lm.at("main")
    a, b = 1_000_001, 1_000_002
    first = timed(lambda: (lm.mesh(a, v.uuid), lm.mesh(b, v.uuid)))
    merge_t, undo_t = [], []
    for _ in range(rounds):
        merge_t.append(timed(lambda: (v.merge(a, [b]), lm.mesh(a, v.uuid))))
        undo_t.append(timed(lambda: (v.undo(), lm.mesh(a, v.uuid))))
    print(f"bodies of {len(v.supervoxels(a))} supervoxels each, meshed from the labels (no source)\n"
          f"  first mesh of both {first:.2f} s\n  merge + merged mesh {fmt(merge_t)}\n  undo + mesh {fmt(undo_t)}")
    repo.close()


def _as_mesh(m: object) -> object:
    from napari_shardscope.core.formats.precomputed.meshes import MeshData

    return MeshData(0, m.vertices.astype("float32"), m.faces.astype("uint32"))  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
