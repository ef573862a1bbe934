"""Data instances and their unversioned data between a repository and a remote, and a partial clone's
subset of them (``--instances``).

A fetch (or clone) adds the remote's instances and the unversioned pages this repository lacks,
verified into the fetch's :class:`~.spool.Spool` first; a push sends the pages the remote lacks and
records every local instance in the refs.
"""

from __future__ import annotations

import dataclasses

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.versioned.node import NodeContent
from napari_shardscope.core.versioned.remotes import config as C
from napari_shardscope.core.versioned.remotes import pages
from napari_shardscope.core.versioned.remotes.spool import Spool
from napari_shardscope.core.versioned.remotes.store import Refs, RemoteInstance, RemoteStore
from napari_shardscope.core.versioned.repository import Repository


def instances_in(repo: Repository, refs: Refs) -> dict[str, RemoteInstance]:
    """The remote's instances this repository holds (a partial clone: only its own)."""
    only = C.instances_of(repo)
    return {name: ri for name, ri in refs.instances.items() if only is None or name in only}


def check_unversioned(repo: Repository, store: RemoteStore, refs: Refs, spool: Spool) -> list[pages.Incoming]:
    """Download, verify and decode the unversioned pages this repository lacks, into ``spool``."""
    out = []
    for name, ri in instances_in(repo, refs).items():
        incoming = pages.plan_fetch(repo, store, name, ri, spool.put)
        if incoming is not None:
            out.append(incoming)
    return out


def adopt_instances(repo: Repository, refs: Refs, spool: Spool, incoming: list[pages.Incoming]) -> None:
    """Add the remote's instances and the unversioned pages :func:`check_unversioned` verified."""
    for name, ri in instances_in(repo, refs).items():
        repo.adopt_instance(name, ri.type, ri.config)
    for got in incoming:
        pages.adopt_pages(repo, got, spool.get)


def sync_instances_in(repo: Repository, store: RemoteStore, refs: Refs) -> None:
    with Spool(C.spool_directory(repo)) as spool:
        adopt_instances(repo, refs, spool, check_unversioned(repo, store, refs, spool))


def instances_out(repo: Repository, store: RemoteStore, refs: Refs | None) -> dict[str, RemoteInstance]:
    out = dict(refs.instances) if refs is not None else {}
    for inst in repo.instances():
        have = out.get(inst.name)
        if have is not None and (have.type != inst.type or dict(have.config) != dict(inst.config)):
            raise ArgumentError(f"instance {inst.name!r} has another type or configuration on {store.url}")
        sent = pages.push_pages(repo, store, inst, have)
        if sent is not None:
            out[inst.name] = sent
        elif have is None:
            out[inst.name] = RemoteInstance(inst.type, dict(inst.config))
    return out


def only_instances(node: NodeContent, instances: set[str] | None) -> NodeContent:
    """``node`` without the data of instances a partial clone leaves out."""
    if instances is None:
        return node
    return dataclasses.replace(node, entries=tuple(e for e in node.entries if e.instance in instances),
                               logs=tuple(g for g in node.logs if g.instance in instances))
