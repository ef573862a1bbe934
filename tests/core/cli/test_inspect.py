"""The inspection CLI: JSON fields, exit codes, and reading only index bytes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from napari_shardscope.core.cli import run
from tests.cli_batch import run_commands
from tests.precomputed_data import SHARDING_MURMUR_GZIP, write_ts_volume


@pytest.fixture(scope="module")
def volume(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cli") / "vol"
    write_ts_volume(path, SHARDING_MURMUR_GZIP, scales=2)
    return path


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> object:
    assert run(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_inspect_json(volume: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(capsys, ["inspect", str(volume), "--json"])
    assert isinstance(out, dict)
    assert out["format"] == "precomputed" and len(out["scales"]) == 2
    s0 = out["scales"][0]
    assert s0["sharding"]["hash"] == "murmurhash3_x86_128"
    assert s0["chunks"] == s0["num_chunks"] == 4 * 3 * 3
    total = sum(p.stat().st_size for p in volume.rglob("*.shard"))
    index_bytes = sum(sh["index_bytes"] for sc in out["scales"] for sh in sc["shards"])
    assert out["bytes_read"] == index_bytes + len((volume / "info").read_bytes()) < total / 5
    assert all(sh["chunks"] > 0 for sh in s0["shards"])


def test_locate_and_ls_agree(volume: Path, capsys: pytest.CaptureFixture[str]) -> None:
    loc = _json(capsys, ["locate", str(volume), "--voxel", "20,21,14", "--xyz", "--json"])
    assert isinstance(loc, dict)
    assert set(loc) >= {
        "chunk_id",
        "grid_position",
        "hashed_chunk_id",
        "shard",
        "minishard",
        "shard_file",
        "byte_range",
        "present",
    }
    # z, y, x from 0 like the voxel, the format's own x, y, z (absolute) beside
    assert loc["present"] and loc["grid_position"] == [0, 1, 1] and loc["format_grid_position"] == [1, 1, 0]
    assert loc["axes"] == ["z", "y", "x"] and loc["format_axes"] == ["x", "y", "z"]
    assert loc["voxel"] == [14 - 7, 21 - 5, 20 - 3] and loc["format_voxel"] == [20, 21, 14]  # voxel_offset 3, 5, 7
    same = _json(capsys, ["locate", str(volume), "--chunk-id", str(loc["chunk_id"]), "--json"])
    assert isinstance(same, dict) and same["byte_range"] == loc["byte_range"]
    assert same["grid_position"] == loc["grid_position"]
    assert run(["ls", str(volume), "--shard", str(loc["shard"]), "--minishard", str(loc["minishard"]), "--json"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    (mine,) = [r for r in records if r["chunk_id"] == loc["chunk_id"]]
    assert mine["byte_range"] == loc["byte_range"] and mine["grid_position"] == loc["grid_position"]
    assert all(r["shard"] == loc["shard"] and r["minishard"] == loc["minishard"] for r in records)
    # and as people read them: one half-open byte range, printed the same by both verbs
    start, end = loc["byte_range"]
    assert run(["locate", str(volume), "--voxel", ",".join(map(str, loc["voxel"]))]) == 0
    assert f"byte_range: [{start}, {end})" in capsys.readouterr().out
    assert run(["ls", str(volume), "--shard", str(loc["shard"]), "--minishard", str(loc["minishard"])]) == 0
    assert f"bytes [{start}, {end}) ({end - start} bytes) chunk={loc['chunk_id']} " in capsys.readouterr().out
    assert run(["ls", str(volume), "--json"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 36


def test_bad_arguments_exit_2_and_a_missing_dataset_3(volume: Path) -> None:
    cases = (
        (["locate", str(volume), "--voxel", "1,2"], 2),
        (["locate", str(volume), "--voxel", "a,b,c"], 2),
        (["locate", str(volume)], 2),
        (["inspect", str(volume), "--scale", "nope"], 2),
        (["ls", str(volume), "--minishard", "1"], 2),
        # a shard or minishard number past what the sharding spec has (found by the fuzz campaign: IndexError)
        (["ls", str(volume), "--shard", "0", "--minishard", "4096"], 2),
        (["ls", str(volume), "--shard", "-1"], 2),
        (["ls", str(volume), "--shard", str(1 << 40)], 2),
        (["inspect", str(volume.parent / "none")], 3),
    )
    # the command lines in one child process (tests/cli_batch.py): each prints and returns as on its own
    for (argv, code), proc in zip(cases, run_commands([argv for argv, _ in cases]), strict=True):
        assert proc.returncode == code, (argv, proc.stderr)
        assert proc.stderr.strip() and "Traceback" not in proc.stderr


def test_locate_absent_chunk(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "vol"
    write_ts_volume(path, SHARDING_MURMUR_GZIP, scales=1)
    for shard in path.rglob("*.shard"):
        shard.unlink()
    loc = _json(capsys, ["locate", str(path), "--voxel", "3,5,7", "--xyz", "--json"])
    assert isinstance(loc, dict) and loc["present"] is False and loc["byte_range"] is None


def test_help_states_coordinate_convention() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "napari_shardscope", "locate", "--help"], capture_output=True, text=True
    )
    assert proc.returncode == 0 and "z,y,x" in proc.stdout and "--xyz" in proc.stdout and "x,y,z" in proc.stdout


def test_locate_segment_follows_mesh_and_skeleton_dirs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from napari_shardscope.core.bytestore import LocalByteStore
    from napari_shardscope.core.formats.precomputed.shard_writer import write_shards
    from napari_shardscope.core.formats.precomputed.sharding import parse_sharding_spec

    path = tmp_path / "seg"
    write_ts_volume(path, SHARDING_MURMUR_GZIP, scales=1)
    info = json.loads((path / "info").read_text())
    info.update(mesh="mesh", skeletons="skeletons")
    (path / "info").write_text(json.dumps(info))
    spec_json = {"@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 0, "hash": "murmurhash3_x86_128",
                 "minishard_bits": 2, "shard_bits": 1, "minishard_index_encoding": "gzip", "data_encoding": "gzip"}
    store = LocalByteStore(path)
    for sub, type_ in (("mesh", "neuroglancer_multilod_draco"), ("skeletons", "neuroglancer_skeletons")):
        (path / sub).mkdir()
        (path / sub / "info").write_text(json.dumps({"@type": type_, "sharding": spec_json}))
        write_shards(store, sub, parse_sharding_spec(spec_json), {42: b"manifest-of-42", 7: b"seven"})
    out = _json(capsys, ["locate", str(path), "--segment", "42", "--json"])
    assert isinstance(out, list) and [r["source"] for r in out] == ["mesh", "skeletons"]
    for rec in out:
        assert rec["present"] and rec["chunk_id"] == 42
        start, end = rec["byte_range"]
        import gzip

        assert gzip.decompress((path / rec["shard_file"]).read_bytes()[start:end]) == b"manifest-of-42"
    missing = _json(capsys, ["locate", str(path), "--segment", "43", "--json"])
    assert isinstance(missing, list) and not any(r["present"] for r in missing)


def test_locate_segment_in_unsharded_mesh_and_skeleton_dirs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Unsharded: a skeleton is the file <id>, a multi-resolution mesh's manifest <id>.index, a legacy
    # mesh's manifest <id>:0 (Neuroglancer's skeleton and mesh format docs).
    path = tmp_path / "seg"
    write_ts_volume(path, None, scales=1)
    info = json.loads((path / "info").read_text())
    info.update(mesh="mesh", skeletons="skeletons")
    (path / "info").write_text(json.dumps(info))
    files = {
        "mesh": ("neuroglancer_multilod_draco", ["42.index", "42"]),
        "skeletons": ("neuroglancer_skeletons", ["42"]),
    }
    for sub, (type_, names) in files.items():
        (path / sub).mkdir()
        (path / sub / "info").write_text(json.dumps({"@type": type_}))
        for name in names:
            (path / sub / name).write_bytes(b"x")
    out = _json(capsys, ["locate", str(path), "--segment", "42", "--json"])
    assert isinstance(out, list)
    assert [(r["source"], r["key"], r["present"]) for r in out] == [
        ("mesh", "mesh/42.index", True),
        ("skeletons", "skeletons/42", True),
    ]
    (path / "mesh" / "info").write_text(json.dumps({"@type": "neuroglancer_legacy_mesh"}))
    (path / "mesh" / "42:0").write_bytes(b"{}")
    out = _json(capsys, ["locate", str(path), "--segment", "42", "--json"])
    assert isinstance(out, list) and (out[0]["key"], out[0]["present"]) == ("mesh/42:0", True)


def test_inspect_reads_each_index_once_when_they_outnumber_the_caches(tmp_path: Path) -> None:
    # 2048 shard files and 8192 minishard indexes, twice what a reader caches of each: inspect must
    # read every index exactly once.
    from napari_shardscope.core.formats import open_dataset
    from napari_shardscope.core.formats.precomputed.shard_writer import encode_shard, group_by_shard
    from napari_shardscope.core.formats.precomputed.sharding import format_shard_name, parse_sharding_spec

    spec_json = {"@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 0, "hash": "identity",
                 "minishard_bits": 2, "shard_bits": 11}
    spec = parse_sharding_spec(spec_json)
    (tmp_path / "info").write_text(json.dumps({"@type": "neuroglancer_skeletons", "sharding": spec_json}))
    for shard, ids in group_by_shard(spec, range(2**13)).items():
        (tmp_path / f"{format_shard_name(spec, shard)}.shard").write_bytes(encode_shard(spec, dict.fromkeys(ids, b"x")))
    out = open_dataset(str(tmp_path)).inspector().inspect()
    (scale,) = out["scales"]
    assert scale["chunks"] == 2**13 and scale["shards_present"] == 2**11
    index_bytes = sum(sh["index_bytes"] for sh in scale["shards"])
    assert out["bytes_read"] == index_bytes + len((tmp_path / "info").read_bytes())
    assert out["requests"] == 1 + 2**11 + 2**13


def test_ls_of_a_remote_unsharded_scale_downloads_no_chunk(tmp_path: Path) -> None:
    # Like locate (and N5's ls), sizes are null where a size would cost a download of the chunk.
    from napari_shardscope.core.bytestore import TensorStoreByteStore
    from napari_shardscope.core.formats.precomputed.info import parse_info
    from napari_shardscope.core.formats.precomputed.inspector import PrecomputedInspector

    path = tmp_path / "vol"
    write_ts_volume(path, None, scales=1)
    store = TensorStoreByteStore(f"file://{path}")  # a kvstore that lists but cannot stat
    records = list(PrecomputedInspector(store, parse_info(store.read("info") or b"")).list_chunks())
    assert len(records) == 4 * 3 * 3 and all(r["size"] is None for r in records)
    assert store.stats.bytes_read == len((path / "info").read_bytes())


def test_locate_takes_the_readers_zyx_and_neuroglancers_xyz(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """One voxel, typed both ways, is the same voxel the reader shows at that index (voxel_offset 3,5,7)."""
    import numpy as np

    from napari_shardscope.core.volumes import open_volume

    path = tmp_path / "vol"
    data_xyz = write_ts_volume(path, SHARDING_MURMUR_GZIP, scales=2)
    zyx = _json(capsys, ["locate", str(path), "--voxel", "7,16,17", "--json"])
    xyz = _json(capsys, ["locate", str(path), "--voxel", "20,21,14", "--xyz", "--json"])
    assert isinstance(zyx, dict) and isinstance(xyz, dict)
    assert zyx == xyz and zyx["voxel"] == [7, 16, 17] and zyx["format_voxel"] == [20, 21, 14]
    shown = open_volume(path).levels[0].array[7, 16, 17]  # what napari shows at data index z=7, y=16, x=17
    assert int(np.asarray(shown)) == int(data_xyz[0][17, 16, 7])
    coarse = _json(capsys, ["locate", str(path), "--voxel", "3,8,8", "--scale", "16_16_40", "--json"])
    # scale 1: voxel_offset (1, 2, 3), the offset halved as written
    assert isinstance(coarse, dict) and coarse["format_voxel"] == [8 + 1, 8 + 2, 3 + 3] and coarse["voxel"] == [3, 8, 8]
    assert run(["locate", str(path), "--voxel", "0,0,50"]) == 2  # x 50 is past the 50 voxels of x
    assert "outside" in capsys.readouterr().err


def test_locate_a_2d_array_takes_two_coordinates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A fuzz finding: three coordinates for a 2-D array were an internal error (exit 70); now a bad argument."""
    import tensorstore as ts

    ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(tmp_path / "a")},
             "metadata": {"shape": [10, 12], "data_type": "uint8", "chunk_grid": {
                 "name": "regular", "configuration": {"chunk_shape": [5, 6]}}}, "create": True}).result()
    for voxel in ("2147483648,0,0", "2,56,9223372036854775808"):
        assert run(["locate", str(tmp_path / "a"), "--voxel", voxel]) == 2
        assert "takes 2 coordinates" in capsys.readouterr().err
    loc = _json(capsys, ["locate", str(tmp_path / "a"), "--voxel", "3,7", "--json"])
    assert isinstance(loc, dict) and loc["voxel"] == [3, 7] and "format_voxel" not in loc  # zarr: the same order
