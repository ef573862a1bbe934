"""Hostile remotes in CI (a short seeded run) and the long run (``SHARDSCOPE_FUZZ_SLOW=1``): oversized
refs/ids/objects, zlib bombs with valid hashes, lying sizes and flipped bytes through clone, fetch and
``remote check`` (``tests/fuzz/remotes.py``), and a key listing that points elsewhere than its data, through a
lazy clone's reads compared with a prefetching clone's. Every case must end in success or a typed error, within
its time and memory bound, and a refused fetch must leave the repository as it was. Findings come only from
shardscope's code: a mutation whose input an earlier one destroyed is skipped, and the fuzzer's own failures
are harness errors (which fail these tests too, since such a case tested nothing)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.fuzz.remotes import GENERATION_2, MUTATIONS_2, fuzz_remotes, make_remote_case, summary

#: One round of every mutation (the first mutation of a case cycles with its seed; a second one, when the
#: seed adds it, is random): each case is a spawned worker of about 2 CPU s, and the run was two rounds (18
#: cases). One round still reaches both refusals the test asserts (CorruptObjectError, problems_found); the long
#: run (``SHARDSCOPE_FUZZ_SLOW=1``, 300 cases) goes deep.
CI_SEEDS = range(GENERATION_2, GENERATION_2 + len(MUTATIONS_2))
SLOW_SEEDS = range(GENERATION_2 + 50_000, GENERATION_2 + 50_300)


@pytest.fixture(scope="module")
def seed_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz-remote-seed")


def test_a_seeded_run_of_hostile_remotes_finds_nothing(seed_root: Path) -> None:
    results = fuzz_remotes(CI_SEEDS, seed_root)
    assert not any(r.findings or r.harness_errors for r in results), summary(results)
    assert {m for r in results for m in r.mutations} == {name for name, _ in MUTATIONS_2}, summary(results)
    outcomes = [o for r in results for o in r.outcomes.values()]
    # every case ran clone, fetch and check; a case whose lazy clone succeeded also read it and prefetched
    assert all({"clone", "fetch", "check"} <= r.outcomes.keys() for r in results), summary(results)
    assert all(({"read", "prefetch"} <= r.outcomes.keys()) == (r.outcomes["clone"] == "ok") for r in results), \
        summary(results)
    # the lying listing (alone in its seed) is refused by the lazy read and named by check; the eager clone reads
    listing = next(r.outcomes for r in results if r.mutations == ["lying_listing"])
    assert (listing["read"], listing["prefetch"], listing["check"]) == (
        "CorruptObjectError", "ok", "problems_found"), summary(results)
    assert "CorruptObjectError" in outcomes, summary(results)
    assert "problems_found" in outcomes, summary(results)  # remote check's list is an outcome, not "ok"


def test_a_version_that_is_its_own_ancestor_is_a_typed_error(seed_root: Path) -> None:
    """Found by the campaign of 2026-12-05 (seeds 5300007, 5300049): two hostile versions on top of main
    with the same UUID make a version its own parent; the fetch walk pushed it forever (5.7 GiB, then an
    untyped MemoryError). Now a damaged remote (StoreCorruptError) within the case's bounds."""
    results = fuzz_remotes([5300007], seed_root)
    assert not any(r.findings or r.harness_errors for r in results), summary(results)
    assert results[0].outcomes["clone"] == "StoreCorruptError", summary(results)


def test_remote_check_faults_what_clone_and_fetch_refuse(seed_root: Path) -> None:
    """Found by the campaign of 2026-12-05 (seeds 5400026, 5400128, 5400161, 5400164): a damaged key listing
    or history pack made clone, and fetch, refuse the remote while ``remote check`` called it sound: it read
    neither. Now it reads both (``tests/core/versioned/remotes/test_check_coverage.py``, deterministic forgeries).

    The campaign's world was built with random UUIDs and the time of day, so those seeds damaged other bytes on
    every build (seed 5400161's flips once landed where nothing reads them, and this test failed); the world is
    now the same on every build (:func:`~tests.fuzz.remotes.build_seed`). In it, these seeds' flipped bytes are
    refused by clone and fetch (5400008), by clone alone (5400017) and by the lazy read alone (5400044): check
    must fault each."""
    results = fuzz_remotes([5400008, 5400017, 5400044], seed_root)
    assert not any(r.findings or r.harness_errors for r in results), summary(results)
    assert all(r.mutations == ["flipped_bytes"] for r in results), summary(results)
    refused = [sorted(op for op, o in r.outcomes.items() if o == "CorruptObjectError") for r in results]
    assert refused == [["clone", "fetch"], ["clone"], ["prefetch", "read"]], summary(results)
    assert [r.outcomes["check"] for r in results] == ["problems_found"] * 3, summary(results)


def test_a_mutation_whose_input_an_earlier_one_destroyed_is_skipped_not_a_crash(seed_root: Path) -> None:
    """Found re-running the campaign on the fixed code (2026-12-05, seeds 5300000 on): 8 of 286 cases were
    "crash" findings that were the fuzzer's own. Seed 5300081 flips bytes of ``refs.json`` (now not UTF-8),
    then ``lying_counts`` parsed it to move ``main`` and died with a UnicodeDecodeError in the worker before
    any of shardscope's code ran. The second mutation is now skipped and the case runs with the first."""
    results = fuzz_remotes([5300081], seed_root)
    assert not any(r.findings or r.harness_errors for r in results), summary(results)
    (result,) = results
    assert (result.mutations, result.skipped) == (["flipped_bytes"], ["lying_counts"]), summary(results)
    assert set(result.outcomes) == {"clone", "fetch", "check"}, summary(results)
    assert "skipped 1 {'lying_counts': 1}" in summary(results)


def test_a_mutation_never_reads_a_file_an_earlier_one_made_huge(seed_root: Path, tmp_path: Path) -> None:
    """Seed 5300136 makes ``refs.json`` a 5 GiB sparse file, then ``bomb_data`` read it whole to move
    ``main`` (a MemoryError under the worker's address-space limit, reported as a crash). The mutation
    looks at the size first and is skipped; the huge ``refs.json`` stays for clone, fetch and check."""
    fuzz_remotes([], seed_root)  # builds the seed remote
    case = make_remote_case(5300136, seed_root, tmp_path)
    assert (case.applied, case.skipped) == (["huge_refs"], ["bomb_data"])
    assert (tmp_path / "remote" / "refs.json").stat().st_size == 5 << 30


def test_the_fuzzers_own_failure_is_a_harness_error_never_a_finding(tmp_path: Path) -> None:
    """A seed directory that says it is ready but holds no remote: building every case fails in the worker.
    That is the fuzzer's error, reported as such, never as a crash of shardscope."""
    (tmp_path / "seed-ready").write_text("ok")
    results = fuzz_remotes([0], tmp_path)
    (result,) = results
    assert result.findings == [], summary(results)
    assert len(result.harness_errors) == 1 and "FileNotFoundError" in result.harness_errors[0], summary(results)
    assert result.outcomes == {}
    assert "0 finding(s)" in summary(results) and "1 harness error(s)" in summary(results)


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("SHARDSCOPE_FUZZ_SLOW"), reason="set SHARDSCOPE_FUZZ_SLOW=1 (about 30 minutes)")
def test_a_longer_run_of_hostile_remotes_finds_nothing(seed_root: Path) -> None:
    results = fuzz_remotes(SLOW_SEEDS, seed_root)
    assert not any(r.findings for r in results), summary(results)
