"""Containment: nothing is read or written outside a dataset's (or an export's) root.

Hostile keys (``..``, absolute, empty components, NUL, backslashes), metadata naming paths outside
the dataset, symbolic links leading out of the root, special files where a chunk should be, and
links planted in an export destination — each refused with a typed error that names the key.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import threading
from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.bytestore import LocalByteStore, follow_symlinks, write_file_atomic
from napari_shardscope.core.cli import run
from napari_shardscope.core.errors import (
    ArgumentError,
    CorruptDataError,
    MetadataError,
    NotARegularFileError,
    OutsideRootError,
    UnsafeMetadataPathError,
    exit_code_for,
)
from napari_shardscope.core.export.precomputed import export_precomputed
from napari_shardscope.core.export.source import ArraySource, VolumeSource
from napari_shardscope.core.formats import open_dataset
from napari_shardscope.core.formats.precomputed.info import parse_info
from napari_shardscope.core.layout import open_layout
from napari_shardscope.core.volumes import open_volume
from tests.n5_data import write_dataset as write_n5_dataset
from tests.precomputed_data import SHARDING_IDENTITY_RAW, write_ts_volume

BAD_KEYS = ("../x", "a/../../x", "/etc/passwd", "a//b", "a/./b", "a\x00b", "a\\..\\b", "./a")


# -- keys -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("key", BAD_KEYS)
def test_store_refuses_keys_that_do_not_name_a_file_inside_the_root(tmp_path: Path, key: str) -> None:
    store = LocalByteStore(tmp_path / "root")
    for call in (lambda: store.read(key), lambda: store.read_range(key, 0, 4), lambda: store.size(key),
                 lambda: store.write(key, b"x"), lambda: store.delete(key)):
        with pytest.raises(OutsideRootError, match=r"outside|not a relative") as info:
            call()
        assert isinstance(info.value, ArgumentError) and repr(key)[1:-1] in str(info.value)
    assert not (tmp_path / "x").exists()


def test_precomputed_scale_key_outside_the_dataset_is_damaged_metadata() -> None:
    doc = {"@type": "neuroglancer_multiscale_volume", "type": "image", "data_type": "uint8", "num_channels": 1,
           "scales": [{"key": "../elsewhere", "size": [4, 4, 4], "resolution": [1, 1, 1], "chunk_sizes": [[4, 4, 4]],
                       "encoding": "raw", "voxel_offset": [0, 0, 0]}]}
    with pytest.raises(UnsafeMetadataPathError, match=r"scales\[0\]\.key.*\.\./elsewhere") as info:
        parse_info(json.dumps(doc).encode(), key="ds/info")
    assert isinstance(info.value, MetadataError) and info.value.key == "ds/info"
    assert exit_code_for(info.value) == 4
    for field in ("mesh", "skeletons"):
        with pytest.raises(UnsafeMetadataPathError, match=field):
            parse_info(json.dumps({**doc, "scales": [{**doc["scales"][0], "key": "s"}], field: "/abs"}).encode())


@pytest.fixture()
def escaping_precomputed(tmp_path: Path) -> Path:
    """A dataset whose info names scales in a sibling directory (``../real/<key>``)."""
    real = tmp_path / "real"
    write_ts_volume(real, SHARDING_IDENTITY_RAW, size=(16, 16, 8), chunk=(8, 8, 8), scales=1)
    info = json.loads((real / "info").read_text())
    for scale in info["scales"]:
        scale["key"] = f"../real/{scale['key']}"
    ds = tmp_path / "ds"
    ds.mkdir()
    (ds / "info").write_text(json.dumps(info))
    return ds


def test_every_consumer_refuses_a_scale_outside_the_dataset(escaping_precomputed: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    ds = escaping_precomputed
    calls = {
        "open_volume": lambda: open_volume(ds),
        "inspect": lambda: open_dataset(ds).inspector().inspect(),
        "open_layout": lambda: open_layout(ds),
        "export source": lambda: export_precomputed(VolumeSource(str(ds)), str(tmp_path / "out")),
    }
    for name, call in calls.items():
        with pytest.raises(UnsafeMetadataPathError, match=r"\.\./real"):
            call()
        assert name
    assert not (tmp_path / "out" / "info").exists()
    repo = str(tmp_path / "repo")
    assert run(["repo", "init", repo]) == 0
    assert run(["labelmap", "create", repo, "seg", str(ds), "--block", "8"]) == 4
    assert "../real" in capsys.readouterr().err


def test_zarr3_ome_dataset_paths_must_stay_inside_the_group(tmp_path: Path) -> None:
    import tensorstore as ts

    real = tmp_path / "real"
    ts.open({"driver": "zarr3", "kvstore": f"file://{real}/", "metadata": {"shape": [8, 8], "data_type": "uint8"},
             "create": True}).result()[...] = np.ones((8, 8), np.uint8)
    group = tmp_path / "group"
    group.mkdir()
    for path in ("../real", "a//b", "a\\b", "/abs"):
        ome = {"multiscales": [{"axes": [{"name": "y", "type": "space"}, {"name": "x", "type": "space"}],
                                "datasets": [{"path": path, "coordinateTransformations": [
                                    {"type": "scale", "scale": [1, 1]}]}]}]}
        (group / "zarr.json").write_text(json.dumps({"zarr_format": 3, "node_type": "group",
                                                     "attributes": {"ome": {"version": "0.5", **ome}}}))
        for call in (lambda: open_volume(group), lambda: open_dataset(group).inspector().inspect(),
                     lambda: open_layout(group)):
            with pytest.raises(MetadataError, match="path"):
                call()


# -- symbolic links -----------------------------------------------------------------------------------
def test_store_refuses_links_leading_out_of_the_root_unless_asked(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"secret")
    root = tmp_path / "root"
    (root / "in").mkdir(parents=True)
    (root / "in" / "chunk").write_bytes(b"inside")
    (root / "file-link").symlink_to(outside / "secret")
    (root / "dir-link").symlink_to(outside)
    (root / "inner-link").symlink_to(root / "in" / "chunk")  # inside the root: fine
    store = LocalByteStore(root)
    assert store.read("inner-link") == b"inside"
    for key in ("file-link", "dir-link/secret"):
        with pytest.raises(OutsideRootError, match=f"{key}.*link.*follow-symlinks"):
            store.read(key)
        with pytest.raises(OutsideRootError):
            store.read_range(key, 0, 2)
    assert LocalByteStore(root, follow_symlinks=True).read("dir-link/secret") == b"secret"
    with follow_symlinks(True):
        assert LocalByteStore(root).read("file-link") == b"secret"
    with pytest.raises(OutsideRootError):
        LocalByteStore(root).read("file-link")


def test_a_directory_checked_once_still_guards_each_file_in_it(tmp_path: Path) -> None:
    """A store remembers directories that resolve inside the root; the files in them are checked at every read."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"secret")
    root = tmp_path / "root"
    (root / "0" / "0").mkdir(parents=True)
    (root / "0" / "0" / "0").write_bytes(b"block")
    (root / "0" / "0" / "1").symlink_to(outside / "secret")  # planted next to a block already read
    (root / "0" / "0" / "2").symlink_to(root / "0" / "0" / "0")  # a link inside the root is read
    (root / "0" / "0" / "3").mkdir()
    store = LocalByteStore(root)
    for _ in range(2):
        assert store.read_range("0/0/0", 0, 99) == b"block" and store.read("0/0/0") == b"block"
        with pytest.raises(OutsideRootError, match="0/0/1"):
            store.read_range("0/0/1", 0, 99)
        assert store.read_range("0/0/2", 1, 3) == b"lo"
        with pytest.raises(NotARegularFileError):
            store.read("0/0/3")
        assert store.read("0/0/4") is None
    (root / "1").symlink_to(outside)
    with pytest.raises(OutsideRootError, match="1/secret"):  # a directory not checked before
        store.read("1/secret")


def test_level_scan_names_every_entry_without_resolving_its_path(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Opening a local volume scans its level directory (up to 50,000 entries): the keys it names are
    the entries' paths below the root and below the level, found by cutting the path the scan built,
    not by resolving every path again (``os.path.relpath`` per entry made a 2,048-chunk zarr array's
    open cost most of a second, issue 28's sparse bases)."""
    from napari_shardscope.core.bytestore.containment import scan_level

    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "root"
    for z in range(3):
        for y in range(4):
            (root / "s0" / "c" / str(z) / str(y)).mkdir(parents=True)
            for x in range(5):
                (root / "s0" / "c" / str(z) / str(y) / str(x)).write_bytes(b"chunk")
    (root / "s0" / "c" / "0" / "0" / "9").symlink_to(outside)  # a link out of the root: a problem, named
    (root / "s0" / "zarr.json").write_text("{}")
    expected = {os.path.relpath(os.path.join(d, n), root).replace(os.sep, "/")
                for d, dirs, files in os.walk(root / "s0") for n in (*dirs, *files)}
    below_expected = {k.removeprefix("s0/") for k in expected}
    real_relpath = os.path.relpath
    calls = []

    def counting(path: str, start: str | None = None) -> str:
        calls.append(path)
        return real_relpath(path, start)

    monkeypatch.setattr(os.path, "relpath", counting)
    for where, rel in ((str(root), "s0"), (str(root) + os.sep, "s0"), (str(root / "s0"), ""),
                       (str(tmp_path) + os.sep + "." + os.sep + "root", "s0"), (str(root), "./s0")):
        calls.clear()
        seen_below: list[str] = []

        def is_data_key(below: str, seen: list[str] = seen_below) -> bool:
            seen.append(below)
            return below.count("/") == 4  # c/z/y/x: a chunk file expected there

        got = list(scan_level(where, rel, follow=False, is_data_key=is_data_key))
        prefix = "s0/" if rel else ""
        assert {key for _, key, _ in got} == (expected if rel else below_expected), (where, rel)
        assert set(seen_below) <= below_expected and "c/0/0" in seen_below
        problems = {key: p.kind for _, key, p in got if p is not None}
        assert problems == {f"{prefix}c/0/0/9": "outside"}, (where, rel)
        assert len(calls) <= 2, f"{len(calls)} relpath calls for {len(got)} entries"


def _precomputed_with_linked_scale(tmp_path: Path) -> tuple[Path, Path]:
    real = tmp_path / "real"
    write_ts_volume(real, None, size=(16, 16, 8), chunk=(8, 8, 8), scales=1)
    key = json.loads((real / "info").read_text())["scales"][0]["key"]
    ds = tmp_path / "ds"
    ds.mkdir()
    shutil.copy(real / "info", ds / "info")
    (ds / key).symlink_to(real / key)
    return ds, real


def test_voxel_reads_refuse_a_scale_directory_linked_out_of_the_dataset(tmp_path: Path) -> None:
    ds, _ = _precomputed_with_linked_scale(tmp_path)
    with pytest.raises(OutsideRootError, match="follow-symlinks"):
        open_volume(ds)
    with follow_symlinks(True):
        vol = open_volume(ds)
        assert vol.shape == (8, 16, 16)
        np.asarray(vol.levels[0].array[0, 0, 0])


def test_n5_scale_linked_out_of_the_group_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    write_n5_dataset(outside, np.arange(64, dtype=np.uint8).reshape(4, 4, 4), (2, 2, 2), {"type": "raw"})
    group = tmp_path / "group"
    group.mkdir()
    (group / "attributes.json").write_text(json.dumps({"n5": "2.0.0"}))
    (group / "s0").symlink_to(outside)
    with pytest.raises(OutsideRootError):
        open_volume(group)
    with follow_symlinks(True):
        assert open_volume(group).shape == (4, 4, 4)


def test_cli_follow_symlinks_global_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ds, _ = _precomputed_with_linked_scale(tmp_path)
    assert run(["ls", str(ds)]) == 2
    assert "--follow-symlinks" in capsys.readouterr().err
    assert run(["--follow-symlinks", "ls", str(ds)]) == 0
    assert run(["--help"]) == 0
    assert "--follow-symlinks" in capsys.readouterr().out


# -- special files ----------------------------------------------------------------------------------
def test_special_files_are_refused_not_read(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    store = LocalByteStore(tmp_path)
    for key in ("fifo", "dir"):
        for call in (lambda k=key: store.read(k), lambda k=key: store.read_range(k, 0, 4),
                     lambda k=key: store.read_suffix(k, 4)):
            with pytest.raises(NotARegularFileError, match=f"{key}.*not a regular file") as info:
                call()
            assert isinstance(info.value, CorruptDataError) and info.value.key == key


def _run_with_deadline(argv: list[str], seconds: float = 60.0) -> int:
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(run(argv)), daemon=True)
    thread.start()
    thread.join(seconds)
    assert result, f"shardscope {' '.join(argv)} hung on a FIFO"
    return result[0]


def test_a_fifo_in_place_of_a_shard_hangs_no_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ds = tmp_path / "ds"
    write_ts_volume(ds, SHARDING_IDENTITY_RAW, size=(16, 16, 8), chunk=(8, 8, 8), scales=1)
    shard = next(p for p in ds.rglob("*.shard"))
    shard.unlink()
    os.mkfifo(shard)
    for verb in ("inspect", "validate", "ls"):
        code = _run_with_deadline([verb, str(ds)])
        assert code in (1, 4), verb
    assert "not a regular file" in capsys.readouterr().err
    with pytest.raises(NotARegularFileError):
        open_volume(ds)


# -- writes ---------------------------------------------------------------------------------------------
def test_writes_never_go_through_a_link_planted_in_the_destination(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "8_8_8").symlink_to(outside)
    (dest / "info").symlink_to(outside / "victim")
    (outside / "victim").write_bytes(b"keep")
    store = LocalByteStore(dest)
    with pytest.raises(OutsideRootError):
        store.write("8_8_8/0.shard", b"x")
    with follow_symlinks(True), pytest.raises(OutsideRootError):  # reading behind links never lets writes out
        LocalByteStore(dest).write("8_8_8/0.shard", b"x")
    store.write("info", b"new")  # replaces the link itself: a regular file we created
    assert (outside / "victim").read_bytes() == b"keep" and list(outside.iterdir()) == [outside / "victim"]
    assert not (dest / "info").is_symlink() and (dest / "info").read_bytes() == b"new"


def test_exported_files_get_the_umask_modes(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        write_file_atomic(tmp_path / "a", b"x")
        export_precomputed(ArraySource((np.zeros((8, 8, 8), np.uint8),), ((1, 1, 1),)), str(tmp_path / "vol"))
        os.umask(0o027)
        write_file_atomic(tmp_path / "b", b"x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "b").stat().st_mode) == 0o640
    files = [p for p in (tmp_path / "vol").rglob("*") if p.is_file()]
    assert files and {stat.S_IMODE(p.stat().st_mode) for p in files} == {0o644}
