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
    parser.add_argument("--napari", action="store_true",
                        help="also: merge to updated Surface layer in a real napari viewer (needs a display)")
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
            if args.napari:
                napari_update(tmp, local, ids[0], ids[1], args.rounds)
            if args.many:
                many_supervoxels(tmp, args.rounds)
        finally:
            server.close()


def napari_update(tmp: Path, local: Path, a: int, b: int, rounds: int) -> None:
    """Merge (the panel's action on a two-body selection) to the merged body's Surface layer holding the
    merged mesh, in a real napari viewer (3-D), against a plain napari Surface layer fed by CloudVolume
    (fetch both ids, concatenate, set the layer's data): both end when the layer's data changed."""
    import napari
    from cloudvolume import CloudVolume
    from qtpy.QtWidgets import QApplication

    from napari_shardscope.widgets.session import session_for

    def wait(cond: Callable[[], bool], timeout: float = 120.0) -> None:
        deadline = time.perf_counter() + timeout
        while not cond():
            if time.perf_counter() > deadline:
                raise TimeoutError("napari did not update within the bound")
            QApplication.processEvents()
            time.sleep(0.001)

    path = tmp / "napari.repo"
    repo = create_repository(path)
    lm = create_labelmap(repo, "seg", local)
    v = lm.at("main")
    v.merge(a, [b])
    merged_faces = len(lm.mesh(a, v.uuid).faces)
    v.undo()
    repo.close()
    viewer = napari.Viewer(show=True)
    session = session_for(viewer)
    c = session.controller
    c.connect(path)
    wait(lambda: session.body_layer is not None)
    viewer.dims.ndisplay = 3
    cv = CloudVolume(f"file://{local}", progress=False, cache=False, mesh_dir=MESH_DIR)
    got = cv.mesh.get([a, b], lod=0)
    plain = viewer.add_surface((got[a].vertices.astype("float32"), got[a].faces.astype("uint32")), name="plain")

    def faces_of(body: int) -> int:
        layer = session.surfaces.layers.get(body)
        return -1 if layer is None else len(layer.data[1])

    ours_t: list[float] = []
    cv_t: list[float] = []
    for r in range(-1, rounds):  # round -1 warms up, unmeasured
        c.select(a)
        c.select(b, add=True)
        wait(lambda: not session.surfaces.busy and faces_of(a) > 0 and faces_of(b) > 0)
        t = time.perf_counter()
        c.merge()
        wait(lambda: faces_of(a) == merged_faces)
        ours = time.perf_counter() - t
        plain.data = (got[a].vertices.astype("float32"), got[a].faces.astype("uint32"))
        t = time.perf_counter()
        both = cv.mesh.get([a, b], lod=0)
        m = concatenate_meshes(a, [_as_mesh(both[a]), _as_mesh(both[b])])
        plain.data = (m.vertices, m.faces)
        wait(lambda: len(plain.data[1]) == merged_faces)
        theirs = time.perf_counter() - t
        if r >= 0:
            ours_t.append(ours)
            cv_t.append(theirs)
        c.undo()
        wait(lambda: not session.surfaces.busy)
    report(f"napari: merge to the merged body's Surface layer updated ({merged_faces} faces), "
           "vs a plain Surface layer fed by CloudVolume (fetch both ids + concatenate + set data)", ours_t, cv_t)
    viewer.close()


def many_supervoxels(tmp: Path, rounds: int) -> None:
    """Bodies of 5120 supervoxels (blocky base, no mesh source): first mesh, then merge/undo updates (no peer:
    CloudVolume has no per-version body meshes)."""
    import numpy as np
    from bench.blocky_base import write_blocky_base

    sv = write_blocky_base(tmp / "many", (64, 320, 512), (4, 16, 16), (64, 64, 64), 1)
    nx = 512 // 16
    agg = {int(i): 1_000_000 + (1 if (int(i) - 1) % nx < nx // 2 else 2) for i in np.unique(sv)}
    a, b = 1_000_001, 1_000_002
    # first mesh, paired per round (fresh repositories, order alternating): at the coarsest resolving scale
    # (the default) vs at the finest scale that fits (before resolving_scale); both simplified
    first_rounds = max(1, min(rounds, 3))
    fine_t: list[float] = []
    coarse_t: list[float] = []
    faces: dict[str, int] = {}
    for r in range(first_rounds):
        for coarsen in ((True, False) if r % 2 else (False, True)):
            rp = create_repository(tmp / f"first-{r}-{coarsen}.repo")
            lmr = create_labelmap(rp, "seg", tmp / "many", agglomeration=agg)
            mesher = BodyMesher(lmr, source=None, coarsen=coarsen)
            vr = lmr.at("main")
            t0 = time.perf_counter()
            ma, mb = mesher.mesh(a, vr), mesher.mesh(b, vr)
            (coarse_t if coarsen else fine_t).append(time.perf_counter() - t0)
            faces["coarse" if coarsen else "fine"] = len(ma.faces) + len(mb.faces)
            rp.close()
    ratios = [f / c for f, c in zip(fine_t, coarse_t, strict=True)]
    print(f"first mesh of both bodies (5120 supervoxels each), simplified, {first_rounds} rounds\n"
          f"  coarsest resolving scale (default) {fmt(coarse_t)}, {faces['coarse']:,} faces\n"
          f"  finest scale that fits (before)    {fmt(fine_t)}, {faces['fine']:,} faces\n"
          f"  ratio before/default per round: median {statistics.median(ratios):.2f}x "
          f"[{min(ratios):.2f}–{max(ratios):.2f}]")
    repo = create_repository(tmp / "many.repo")
    lm = create_labelmap(repo, "seg", tmp / "many", agglomeration=agg)
    v = lm.at("main")
    first = timed(lambda: (lm.mesh(a, v.uuid), lm.mesh(b, v.uuid)))
    merge_t, undo_t = [], []
    for _ in range(rounds):
        merge_t.append(timed(lambda: (v.merge(a, [b]), lm.mesh(a, v.uuid))))
        undo_t.append(timed(lambda: (v.undo(), lm.mesh(a, v.uuid))))
    print(f"bodies of {len(v.supervoxels(a))} supervoxels each, meshed from the labels (no source)\n"
          f"  first mesh of both {first:.2f} s\n  merge + merged mesh {fmt(merge_t)}\n  undo + mesh {fmt(undo_t)}")
    # faces of the merged body: simplified (the default) against marching cubes' raw output
    v.merge(a, [b])
    simplified = lm.mesh(a, v.uuid)
    raw_t = time.perf_counter()
    raw = BodyMesher(lm, source=None, simplify=False).mesh(a, v)
    raw_t = time.perf_counter() - raw_t
    print(f"  merged body faces: simplified {len(simplified.faces):,} vs raw {len(raw.faces):,} "
          f"({len(raw.faces) / max(1, len(simplified.faces)):.1f}x fewer; raw meshing took {raw_t:.2f} s)")
    repo.close()


def _as_mesh(m: object) -> object:
    from napari_shardscope.core.formats.precomputed.meshes import MeshData

    return MeshData(0, m.vertices.astype("float32"), m.faces.astype("uint32"))  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
