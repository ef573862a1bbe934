"""A chunk larger than the memory budget is refused at parse time, naming the field.

TensorStore allocates one whole chunk per read: a declared chunk of 2**40 voxels used to abort the
process inside TensorStore. Each case runs in a subprocess, so a crash shows as a failed
assertion (a negative return code), not a dead test run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BIG = 1 << 14  # 2**42 voxels per chunk in 3-D


def _precomputed(root: Path) -> str:
    scale = {"key": "s0", "size": [BIG, BIG, BIG], "resolution": [1, 1, 1], "chunk_sizes": [[BIG, BIG, BIG]],
             "encoding": "raw"}
    (root / "info").write_text(json.dumps({"type": "image", "data_type": "uint8", "num_channels": 1,
                                           "scales": [scale]}))
    return r"scales\[0\]\.chunk_sizes"


def _zarr3(root: Path) -> str:
    (root / "zarr.json").write_text(json.dumps({
        "zarr_format": 3, "node_type": "array", "shape": [BIG, BIG, BIG], "data_type": "uint16",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [BIG, BIG, BIG]}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}))
    return "chunk_shape"


def _zarr3_sharded(root: Path) -> str:
    (root / "zarr.json").write_text(json.dumps({
        "zarr_format": 3, "node_type": "array", "shape": [BIG, BIG, BIG], "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [BIG, BIG, BIG]}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
        "codecs": [{"name": "sharding_indexed", "configuration": {
            "chunk_shape": [BIG // 2, BIG // 2, BIG // 2],
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]}}]}))
    return "chunk_shape"


def _n5(root: Path) -> str:
    (root / "attributes.json").write_text(json.dumps({
        "dimensions": [BIG, BIG, BIG], "blockSize": [BIG, BIG, BIG], "dataType": "uint8",
        "compression": {"type": "raw"}}))
    return "blockSize"


SCRIPT = """
import sys
from napari_shardscope.core.errors import MetadataError
from napari_shardscope.core.volumes import open_volumes
try:
    v = open_volumes(sys.argv[1])[0]
    a = v.levels[0].array
    a[(0,) * a.ndim]
except MetadataError as exc:
    print(exc)
    sys.exit(4)
print("opened")
"""


@pytest.mark.parametrize("make", [_precomputed, _zarr3, _zarr3_sharded, _n5], ids=lambda f: f.__name__[1:])
def test_a_chunk_over_the_budget_is_a_metadata_error(tmp_path: Path, make: object) -> None:
    field = make(tmp_path)  # type: ignore[operator]
    run = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 4, (run.returncode, run.stdout, run.stderr[-2000:])
    assert "budget" in run.stdout
    import re

    assert re.search(field, run.stdout), run.stdout
