"""``synapses(body)`` against the brute-force filter of every site by the body under its point.

The model machines of ``test_connectome_model`` (a versioned-only instance) and
``test_connectome_base`` (an instance over an imported base) run random labelmap merges, cleaves,
supervoxel splits, undo/redo, synapse edits, commits and branches; after every step
``synapses(body)`` of every body must equal what a scan of every annotation derives (each site's
and each partner's body read from the labelmap's voxels at that version). A second test checks the
cost: the query reads the records of the body's sites (and their partners), not those of the
other bodies that share its blocks.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import invariant

from napari_shardscope.core.annotation import add_many, create_annotation_instance
from napari_shardscope.core.annotation.body_sites import _sites_indexed
from napari_shardscope.core.annotation.connections import SynapseSite
from napari_shardscope.core.annotation.points import supervoxels_at
from napari_shardscope.core.annotation.version import AnnotationVersion
from napari_shardscope.core.labelmap import create_labelmap
from napari_shardscope.core.versioned import create_repository
from tests.core.annotation.test_annotation_model import BLOCK, SHAPE, base_volume
from tests.core.annotation.test_connectome_base import BasedConnectomeMachine, _table
from tests.core.annotation.test_connectome_model import ConnectomeMachine
from tests.hypothesis_depth import examples


def brute_force_synapses(v: Any) -> dict[int, list[SynapseSite]]:
    """Every ``pre``/``post`` annotation of the version, grouped by the body under its point."""
    every = {a.id: a for a in v.all()}
    lmv = v.instance.labelmap.at(v.uuid)
    ids = sorted(every)
    svs = supervoxels_at(lmv, [every[i].point for i in ids], v.instance.block)
    body = dict(zip(ids, (int(b) for b in lmv.bodies_of(svs).tolist()), strict=True))
    out: dict[int, list[SynapseSite]] = {}
    for i in ids:
        a = every[i]
        if a.kind not in ("pre", "post") or not body[i]:
            continue
        links = tuple((r.to, body[r.to]) for r in a.relationships if r.rel in ("PreSynTo", "PostSynTo"))
        out.setdefault(body[i], []).append(SynapseSite(a, body[i], links))
    return out


def check_synapses(machine: Any) -> None:
    v = machine.v
    assert _sites_indexed(v)  # the supervoxel index, not the fallback through the body's blocks
    truth = brute_force_synapses(v)
    for body in machine.bodies():
        assert v.synapses(body) == truth.get(body, []), body


class SynapsesMachine(ConnectomeMachine):
    @invariant()
    def connectome_equals_recount(self) -> None:  # replaces the connectome check: synapses only
        check_synapses(self)


class BasedSynapsesMachine(BasedConnectomeMachine):
    @invariant()
    def connectome_equals_recount(self) -> None:
        check_synapses(self)


# Examples bounded for the default run (tests/hypothesis_depth.py): each step's invariant scans every annotation of
# the version and reads every body's synapses, so the cost is examples x steps; the default run keeps every step of a
# long sequence (20 examples before, 6 now) and ``--hypothesis-profile long`` searches twenty times as many.
_settings = settings(max_examples=examples(6), stateful_step_count=20, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow])
TestSynapsesModel = SynapsesMachine.TestCase
TestSynapsesModel.settings = _settings
TestBasedSynapsesModel = BasedSynapsesMachine.TestCase
TestBasedSynapsesModel.settings = _settings


@pytest.mark.parametrize("based", [False, True], ids=["versioned", "base"])
def test_synapses_of_a_body_read_only_its_sites_and_their_partners(based: bool, monkeypatch: pytest.MonkeyPatch
                                                                   ) -> None:
    """Bodies share blocks: a query through the blocks of the body (the former path) read the other
    bodies' sites too; the per-supervoxel index reads the body's own."""
    seg, _ = base_volume()
    repo = create_repository(None, engine="memory")
    lm = create_labelmap(repo, "seg", seg, block=BLOCK)
    if based:
        root = Path(tempfile.mkdtemp(prefix="synapses-cost-"))
        inst = create_annotation_instance(repo, "syn", labelmap=lm, base=_table(root / "syn.parquet", 150, 7),
                                          base_dir=root / "base")
    else:
        inst = create_annotation_instance(repo, "syn", labelmap=lm)
        rng = np.random.default_rng(7)
        pts = rng.integers(0, SHAPE, size=(300, 3))
        add_many(inst.at("main"), ["pre"] * 150 + ["post"] * 150, pts,
                 synapses=[(i, 150 + i) for i in range(150)])
    v = inst.at("main")
    truth = brute_force_synapses(v)
    read: list[int] = []
    real = AnnotationVersion._records

    def spy(self: Any, view: Any, ids: Any) -> Any:
        ids = list(ids)
        read.extend(ids)
        return real(self, view, ids)

    monkeypatch.setattr(AnnotationVersion, "_records", spy)
    for body, sites in truth.items():
        read.clear()
        assert v.synapses(body) == sites
        allowed = {s.annotation.id for s in sites} | {i for s in sites for i, _ in s.partners}
        assert set(read) <= allowed, (body, sorted(set(read) - allowed)[:10])


def test_instances_and_bases_from_before_the_supervoxel_index_are_still_answered(tmp_path: Path) -> None:
    """A format-2 instance (no ``v`` keys) and a base without its ids by supervoxel use the former path."""
    from napari_shardscope.core.annotation.instance import TYPE_NAME, AnnotationInstance

    seg, _ = base_volume()
    repo = create_repository(None, engine="memory")
    lm = create_labelmap(repo, "seg", seg, block=BLOCK)
    new = create_annotation_instance(repo, "new", labelmap=lm, base=_table(tmp_path / "syn.parquet", 60, 2),
                                     base_dir=tmp_path / "base")
    doc = dict(new.instance.config["base"])
    assert "sites" in doc and new.base is not None and new.base.sites_indexed
    del doc["sites"], doc["site_rows"]  # what the previous import wrote
    old_base = AnnotationInstance(repo, repo.create_instance("old-base", TYPE_NAME,
                                                             {"format": 3, "labelmap": "seg", "base": doc}), lm)
    old_fmt = AnnotationInstance(repo, repo.create_instance("old-format", TYPE_NAME,
                                                            {"format": 2, "labelmap": "seg"}), lm)
    rng = np.random.default_rng(3)
    pts = rng.integers(0, SHAPE, size=(40, 3))
    v2 = old_fmt.at("main")
    for i, p in enumerate(pts.tolist()):
        v2.add("pre" if i % 2 == 0 else "post", p)
    ids = [a.id for a in v2.all()]
    for i in range(0, len(ids) - 1, 2):
        v2.relate(ids[i], ids[i + 1])
    for inst in (new, old_base, old_fmt):
        v = inst.at("main")
        assert _sites_indexed(v) == (inst is new)
        truth = brute_force_synapses(v)
        assert truth
        for body in sorted(int(b) for b in np.unique(lm.at("main").read_bodies()) if b):
            assert v.synapses(body) == truth.get(body, []), (inst.name, body)
