"""``inspect``, ``ls`` and ``validate`` on every directory of ``../shared/realdata`` (written by other software).

Every directory with a metadata document — volumes, mesh, skeleton and annotation sources, N5
containers, zarr groups — and every directory above one (``wk_simple_n5/color``, ``ngscripts_sharded``)
is run through the three verbs. Each is clean, except what the datasets really have (their README
lists it) and what the test asserts by name:

* ``validate`` finds the non-conformance of ``ngscripts_sharded/zlib_as_gzip`` (zlib where gzip is
  specified) and the stale off-grid chunk files CloudVolume left in ``noduli_seg_head``;
* the sharded ``neuroglancer_multilod_draco`` mesh sources (igneous) validate clean: fragments are
  stored just before the manifest the index points at;
* a path that holds no dataset itself (a plain directory, an N5 container, a zarr group of groups,
  an OME-Zarr labels group) is refused with exit 3, naming the datasets below it;
* zarrita's two ``.b1`` arrays (fill_value 0 for bool, which zarr v3 forbids) are corrupt metadata, exit 4.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import PurePosixPath

import pytest

from napari_shardscope.core.cli import run
from tests.cli_batch import run_commands
from tests.core.formats.test_consistency import DIRS
from tests.realdata import NO_REALDATA, REALDATA, have_realdata, missing

#: ``validate`` findings the datasets really have (see ../shared/realdata/README.md), each a text validate prints.
KNOWN_PROBLEMS = {"ngscripts_sharded/zlib_as_gzip": ("bad gzip data", "the bytes are a zlib stream, not gzip"),
                  "noduli_seg_head": ("file name is not a chunk of this scale's grid",),
                  # CloudVolume's test fixture is an excerpt of H01's annotations: one spatial cell (10043
                  # points), one relationship file and one by_id file, for an id in no spatial cell. Its own
                  # test reads only by_id 3867588737; CloudVolume's get_by_id of a spatial cell's ids finds
                  # no file either. Neuroglancer reads by_id when an annotation is selected or hovered.
                  "cv_annotation": ("spatial0/0_0_0.gz: annotation 2959571531 (spatial level 0) has no by_id "
                                    "entry: Neuroglancer cannot select it at byte 8",
                                    "spatial0/0_0_0.gz: 10027 more cases: spatial cells list annotations by_id lacks",
                                    "by_id/3867588737.gz: annotation 3867588737 is in by_id but in no spatial cell")}
#: Directories with metadata that are not valid by their spec: ``{dir: what every verb says}`` (exit 4).
CORRUPT = {"ng_zarrita_v3/data.zarr/1d.contiguous.b1": "fill_value 0 is not a valid bool value",
           "ng_zarrita_v3/data.zarr/1d.contiguous.compressed.sharded.b1": "fill_value 0 is not a valid bool value"}
#: Directories that hold no dataset themselves: ``{dir: a dataset below it every verb must name}`` (exit 3).
ABOVE_DATASETS = {
    "n5java_backward": "data-1.5.0.n5/raw (N5",
    "n5java_backward/data-1.5.0.n5": "raw (N5",  # N5 containers
    "n5java_backward/data-2.5.1.n5": "raw (N5",
    "n5java_backward/data-3.1.3.n5": "raw (N5",
    "n5java_zi": "n5-java.n5/lz4 (N5 image uint8 3x512x512)",
    "n5java_zi/n5-java.n5": "lz4 (N5 image uint8 3x512x512)",
    "n5zarr_java_sharded": "test.zarr/mid_sharded (zarr v3",
    "n5zarr_java_sharded/test.zarr": "mid_sharded (zarr v3",
    "ng_n5_multiscale": "n5_viewer_multiscale_modern (N5",
    "ng_ome_zarr": "simple_0.5 (OME-Zarr",
    "ng_ome_zarr/simple_0.5/scale0": "image (zarr v3",  # zarr v3 groups of arrays
    "ng_ome_zarr/simple_0.5/scale1": "image (zarr v3",
    "ng_ome_zarr/simple_0.5/scale2": "image (zarr v3",
    "ng_precomputed_nodata": "two_channels (precomputed",
    "ng_zarrita_v3": "data.zarr/1d.chunked.i2 (zarr v3",
    "ng_zarrita_v3/data.zarr": "1d.chunked.i2 (zarr v3",  # the first 12 of 37, and "there may be more"
    "ngscripts_sharded": "zlib_as_gzip (precomputed",
    "ts_n5_testdata": "blosc (N5",
    "wk_ng_png": "rgb/color (precomputed",
    "wk_ng_png/gray": "color (precomputed",
    "wk_ng_png/rgb": "color (precomputed",
    "wk_simple_n5": "color/1 (N5 segmentation uint32 3x24x24x24)",
    "wk_simple_n5/color": "1 (N5 segmentation uint32 3x24x24x24)",
    "wk_zarr3_sharded": "color (OME-Zarr image uint8 3x24x24x24)",
    "z5py_n5_zi": "z5py.n5/gzip (N5",
    "z5py_n5_zi/z5py.n5": "gzip (N5",
    "zarrjava_ome05/labels": "zarrjava_ome05/labels/nuclei",  # an OME-Zarr labels group names its label images
    "zarrjava_sharding": "start (zarr v3",
    "zarrpy_n5_zi": "zarr.n5/gzip (N5",
    "zarrpy_n5_zi/zarr.n5": "gzip (N5",
    "zarrs_rust": "array_write_read.zarr/group/array (zarr v3",
    "zarrs_rust/array_write_read.zarr": "group/array (zarr v3",
    "zarrs_rust/array_write_read.zarr/group": "array (zarr v3",
    "zarrs_rust/sharded_array_write_read.zarr": "group/array (zarr v3",
    "zarrs_rust/sharded_array_write_read.zarr/group": "array (zarr v3",
    "zarrs_v3_zarrpython": "array_zstd.zarr (zarr v3",
}


def every_directory() -> list[str]:
    """Every directory with metadata, every directory above one, and every top-level directory of realdata."""
    if not have_realdata():
        return [NO_REALDATA]
    found = set(DIRS) | {p.name for p in REALDATA.iterdir() if p.is_dir()}
    for d in DIRS:
        parent = PurePosixPath(d).parent
        while str(parent) != ".":
            found.add(str(parent))
            parent = parent.parent
    return sorted(found)


ALL = every_directory()


def run_verb(verb: str, url: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run([verb, url])
    return code, out.getvalue(), err.getvalue()


@pytest.mark.realdata
def test_every_directory_is_listed_with_what_it_is() -> None:
    """Nothing under realdata escapes the sweep: each directory above a dataset is named here with a child."""
    above = [d for d in ALL if d not in DIRS]
    assert set(above) <= set(ABOVE_DATASETS), set(above) - set(ABOVE_DATASETS)
    assert set(ABOVE_DATASETS) | set(KNOWN_PROBLEMS) | set(CORRUPT) <= set(ALL)


@pytest.mark.realdata
@pytest.mark.parametrize("rel", ALL)
def test_inspect_ls_and_validate_on_every_real_directory(rel: str) -> None:
    url = str(REALDATA / rel)
    results = {verb: run_verb(verb, url) for verb in ("inspect", "ls", "validate")}
    codes = {verb: r[0] for verb, r in results.items()}
    if rel in ABOVE_DATASETS:
        assert codes == {"inspect": 3, "ls": 3, "validate": 3}, results
        for verb, (_, _, err) in results.items():
            assert ABOVE_DATASETS[rel] in err, (verb, err)
        return
    if rel in CORRUPT:
        assert codes == {"inspect": 4, "ls": 4, "validate": 4} and all(
            CORRUPT[rel] in r[2] for r in results.values()), results
        return
    code, out, err = results["validate"]
    if rel in KNOWN_PROBLEMS:
        assert code == 1 and all(text in out for text in KNOWN_PROBLEMS[rel]), out
        if rel == "ngscripts_sharded/zlib_as_gzip":  # its minishard indexes do not decode either: corrupt, exit 4
            assert codes["inspect"] == codes["ls"] == 4 and "not gzip" in results["inspect"][2], results
            return
    assert codes["inspect"] == 0 and codes["ls"] == 0, results
    if rel not in KNOWN_PROBLEMS:
        assert code == 0 and "no problems found" in err + out, (out, err)


@pytest.mark.realdata
def test_validate_of_igneous_sharded_multilod_meshes_as_a_user_runs_it() -> None:
    """The reported case, as a subprocess: ``shardscope validate crantb_mesh_sharded`` exits 0."""
    done = subprocess.run([sys.executable, "-m", "napari_shardscope", "validate",
                           str(REALDATA / "crantb_mesh_sharded")], capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no problems found" in done.stdout + done.stderr and "no index entry" not in done.stdout


@pytest.mark.realdata
def test_a_path_above_a_dataset_names_it_as_a_user_runs_it() -> None:
    done = subprocess.run([sys.executable, "-m", "napari_shardscope", "inspect",
                           str(REALDATA / "wk_simple_n5" / "color")], capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 3
    assert "datasets below it: 1 (N5 segmentation uint32 3x24x24x24)" in done.stderr, done.stderr


#: The sharded ``neuroglancer_multilod_draco`` sources of realdata (igneous): fragments before each manifest.
SHARDED_MULTILOD = ("crantb_mesh_sharded", "noduli_seg_head/mesh", "igneous_pinky_sharded/mesh_mip_0_err_40.0")


@pytest.fixture(scope="module")
def multilod_inspected() -> dict[str, tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]]:
    """``shardscope inspect DIR --json`` and ``shardscope inspect DIR`` of each sharded multilod source, the six
    command lines run in one child process (tests/cli_batch.py: what each prints and returns, one start-up)."""
    if not have_realdata():
        missing()
    commands = [[*cmd] for rel in SHARDED_MULTILOD for cmd in (("inspect", str(REALDATA / rel), "--json"),
                                                                 ("inspect", str(REALDATA / rel)))]
    done = run_commands(commands, timeout=600)
    return {rel: (done[2 * i], done[2 * i + 1]) for i, rel in enumerate(SHARDED_MULTILOD)}


@pytest.mark.realdata
@pytest.mark.parametrize("rel", SHARDED_MULTILOD)
def test_inspect_counts_the_fragments_of_sharded_multilod_meshes(
        rel: str, multilod_inspected: dict[str, tuple[subprocess.CompletedProcess[str],
                                                       subprocess.CompletedProcess[str]]]) -> None:
    """``shardscope inspect DIR --json`` (a child process, read from a pipe): a segment's entry owns its manifest
    and the fragments stored just before it, so each shard's data bytes are the manifests' plus the fragments'.
    igneous packs a shard with no gap, so index bytes + data bytes are the file's size (an oracle our parser has
    no part in), and the text summary says how the bytes split."""
    url = REALDATA / rel
    done, text = multilod_inspected[rel]
    assert done.returncode == 0, done.stderr
    (scale,) = json.loads(done.stdout)["scales"]
    assert scale["shards"], scale
    for shard in scale["shards"]:
        size = (url / shard["file"]).stat().st_size
        assert shard["index_bytes"] + shard["data_bytes"] == size, (shard, size)
        assert shard["data_bytes"] == shard["manifest_bytes"] + shard["fragment_bytes"]
        assert shard["fragment_bytes"] > 0 and shard["manifest_bytes"] == 64 * shard["chunks"], shard
    assert scale["data_bytes"] == sum(s["data_bytes"] for s in scale["shards"])
    assert text.returncode == 0, text.stderr
    assert (f"{scale['chunks']} segments; {scale['data_bytes']} data bytes ({scale['manifest_bytes']} in manifests, "
            f"{scale['fragment_bytes']} in fragments)") in text.stdout, text.stdout
