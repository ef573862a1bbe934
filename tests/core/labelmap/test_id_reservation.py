"""The labelmap's id-reservation seam: the labelmap asks a protocol it owns, the remotes answer it.

The labelmap must not import the transport (import contract ``labelmap-not-remotes``), yet a clone's
labelmap must still take its ids from its remote whoever opens it: importing the package wires the
remotes' implementation in, and the labelmap asks whatever is wired.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from napari_shardscope.core.labelmap import create_labelmap
from napari_shardscope.core.labelmap.id_reservation import IdReservation, id_reservation, use_id_reservation
from napari_shardscope.core.sample_data import SampleDataset
from napari_shardscope.core.versioned import Repository, create_repository
from napari_shardscope.core.versioned.errors import RegionError
from napari_shardscope.core.versioned.remotes import errors as remote_errors
from napari_shardscope.core.versioned.remotes.reservation import RemoteIdReservation
from tests.volume_cases import run_sample


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> SampleDataset:
    return run_sample(tmp_path_factory)  # made once per test run, shared by the xdist workers


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Repository]:
    r = create_repository(tmp_path / "repo")
    yield r
    r.close()


class Recorded:
    """An id reservation that hands out fixed blocks and records what it was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, int]] = []

    def reserve_ids(self, repo: Repository, counter: str, *, minimum: int) -> range:
        self.asked.append((counter, minimum))
        block = range(minimum, minimum + 5000)
        repo.add_id_block(counter, block)
        return block

    def region_stamp(self, repo: Repository) -> tuple[int, int] | None:
        return None

    def region_of(self, repo: Repository) -> list[list[int]] | None:
        return None


def test_importing_the_labelmap_alone_wires_the_remotes_in() -> None:
    code = ("import napari_shardscope.core.labelmap.labelmap as m, sys; "
            "from napari_shardscope.core.labelmap.id_reservation import id_reservation; "
            "print(type(id_reservation()).__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == RemoteIdReservation.__name__
    assert isinstance(id_reservation(), RemoteIdReservation)
    assert remote_errors.RegionError is RegionError  # the old import path names the same class


def test_a_clone_labelmap_takes_its_ids_from_the_wired_reservation(sample: SampleDataset, repo: Repository) -> None:
    lm = create_labelmap(repo, "seg", sample.segmentation, agglomeration=sample.bodies)
    assert lm.top_up_ids() == {}  # no id remote: the repository hands out its own, nothing is asked
    repo.set_id_source("origin")
    recorded = Recorded()
    wired: IdReservation = id_reservation()
    use_id_reservation(recorded)
    try:
        left = lm.top_up_ids()
    finally:
        use_id_reservation(wired)
    floors = lm.id_floors()
    assert sorted(recorded.asked) == sorted(floors.items())
    assert left == {counter: 5000 for counter in floors}
