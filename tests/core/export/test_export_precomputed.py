"""Export to sharded precomputed: read back by TensorStore and CloudVolume, same bytes on a cluster."""

from __future__ import annotations

import hashlib
import itertools
import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorstore as ts
from hypothesis import given
from hypothesis import strategies as st

from napari_shardscope.core.bytestore import LocalByteStore
from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.export.precomputed import export_precomputed
from napari_shardscope.core.export.prepare import claim_destination
from napari_shardscope.core.export.sharding_params import choose_sharding
from napari_shardscope.core.export.source import ArraySource, VolumeSource
from napari_shardscope.core.formats import open_dataset
from napari_shardscope.core.formats.precomputed.sharding import ShardingSpec, assign_chunk_ids
from napari_shardscope.core.sample_data import SampleDataset
from tests.cli_batch import run_commands
from tests.volume_cases import sample  # noqa: F401  (fixture: the session's sample, read only here)


def _source(seed: int = 0) -> ArraySource:
    rng = np.random.default_rng(seed)
    s0 = rng.integers(0, 50, size=(37, 70, 90), dtype=np.uint64)  # z, y, x: not multiples of the chunk
    s1 = s0[::2, ::2, ::2].copy()
    s2 = s1[:, ::2, ::2].copy()
    return ArraySource((s0, s1, s2), ((4.0, 4.0, 40.0), (8.0, 8.0, 80.0), (16.0, 16.0, 80.0)))


def _digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_export_reads_back_in_tensorstore_and_cloudvolume(tmp_path: Path) -> None:
    from cloudvolume import CloudVolume

    source = _source()
    seen: list[tuple[int, int]] = []
    report = export_precomputed(
        source, str(tmp_path / "out"), chunk_size=(32, 32, 16), progress=lambda d, t, w: seen.append((d, t))
    )
    assert report.info["scales"][0]["key"] == "4_4_40" and len(report.info["scales"]) == 3
    assert seen and seen[-1][0] == seen[-1][1] == len(report.shards)
    for level, expected in enumerate(source.arrays):
        store = ts.open(
            {
                "driver": "neuroglancer_precomputed",
                "kvstore": {"driver": "file", "path": str(tmp_path / "out")},
                "scale_index": level,
            }
        ).result()
        np.testing.assert_array_equal(store[..., 0].read().result().T, expected)
        cv = CloudVolume(f"file://{tmp_path / 'out'}", mip=level, progress=False, fill_missing=False)
        np.testing.assert_array_equal(np.asarray(cv[:, :, :])[..., 0].T, expected)
    assert list(open_dataset(tmp_path / "out").inspector().validate()) == []


def test_distributed_cluster_writes_the_same_bytes(tmp_path: Path) -> None:
    from distributed import Client, LocalCluster

    source = _source(1)
    export_precomputed(source, str(tmp_path / "threads"), chunk_size=(32, 32, 16))
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        report = export_precomputed(source, str(tmp_path / "cluster"), chunk_size=(32, 32, 16), scheduler=client)
        workers = {w for w in client.scheduler_info()["workers"]}
    assert len(workers) == 2 and report.shards
    assert _digests(tmp_path / "threads") == _digests(tmp_path / "cluster")


def test_convert_a_volume(tmp_path: Path, sample: SampleDataset) -> None:  # noqa: F811
    from napari_shardscope.core.volumes import open_volume

    export_precomputed(VolumeSource(str(sample.segmentation)), str(tmp_path / "copy"))
    original, copy = open_volume(str(sample.segmentation)), open_volume(str(tmp_path / "copy"))
    assert [lv.shape for lv in copy.levels] == [lv.shape for lv in original.levels]
    for a, b in zip(original.levels, copy.levels, strict=True):
        np.testing.assert_array_equal(a.array.read(), b.array.read())
        assert a.voxel_size == b.voxel_size and a.translate == b.translate


def test_refuses_to_overwrite(tmp_path: Path) -> None:
    export_precomputed(_source(), str(tmp_path / "out"), chunk_size=(64, 64, 64))
    before = _digests(tmp_path / "out")
    with pytest.raises(ArgumentError, match="already holds a precomputed dataset"):
        export_precomputed(_source(2), str(tmp_path / "out"))
    assert _digests(tmp_path / "out") == before


@given(st.lists(st.integers(1, 3000), min_size=3, max_size=3), st.sampled_from([2**12, 2**18, 2**21]))
def test_default_sharding_covers_the_grid(grid: list[int], chunk_bytes: int) -> None:
    spec = choose_sharding(grid, chunk_bytes)
    assert spec.hash == "identity" and spec.preshift_bits <= 10 and spec.minishard_bits <= 9
    total_bits = sum(max(0, g - 1).bit_length() for g in grid)
    assert spec.preshift_bits + spec.minishard_bits + spec.shard_bits == total_bits
    top = np.asarray([2**total_bits - 1], dtype=np.uint64)
    assert int(assign_chunk_ids(spec, top).shard[0]) == spec.num_shards - 1
    if total_bits >= 10:
        assert spec.preshift_bits == 10  # about a thousand chunks per minishard


def test_cli_export_then_validate(tmp_path: Path, sample: SampleDataset) -> None:  # noqa: F811
    # One process runs the command lines in turn (tests/cli_batch.py): what is checked is what each prints
    # and returns, not a process starting.
    seg, formats = sample.segmentation, ("precomputed", "zarr3")
    done = iter(run_commands([cmd for fmt in formats for cmd in (
        ["export", str(seg), str(tmp_path / fmt), "--format", fmt, "--json", "--quiet"],
        ["validate", str(tmp_path / fmt), "--quiet"],
        ["export", str(seg), str(tmp_path / fmt), "--format", fmt],
    )]))
    for _ in formats:
        run, validate, again = next(done), next(done), next(done)
        assert run.returncode == 0, run.stderr
        assert json.loads(run.stdout)["shard_files"] > 0
        assert validate.returncode == 0, validate.stderr
        assert again.returncode == 6 and "--overwrite" in again.stderr  # a refused write


def _read_tensorstore(path: Path, level: int) -> np.ndarray:
    spec = {"driver": "neuroglancer_precomputed", "kvstore": {"driver": "file", "path": str(path)},
            "scale_index": level}
    return np.asarray(ts.open(spec).result()[..., 0].read().result().T)


@pytest.mark.parametrize(
    "spec",
    [
        # murmurhash: shards are hash buckets, not id ranges
        ShardingSpec(preshift_bits=1, hash="murmurhash3_x86_128", minishard_bits=2, shard_bits=2,
                     minishard_index_encoding="gzip", data_encoding="gzip"),
        # identity with fewer bits than the grid's Morton code: high ids wrap around into the same shards
        ShardingSpec(preshift_bits=1, hash="identity", minishard_bits=1, shard_bits=1,
                     minishard_index_encoding="raw", data_encoding="raw"),
    ],
    ids=["murmurhash", "identity-wrapping"],
)
def test_a_given_sharding_spec_stores_every_chunk(tmp_path: Path, spec: ShardingSpec) -> None:
    source = _source(3)
    report = export_precomputed(source, str(tmp_path / "out"), chunk_size=(16, 16, 8), sharding=spec)
    assert all(sc["sharding"] == spec.to_json() for sc in report.info["scales"])
    grid0 = [-(-s // c) for s, c in zip((90, 70, 37), (16, 16, 8), strict=True)]
    assert sum(r.chunks for r in report.shards if r.scale == "4_4_40") == np.prod(grid0)
    for level, expected in enumerate(source.arrays):
        np.testing.assert_array_equal(_read_tensorstore(tmp_path / "out", level), expected)
    assert list(open_dataset(tmp_path / "out").inspector().validate()) == []


def test_one_sharding_spec_per_scale(tmp_path: Path) -> None:
    specs = [choose_sharding([6, 5, 5], 16 * 16 * 8 * 8, shard_bytes=1 << 16),
             ShardingSpec(preshift_bits=0, hash="murmurhash3_x86_128", minishard_bits=1, shard_bits=1,
                          minishard_index_encoding="raw", data_encoding="gzip"),
             ShardingSpec(preshift_bits=0, hash="identity", minishard_bits=0, shard_bits=0,
                          minishard_index_encoding="raw", data_encoding="raw")]
    source = _source(4)
    report = export_precomputed(source, str(tmp_path / "out"), chunk_size=(16, 16, 8), sharding=specs)
    assert [sc["sharding"] for sc in report.info["scales"]] == [s.to_json() for s in specs]
    for level, expected in enumerate(source.arrays):
        np.testing.assert_array_equal(_read_tensorstore(tmp_path / "out", level), expected)
    with pytest.raises(ArgumentError, match="got 2 specs for a source of 3 scales"):
        export_precomputed(source, str(tmp_path / "other"), sharding=specs[:2])
    assert not (tmp_path / "other").exists() or not any((tmp_path / "other").iterdir())


def test_cli_sets_the_sharding(tmp_path: Path, sample: SampleDataset) -> None:  # noqa: F811
    # The command lines run in one process (tests/cli_batch.py); each prints and returns as on its own.
    base = ["export", str(sample.segmentation)]
    spec = {"@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 2, "hash": "murmurhash3_x86_128",
            "minishard_bits": 2, "shard_bits": 3, "minishard_index_encoding": "gzip", "data_encoding": "gzip"}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    given_spec = {tmp_path / f"out{len(arg)}": arg for arg in (json.dumps(spec), f"@{tmp_path / 'spec.json'}")}
    budgets = {size: tmp_path / f"budget{size}" for size in ("2G", "64K")}
    refused = tmp_path / "refused"
    bad = {
        ("--sharding", "{not json"): "--sharding: invalid JSON",
        ("--sharding", json.dumps({**spec, "shard_bits": 70})): "shard_bits must be in [0, 64], got 70",
        ("--sharding", f"@{tmp_path / 'missing.json'}"): "cannot read",
        ("--shard-bytes", "lots"): "expected a size like 512M",
        ("--shard-shape", "64,64,64"): "--shard-shape is for --format zarr3",
    }
    commands = [cmd for dest, arg in given_spec.items()
                for cmd in ([*base, str(dest), "--sharding", arg, "--json", "--quiet"],
                            ["validate", str(dest), "--quiet"])]
    commands += [[*base, str(dest), "--shard-bytes", size, "--json", "--quiet"] for size, dest in budgets.items()]
    commands += [[*base, str(refused), opt, value] for opt, value in bad]
    commands.append([*base, str(tmp_path / "z"), "--format", "zarr3", "--sharding", json.dumps(spec)])
    done = iter(run_commands(commands))
    for dest in given_spec:
        run, validate = next(done), next(done)
        assert run.returncode == 0, run.stderr
        info = json.loads((dest / "info").read_text())
        assert all(sc["sharding"] == spec for sc in info["scales"])
        assert validate.returncode == 0, validate.stderr
    # a smaller shard budget for the default choice makes more, smaller shards
    counts = {}
    for size in budgets:
        run = next(done)
        assert run.returncode == 0, run.stderr
        counts[size] = json.loads(run.stdout)["shard_files"]
    assert counts["64K"] > counts["2G"]
    for (opt, value), message in bad.items():
        run = next(done)
        assert run.returncode == 2 and message in run.stderr, (opt, value, run.stderr)
    assert not refused.exists()
    run = next(done)
    assert run.returncode == 2 and "use --shard-shape" in run.stderr


@given(st.lists(st.integers(1, 3000), min_size=3, max_size=3), st.integers(2**10, 2**24), st.integers(2**10, 2**32))
def test_default_sharding_keeps_shards_under_the_budget(grid: list[int], chunk_bytes: int, shard_bytes: int) -> None:
    spec = choose_sharding(grid, chunk_bytes, shard_bytes=shard_bytes)
    chunks_per_shard = 1 << (spec.preshift_bits + spec.minishard_bits)
    total_bits = sum(max(0, g - 1).bit_length() for g in grid)
    # a shard holds at most the budget's worth of chunks (one chunk when a chunk alone exceeds it)
    assert chunks_per_shard * chunk_bytes <= max(shard_bytes, chunk_bytes)
    assert spec.preshift_bits + spec.minishard_bits + spec.shard_bits == total_bits


def _identity(shard_bits: int, minishard_bits: int = 0) -> ShardingSpec:
    return ShardingSpec(preshift_bits=0, hash="identity", minishard_bits=minishard_bits, shard_bits=shard_bits,
                        minishard_index_encoding="raw", data_encoding="raw")


def test_overwrite_with_another_sharding_leaves_only_the_new_dataset(tmp_path: Path) -> None:
    source = _source(5)
    export_precomputed(source, str(tmp_path / "out"), chunk_size=(16, 16, 8), shard_bytes=1 << 16)
    export_precomputed(source, str(tmp_path / "fresh"), chunk_size=(32, 32, 16))
    export_precomputed(source, str(tmp_path / "out"), chunk_size=(32, 32, 16), overwrite=True)
    # byte for byte the dataset a fresh export writes: no shard file of the first sharding survives
    assert _digests(tmp_path / "out") == _digests(tmp_path / "fresh")
    assert list(open_dataset(tmp_path / "out").inspector().validate()) == []


@dataclass(frozen=True)
class _FailingSource(ArraySource):
    """Fails on the fifth chunk read, as a dying worker or an I/O error would part-way through an export."""

    reads: list[int] = field(default_factory=list)

    def read(self, level: int, box: tuple[slice, ...]) -> np.ndarray:
        self.reads.append(level)
        if len(self.reads) == 5:
            raise OSError("simulated read failure")
        return super().read(level, box)


def test_a_failed_overwrite_leaves_no_info_over_old_shards(tmp_path: Path) -> None:
    out = tmp_path / "out"
    old, new = np.full((64, 64, 64), 1, np.uint32), np.full((64, 64, 64), 2, np.uint32)
    spec = _identity(3)  # 8 shards of one 32³ chunk each
    export_precomputed(ArraySource((old,), ((4, 4, 4),)), str(out), chunk_size=(32, 32, 32), sharding=spec)
    with pytest.raises(OSError, match="simulated"):
        export_precomputed(_FailingSource((new,), ((4, 4, 4),)), str(out), chunk_size=(32, 32, 32), sharding=spec,
                           overwrite=True, scheduler="sync")
    assert not (out / "info").exists()  # no reader takes the directory for a dataset
    assert len(list(out.rglob("*.shard"))) == 4  # the four new shards written before the failure, no old one


def test_export_onto_or_around_its_source_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "vol"
    export_precomputed(_source(), str(src), chunk_size=(32, 32, 16))
    before = _digests(src)
    (tmp_path / "link").symlink_to(src)
    for dest in (src, f"file://{src}", src / "sub", tmp_path, tmp_path / "link", tmp_path / "link" / "x"):
        with pytest.raises(ArgumentError, match="overlaps the source"):
            export_precomputed(VolumeSource(str(src)), str(dest), overwrite=True)
    with pytest.raises(ArgumentError, match="overlaps the source"):  # a source given through a symbolic link
        export_precomputed(VolumeSource(str(tmp_path / "link")), str(src), overwrite=True)
    assert _digests(src) == before
    for remote, dest in (("gs://bucket/a", "gs://bucket/a/b"), ("gs://bucket/a/b", "gs://bucket/a/")):
        with pytest.raises(ArgumentError, match="overlaps the source"):
            claim_destination(VolumeSource(remote), dest, LocalByteStore(tmp_path / "none"), "info", "x", False)
    assert not claim_destination(VolumeSource("gs://bucket/a"), "gs://bucket/ab", LocalByteStore(tmp_path / "none"),
                                 "info", "x", False)
    export_precomputed(VolumeSource(str(src)), str(tmp_path / "vol2"), chunk_size=(32, 32, 16))  # a sibling is fine


@pytest.mark.parametrize("dtype", ["float64", "int64", "bool"])
def test_types_precomputed_cannot_store_are_refused(tmp_path: Path, dtype: str) -> None:
    source = ArraySource((np.zeros((4, 8, 8), dtype=dtype),), ((1.0, 1.0, 1.0),), kind="image")
    with pytest.raises(ArgumentError, match=f"data type {dtype} cannot be stored in precomputed.*--format zarr3"):
        export_precomputed(source, str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_big_endian_source_is_written_as_its_native_type(tmp_path: Path) -> None:
    data = (np.arange(4 * 8 * 8).reshape(4, 8, 8) * 300).astype(">u2")
    report = export_precomputed(ArraySource((data,), ((1.0, 1.0, 1.0),), kind="image"), str(tmp_path / "out"))
    assert report.info["data_type"] == "uint16"
    np.testing.assert_array_equal(_read_tensorstore(tmp_path / "out", 0), data)


def test_chunk_size_must_be_three_positive_integers(tmp_path: Path) -> None:
    for chunk in ((0, 64, 64), (64, 64), (64, -1, 64), (64.5, 64, 64)):
        with pytest.raises(ArgumentError, match="chunk_size must be 3 positive integers"):
            export_precomputed(_source(), str(tmp_path / "out"), chunk_size=chunk)  # type: ignore[arg-type]
    assert not (tmp_path / "out").exists()


def test_minishard_bits_that_would_exhaust_memory_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ArgumentError, match=r"sharding\.minishard_bits is 21; at most 20"):
        export_precomputed(_source(), str(tmp_path / "big"), sharding=_identity(0, minishard_bits=21))
    with pytest.raises(ArgumentError, match=r"sharding\[1\]\.minishard_bits is 24"):
        export_precomputed(_source(), str(tmp_path / "big"), sharding=[_identity(0), _identity(0, 24), _identity(0)])
    assert not (tmp_path / "big").exists()


@pytest.fixture(scope="module")
def small_volume(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("small") / "vol"
    export_precomputed(_source(7), str(path), chunk_size=(32, 32, 16))
    return path


#: Bad ``export`` arguments and what the refusal must say (exit 2, no traceback, nothing written).
BAD_ARGUMENTS: list[tuple[list[str], str]] = [
        (["--chunk", "0,64,64"], "argument --chunk: expected 3 positive integers"),
        (["--format", "zarr3", "--chunk", "0,64,64"], "argument --chunk: expected 3 positive integers"),
        (["--chunk", "64,64"], "argument --chunk: expected 3 positive integers"),
        (["--format", "zarr3", "--shard-shape", "64,64"], "argument --shard-shape: expected 3 positive integers"),
        (["--shard-bytes", "inf"], "argument --shard-bytes: expected a finite size"),
        (["--shard-bytes", "1e400"], "argument --shard-bytes: expected a finite size"),
        (["--workers", "-1"], "argument --workers: expected a positive integer"),
        (["--workers", "0"], "argument --workers: expected a positive integer"),
        (["--supervoxels"], "--supervoxels: only for a labelmap export, with SOURCE a repository directory"),
        (["--allow-open", "--version", "main"], "--version, --allow-open: only for a labelmap export"),
        (["--sharding", json.dumps({**_identity(0, 40).to_json()})], "sharding.minishard_bits is 40; at most 20"),
]


@pytest.fixture(scope="module")
def refusals(small_volume: Path, tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Any, Path]]:
    """Every command line of :data:`BAD_ARGUMENTS` run in one child process (tests/cli_batch.py: each through the
    console script's ``main`` on real pipes, as ``shardscope export ...`` runs), each with a destination of its own;
    (the finished process, its destination) per case, in order.

    Why one process: a refusal is about what the parser and the checks print and return, and each of these ran
    a Python start-up of its own for a few milliseconds of work.
    """
    root = tmp_path_factory.mktemp("refused")
    dests = [root / f"out{i}" for i in range(len(BAD_ARGUMENTS))]
    done = run_commands([["export", str(small_volume), str(dest), *args]
                         for (args, _), dest in zip(BAD_ARGUMENTS, dests, strict=True)], timeout=300)
    return list(zip(done, dests, strict=True))


@pytest.mark.parametrize(("case", "message"), [(i, m) for i, (_, m) in enumerate(BAD_ARGUMENTS)],
                         ids=[f"args{i}-{m}" for i, (_, m) in enumerate(BAD_ARGUMENTS)])
def test_cli_refuses_bad_arguments_without_a_traceback(refusals: list[tuple[Any, Path]], case: int,
                                                       message: str) -> None:
    run, dest = refusals[case]
    assert run.returncode == 2 and message in run.stderr, run.stderr
    assert "Traceback" not in run.stderr and not dest.exists()


def test_cli_huge_shard_bits_export_promptly(small_volume: Path, tmp_path: Path) -> None:
    # one spec for every scale, with 2**40 shards: far more than any grid needs (a loop over all never ends);
    # run in a subprocess so that a regression fails on the timeout instead of hanging the test session
    dest = tmp_path / "out"
    spec = json.dumps(_identity(40).to_json())
    run = subprocess.run([sys.executable, "-m", "napari_shardscope", "export", str(small_volume), str(dest),
                          "--sharding", spec, "--chunk", "16,32,32", "--json", "--quiet"], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["chunks"] == 3 * 3 * 3 + 2 * 2 * 2 + 1 * 1 * 2  # one shard per chunk of each grid
    for level, expected in enumerate(_source(7).arrays):
        np.testing.assert_array_equal(_read_tensorstore(dest, level), expected)
    assert list(open_dataset(dest).inspector().validate()) == []


def test_cli_chunk_is_zyx_like_every_shape(small_volume: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """``--chunk 8,16,32`` is z 8, y 16, x 32 for both formats (the info file stores it x,y,z); ``--xyz`` flips."""
    from napari_shardscope.core.cli import run

    assert run(["export", str(small_volume), str(tmp_path / "p"), "--chunk", "8,16,32", "--quiet"]) == 0
    assert json.loads((tmp_path / "p" / "info").read_text())["scales"][0]["chunk_sizes"] == [[32, 16, 8]]
    assert run(["export", str(small_volume), str(tmp_path / "x"), "--chunk", "32,16,8", "--xyz", "--quiet"]) == 0
    assert json.loads((tmp_path / "x" / "info").read_text())["scales"][0]["chunk_sizes"] == [[32, 16, 8]]
    assert run(["export", str(small_volume), str(tmp_path / "z"), "--format", "zarr3", "--chunk", "8,16,32",
                "--quiet"]) == 0
    inner = json.loads((tmp_path / "z" / "0" / "zarr.json").read_text())["codecs"][0]["configuration"]["chunk_shape"]
    assert inner == [8, 16, 32]
    capsys.readouterr()


@pytest.mark.parametrize(
    "spec",
    [
        None,  # the default: one shard per scale here, so with several workers every shard is split into parts
        ShardingSpec(preshift_bits=1, hash="murmurhash3_x86_128", minishard_bits=1, shard_bits=1,
                     minishard_index_encoding="gzip", data_encoding="gzip"),
    ],
    ids=["default", "murmurhash"],
)
def test_shards_split_into_parts_are_the_bytes_one_worker_writes(tmp_path: Path, spec: ShardingSpec | None) -> None:
    """A shard compressed in parts by several workers is assembled into exactly the file one task writes."""
    from napari_shardscope.core.export.precomputed import build_info, plan_parts, plan_shard_tasks

    source = _source(5)
    info = build_info(source, chunk_size=(16, 16, 8), sharding=spec)
    plan = plan_parts(plan_shard_tasks(str(tmp_path / "p"), info), 3)
    assert max(len(parts) for _, parts in plan) > 1  # the test exercises the split
    for task, parts in plan:  # the parts hold the shard's chunks exactly once, their voxels sum to the shard's
        ids = np.concatenate([p.chunks()[0] for p in parts])
        np.testing.assert_array_equal(ids, task.chunks()[0])
        assert sum(p.voxels for p in parts) == task.voxels
    export_precomputed(source, str(tmp_path / "one"), chunk_size=(16, 16, 8), sharding=spec, num_workers=1)
    for workers in (2, 3):
        out = tmp_path / f"w{workers}"
        export_precomputed(source, str(out), chunk_size=(16, 16, 8), sharding=spec, num_workers=workers)
        assert _digests(out) == _digests(tmp_path / "one")
    for level, expected in enumerate(source.arrays):
        np.testing.assert_array_equal(_read_tensorstore(tmp_path / "w3", level), expected)


def test_even_shards_stay_whole_until_the_tail_which_ends_in_single_chunks() -> None:
    """8 equal shards on 2 workers: the first shards run whole (no part overhead), the last are cut down to
    single chunks, so the workers finish within about a chunk of each other. One worker: nothing is cut."""
    from napari_shardscope.core.export.precomputed import build_info, plan_parts, plan_shard_tasks

    spec = ShardingSpec(preshift_bits=3, hash="identity", minishard_bits=1, shard_bits=3,
                        minishard_index_encoding="gzip", data_encoding="gzip")
    source = ArraySource((np.zeros((128, 512, 512), dtype=np.uint8),), ((1.0, 1.0, 1.0),), kind="image")
    plan = plan_parts(plan_shard_tasks("unused", build_info(source, sharding=spec)), 2)
    chunk = 64**3
    sizes = [[p.voxels // chunk for p in parts] for _, parts in plan]
    assert len(plan) == 8 and all(parts == [task] for task, parts in plan[:5])
    assert sizes[-1][-4:] == [1, 1, 1, 1]  # the run ends in single chunks
    flat = [n for shard in sizes for n in shard]
    assert all(b <= a for a, b in itertools.pairwise(flat[:6]))  # parts shrink as the work runs out
    one_worker = plan_parts(plan_shard_tasks("unused", build_info(source)), 1)
    assert all(len(parts) == 1 for _, parts in one_worker)


def test_coarse_scales_are_planned_first_and_the_finest_scale_ends_the_run() -> None:
    """The run ends on the chunks that cost least to compress: the finest scale's (see plan_shard_tasks)."""
    from napari_shardscope.core.export.precomputed import build_info, plan_shard_tasks

    tasks = plan_shard_tasks("unused", build_info(_source(), chunk_size=(16, 16, 8), shard_bytes=40_000))
    levels = [t.level for t in tasks]
    assert levels == sorted(levels, reverse=True) and levels[-1] == 0 and len(set(levels)) == 3
    for level in set(levels):  # within a scale, the largest shard first
        weights = [t.weight for t in tasks if t.level == level]
        assert weights == sorted(weights, reverse=True)


@given(
    shape=st.tuples(st.integers(1, 40), st.integers(1, 70), st.integers(1, 90)),
    chunk=st.tuples(st.sampled_from([4, 8, 16]), st.sampled_from([8, 16, 32]), st.sampled_from([8, 16, 32])),
    shard_bytes=st.sampled_from([2_000, 20_000, 200_000, 1 << 30]),
    workers=st.integers(1, 6),
)
def test_guided_parts_cover_every_chunk_once_and_shrink_to_the_tail(
    shape: tuple[int, int, int], chunk: tuple[int, int, int], shard_bytes: int, workers: int
) -> None:
    """For any volume, chunking, sharding and worker count: each shard's parts hold its chunks exactly once in
    id order; each part is the shortest run of its shard reaching ``1 / (GUIDE * workers)`` of the voxels not
    yet handed out; with one worker nothing is cut."""
    from napari_shardscope.core.export.precomputed import (
        GUIDE,
        build_info,
        chunk_voxels,
        plan_parts,
        plan_shard_tasks,
    )

    source = ArraySource((np.zeros(shape, dtype=np.uint16),), ((1.0, 1.0, 1.0),), kind="image")
    tasks = plan_shard_tasks("unused", build_info(source, chunk_size=chunk, shard_bytes=shard_bytes))
    plan = plan_parts(tasks, workers)
    assert [task for task, _ in plan] == tasks
    remaining = sum(t.voxels for t in tasks)
    for task, parts in plan:
        ids = np.concatenate([p.chunks()[0] for p in parts])
        np.testing.assert_array_equal(ids, task.chunks()[0])
        assert sum(p.voxels for p in parts) == task.voxels
        if workers == 1:
            assert parts == [task]
        for i, part in enumerate(parts):
            target = remaining / (GUIDE * workers)
            voxels = chunk_voxels(part.scale, part.chunks()[1])
            assert int(voxels.sum()) == part.voxels
            if len(parts) > 1:
                assert part.voxels - int(voxels[-1]) < target  # no longer than it must be
                assert part.voxels >= target or i == len(parts) - 1  # only a shard's last run falls short
            remaining -= part.voxels
    assert remaining == 0


@pytest.mark.parametrize("scratch_max", [16 << 20, 1024], ids=["scratch", "chunks-above-the-scratch-cap"])
def test_non_contiguous_and_big_endian_chunks_compress_from_a_scratch_copy(tmp_path: Path, scratch_max: int,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks read as strided views (a transposed array) or in another byte order are copied, then compressed."""
    from napari_shardscope.core.export import precomputed

    monkeypatch.setattr(precomputed, "SCRATCH_MAX_BYTES", scratch_max)
    base = np.random.default_rng(6).integers(0, 2**40, size=(40, 24, 30), dtype=np.uint64)
    views = (base.transpose(0, 2, 1), base.astype(">u8"))
    for i, data in enumerate(views):
        export_precomputed(ArraySource((data,), ((1.0, 1.0, 1.0),)), str(tmp_path / str(i)), chunk_size=(16, 8, 8),
                           num_workers=2)
        np.testing.assert_array_equal(_read_tensorstore(tmp_path / str(i), 0), data)


def test_two_volumes_at_one_relative_path_export_each_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``export("vol", ...)`` from one directory, then from another: each export reads its own volume. The volume
    a process keeps open for exports was keyed by the path as given, so the second read the first."""
    from napari_shardscope.core.export.api import export
    from tests.core.labelmap.volumes import write_precomputed

    rng = np.random.default_rng(11)
    datas = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        data = rng.integers(1, 1000, (8, 16, 16), dtype=np.uint64)
        write_precomputed(tmp_path / name / "vol", data, ((1, 1, 1),), chunk_xyz=(8, 8, 4))
        datas.append(data)
    for name, data in zip(("a", "b"), datas, strict=True):
        monkeypatch.chdir(tmp_path / name)
        export("vol", tmp_path / f"out-{name}")
        out = {"driver": "file", "path": str(tmp_path / f"out-{name}")}
        store = ts.open({"driver": "neuroglancer_precomputed", "kvstore": out, "scale_index": 0}).result()
        np.testing.assert_array_equal(np.asarray(store[..., 0].read().result()).T, data)
