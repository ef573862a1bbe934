"""Builds a labelmap repository with the replay-era code (format 1) and records what it reads.

Run by tests/core/labelmap/test_migrate.py in a subprocess whose ``PYTHONPATH`` puts the old source
tree (``git archive 0a4bfea src``) first, so every byte of the repository is written by the code of
that commit. Uses only the public API both formats share. Writes, next to the repository,
``expected.json`` (per version: every supervoxel's body, body sizes and supervoxels, undo/redo
availability, histories and mutation ids) and ``bodies-<uuid>.npy`` (every voxel's body).

Usage: python legacy_builder.py OUT_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from napari_shardscope.core.labelmap import create_labelmap, open_labelmap
from napari_shardscope.core.labelmap.branch_merge import merge_branches
from napari_shardscope.core.versioned import create_repository
from tests.core.labelmap.volumes import voronoi_supervoxels, write_precomputed

SHAPE = (8, 24, 24)


def snapshot(lm: Any, uuid: str, out: Path) -> dict[str, Any]:  # lm: a Labelmap of the old or the new code
    v = lm.at(uuid)
    bodies = v.read_bodies()
    np.save(out / f"bodies-{uuid}.npy", bodies)
    svs = sorted(int(s) for s in np.unique(v.read_supervoxels()) if s)
    body_of = {sv: v.body_of(sv) for sv in svs}
    bodies_set = sorted(set(body_of.values()))
    return {
        "bodies": {str(k): b for k, b in body_of.items()},
        "sizes": {str(b): v.size(b) for b in bodies_set},
        "supervoxels": {str(b): v.supervoxels(b) for b in bodies_set},
        "history": {str(b): [h.mutation.mutation_id for h in v.history(b)] for b in bodies_set},
        "bbox": {str(b): [list(v.bbox(b).lo), list(v.bbox(b).hi)] for b in bodies_set},
        "mutations": [e.mutation.mutation_id for e in v.mutations()],
        "can_undo": v.can_undo,
        "can_redo": v.can_redo,
    }


def main(out: Path) -> None:
    data = voronoi_supervoxels(SHAPE, 20, seed=23)
    write_precomputed(out / "seg", data, ((1, 1, 1), (1, 2, 2)), chunk_xyz=(8, 8, 4))
    ids = [int(s) for s in np.unique(data)]
    repo = create_repository(out / "repo")
    lm = create_labelmap(repo, "seg", out / "seg", agglomeration={ids[i]: ids[i - 1] for i in range(1, 8, 2)},
                         block=8)
    root = repo.root
    v = lm.at(root)
    v.merge(ids[0], [ids[2]])
    where = np.argwhere(data == ids[4])
    a, b = v.split_supervoxel(ids[4], where[: len(where) // 2])
    new = v.cleave(ids[0], [ids[2]])
    v.merge(ids[4], [ids[6]])
    v.undo()
    v.undo()
    v.redo()
    repo.commit(root.uuid, "first edits")
    main_v = repo.new_version(root.uuid)
    alt = repo.new_version(root.uuid, "alt")
    lm.at(main_v.uuid).merge(ids[8], [ids[9], ids[10]])
    lm.at(main_v.uuid).cleave(ids[8], [ids[9]])
    lm.at(alt.uuid).merge(ids[12], [ids[13]])
    w = np.argwhere(data == ids[14])
    lm.at(alt.uuid).split_supervoxel(ids[14], w[: max(1, len(w) // 3)])
    lm.at(alt.uuid).merge(ids[12], [ids[15]])
    repo.commit(main_v.uuid, "main")
    repo.commit(alt.uuid, "alt")
    merged = merge_branches(lm, main_v.uuid, alt.uuid, user="builder").version
    lm.at(merged.uuid).merge(ids[16], [ids[17]])
    repo.commit(merged.uuid, "merged")
    # a plain store merge where only one side edited the labelmap (format 1 replays it; so must format 2)
    side = repo.new_version(merged.uuid, "side")
    lm.at(side.uuid).merge(ids[18], [ids[19]])
    repo.commit(side.uuid, "side edit")
    quiet = repo.new_version(merged.uuid, "quiet")
    repo.commit(quiet.uuid, "no labelmap edit")
    store_merged = repo.merge(quiet.uuid, side.uuid, policy="ours", branch="store-merged").version
    repo.commit(store_merged.uuid, "store merge")
    head = repo.new_version(merged.uuid)
    hv = lm.at(head.uuid)
    hv.merge(ids[8], [ids[11]])
    before_last = snapshot(lm, head.uuid, out)
    np.save(out / "before-last.npy", hv.read_bodies())
    hv.cleave(ids[8], [ids[11]])
    expected: dict[str, Any] = {"versions": {}, "head": head.uuid, "before_last": before_last, "ids": ids,
                "split": [a, b], "cleaved": new}
    lm2 = open_labelmap(repo, "seg")
    for version in repo.versions():
        expected["versions"][version.uuid] = snapshot(lm2, version.uuid, out)
    (out / "expected.json").write_text(json.dumps(expected))
    repo.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
