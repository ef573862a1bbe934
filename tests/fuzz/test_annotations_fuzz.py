"""The annotation parsers under the fuzz suite's rules: a seeded run of damaged collections finds nothing.

The long campaign: ``SHARDSCOPE_FUZZ_SLOW=1`` runs ten times as many seeds.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.fuzz.annotations import (
    FINDINGS,
    Report,
    build_annotation_seeds,
    fuzz_annotations,
    make_case,
)

#: 31 of range(0, 60) (the run until 2026-12-05) that reach every (seed collection, mutation kind) pair the 60
#: reached: a greedy cover (``tests.fuzz.annotations.covering_seeds(range(0, 60), ...)`` chooses them again after
#: the generator changes); the coverage assertions below fail when they stop reaching one.
CI_SEEDS = (0, 4, 5, 6, 7, 9, 11, 12, 16, 17, 20, 23, 24, 26, 27, 29, 30, 32, 33, 34, 35, 38, 41, 44, 48, 49, 50, 53,
            55, 56, 58)
#: The 10 seed collections (5 kinds, sharded and plain) and the mutation kinds each meets in ``CI_SEEDS``.
KINDS_MET = {"bits", "bytes", "emptied", "gzip", "head", "info", "random", "truncated", "uint64"}
PAIRS_MET = 58
SLOW_SEEDS = range(50_000, 50_600)


@pytest.fixture(scope="module")
def seeds(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return build_annotation_seeds(tmp_path_factory.mktemp("annotation-seeds"))


def _text(report: Report) -> str:
    return "\n".join(f"seed={f['seed']} {f['class']} in {f.get('op')}: {f['detail']}\n{f.get('trace', '')}"
                     for f in report.findings[:8])


def test_a_seeded_run_of_hostile_annotation_collections_finds_nothing(seeds: list[Path], tmp_path: Path) -> None:
    report = fuzz_annotations(CI_SEEDS, seeds, tmp_path)
    assert report.cases == len(CI_SEEDS)
    assert not report.findings, _text(report)
    # the run did damage and reached both ends: typed refusals and clean reads
    assert report.outcomes["ok"] > 0 and report.outcomes["corrupt"] > 0 and report.outcomes["argument"] > 0
    assert set(report.mutations) == KINDS_MET, report.mutations
    assert len(report.pairs) == PAIRS_MET, sorted(report.pairs)  # every collection met its kinds of damage
    assert not set(report.outcomes) & set(FINDINGS)


def test_a_seed_always_builds_the_same_case(seeds: list[Path], tmp_path: Path) -> None:
    bomb = b"\x1f\x8b"
    a, ma = make_case(77, seeds, tmp_path / "a", bomb)
    b, mb = make_case(77, seeds, tmp_path / "b", bomb)
    assert ma == mb
    assert {p.relative_to(a): p.read_bytes() for p in a.rglob("*") if p.is_file()} == \
        {p.relative_to(b): p.read_bytes() for p in b.rglob("*") if p.is_file()}


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("SHARDSCOPE_FUZZ_SLOW"), reason="set SHARDSCOPE_FUZZ_SLOW=1 (about 10 minutes)")
def test_a_longer_seeded_run_finds_nothing(seeds: list[Path], tmp_path: Path) -> None:
    report = fuzz_annotations(SLOW_SEEDS, seeds, tmp_path)
    assert not report.findings, _text(report)
