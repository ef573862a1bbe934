"""Shared pieces of the remotes tests: a small labelmap repository, edits, and "bit-identical" checks."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from napari_shardscope.core.labelmap import create_labelmap, open_labelmap
from napari_shardscope.core.versioned import Repository, create_repository
from napari_shardscope.core.versioned.node import NodeEntry
from napari_shardscope.core.versioned.remotes.pack import (
    decode_data,
    decode_node,
    encode_data_and_keys,
    encode_node,
    node_content,
)
from napari_shardscope.core.versioned.remotes.store import NodeRef, RemoteStore
from tests.core.labelmap.volumes import voronoi_supervoxels, write_precomputed

FACTORS = ((1, 1, 1), (1, 2, 2))
SHAPE = (8, 32, 32)


def write_base(path: Path, seed: int = 5) -> np.ndarray:
    data = voronoi_supervoxels(SHAPE, 24, seed=seed)
    write_precomputed(path, data, FACTORS, chunk_xyz=(16, 16, 4))
    return data


def make_repo(path: Path, base: Path) -> Repository:
    """A repository with labelmap ``seg`` over ``base`` (each supervoxel its own body), root committed."""
    repo = create_repository(path)
    create_labelmap(repo, "seg", base, block=8)
    kv = repo.create_instance("notes", "keyvalue")
    with repo.write(repo.root) as w:
        w.put(kv, b"about", b"the base")
    repo.commit(repo.root, "base")
    return repo


def edit(repo: Repository, kind: str, rng: np.random.Generator, bodies: list[int] | None = None) -> dict[str, Any]:
    """One committed edit on main: merge two bodies or cleave one supervoxel off a body."""
    lm = open_labelmap(repo, "seg")
    head = repo.head("main")
    v = head if not head.locked else repo.new_version(head)
    at = lm.at(v)
    pool = bodies if bodies is not None else sorted({at.body_of(int(s)) for s in lm.index_summary().supervoxels})
    pool = [b for b in pool if at.exists(b)]
    out: dict[str, Any] = {"version": v.uuid}
    if kind == "merge" and len(pool) >= 2:
        a, b = (int(x) for x in rng.choice(pool, 2, replace=False))
        m = at.merge(a, [b])
        out.update(kind="merge", bodies=[a, b], mutation=m.mutation_id)
    else:
        multi = [b for b in pool if len(at.supervoxels(b)) > 1]
        if multi:
            body = int(rng.choice(multi))
            sv = at.supervoxels(body)[0]
            new = at.cleave(body, [sv])
            out.update(kind="cleave", bodies=[body], new_body=new)
        else:
            a, b = (int(x) for x in rng.choice(pool, 2, replace=False))
            m = at.merge(a, [b])
            out.update(kind="merge", bodies=[a, b], mutation=m.mutation_id)
    out["mutation"] = at.mutations(own=True)[-1].mutation.mutation_id
    repo.commit(v, f"{out['kind']} {out['bodies']}")
    return out


def pushed_with_a_merge(path: Path, base: Path, remote: Path) -> Repository:
    """A repository at ``path`` over ``base`` with one merge, pushed to the directory remote ``remote`` as
    ``origin``; left open."""
    from napari_shardscope.core.versioned import remotes as R

    repo = make_repo(path, base)
    edit(repo, "merge", np.random.default_rng(5))
    R.add_remote(repo, "origin", str(remote))
    R.push(repo)
    return repo


def bodies_at(repo: Repository, ref: str) -> list[np.ndarray]:
    """The version's body labels at every scale."""
    lm = open_labelmap(repo, "seg")
    at = lm.at(ref)
    return [at.read_bodies(scale=s) for s in range(len(FACTORS))]


def made_ids(repo: Repository) -> tuple[set[int], set[int]]:
    """(mutation ids, new body ids) of the edits this repository's versions themselves logged."""
    lm = open_labelmap(repo, "seg")
    mutations: set[int] = set()
    bodies: set[int] = set()
    for v in repo.versions():
        for h in lm.at(v).mutations(own=True):
            m = h.mutation
            if m.operation in ("merge", "cleave", "split-supervoxel", "split-body"):
                mutations.add(m.mutation_id)
            if m.operation == "cleave":
                bodies.add(int(m.args["new_body"]))
    return mutations, bodies


def shift_head_listing(url: str) -> str:
    """Re-write the key listing of the remote's main head one byte off after its first value, hash, node object
    and refs made consistent (as a writer with a bug would leave them); the head's version."""
    store = RemoteStore(url)
    refs, generation = store.require_refs()
    head = refs.branches["main"]
    header = decode_node(head.object, store.get_object(head.object))
    content = node_content(header, [r for name in header.data
                                    for r in decode_data(name, store.get_object(name), header.instances)])
    first = next(i for i, e in enumerate(content.entries) if e.value is not None)
    grown = NodeEntry(content.entries[first].instance, content.entries[first].key,
                      (content.entries[first].value or b"") + b"\0")
    entries = (*content.entries[:first], grown, *content.entries[first + 1:])
    _, _, listing = encode_data_and_keys(dataclasses.replace(content, entries=entries))
    keys = store.put_object(listing, "key listing")
    node = store.put_object(encode_node(content, dict(header.parents), header.data, header.instances,
                                        header.region, keys), "node")
    assert node != head.object and keys != header.keys
    moved = dataclasses.replace(refs, branches={**refs.branches, "main": NodeRef(head.node, node)})
    assert store.swap_refs(moved, generation) is not None
    return header.uuid
