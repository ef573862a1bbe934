"""Hostile remotes in CI (a short seeded run) and the long run (``SHARDSCOPE_FUZZ_SLOW=1``): oversized
refs/ids/objects, zlib bombs with valid hashes, lying sizes and flipped bytes through clone, fetch and
``remote check`` (``tests/fuzz/remotes.py``). Every case must end in success or a typed error, within
its time and memory bound, and a refused fetch must leave the repository as it was."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.fuzz.remotes import MUTATIONS, fuzz_remotes, summary

#: Two rounds of every mutation (the first mutation of a case cycles with its seed).
CI_SEEDS = range(0, 2 * len(MUTATIONS))
SLOW_SEEDS = range(50_000, 50_300)


@pytest.fixture(scope="module")
def seed_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz-remote-seed")


def test_a_seeded_run_of_hostile_remotes_finds_nothing(seed_root: Path) -> None:
    results = fuzz_remotes(CI_SEEDS, seed_root)
    assert not any(r.findings for r in results), summary(results)
    assert {m for r in results for m in r.mutations} == {name for name, _ in MUTATIONS}, summary(results)
    outcomes = [o for r in results for o in r.outcomes.values()]
    assert len(outcomes) == 3 * len(CI_SEEDS), summary(results)  # every case ran clone, fetch and check
    assert "CorruptObjectError" in outcomes, summary(results)


def test_a_version_that_is_its_own_ancestor_is_a_typed_error(seed_root: Path) -> None:
    """Found by the campaign of 2026-12-05 (seeds 5300007, 5300049): two hostile versions on top of main
    with the same UUID make a version its own parent; the fetch walk pushed it forever (5.7 GiB, then an
    untyped MemoryError). Now a damaged remote (StoreCorruptError) within the case's bounds."""
    results = fuzz_remotes([5300007], seed_root)
    assert not any(r.findings for r in results), summary(results)
    assert results[0].outcomes["clone"] == "StoreCorruptError", summary(results)


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("SHARDSCOPE_FUZZ_SLOW"), reason="set SHARDSCOPE_FUZZ_SLOW=1 (about 30 minutes)")
def test_a_longer_run_of_hostile_remotes_finds_nothing(seed_root: Path) -> None:
    results = fuzz_remotes(SLOW_SEEDS, seed_root)
    assert not any(r.findings for r in results), summary(results)
