"""The cache a user gets without asking: sized from the available memory, on every way in.

In a fresh process with ``SHARDSCOPE_CACHE_MB`` unset, a volume opened by ``open_volume``, by the
napari reader (``read_volumes``, what napari's open calls) and by ``shardscope open``'s set-up (no
``--cache-mb``) reads through a cache pool of :func:`default_cache_bytes` — an eighth of the memory
available, 256 MiB to 4 GiB — read back from the opened TensorStore's own context.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.volume_cases import write_zarr2_array

ROOT = Path(__file__).resolve().parents[2]

PROBE = r"""
import argparse, json, sys
from napari_shardscope.core.bytestore.context import default_cache_bytes
from napari_shardscope.core.volumes import open_volume
from napari_shardscope.napari_plugin.cli import _apply_cache
from napari_shardscope.napari_plugin.reader import read_volumes

def limit(store):
    return store.spec(retain_context=True).to_json()["context"]["cache_pool"]["total_bytes_limit"]

path = sys.argv[1]
_apply_cache(argparse.Namespace(cache_mb=None))  # `shardscope open PATH` without --cache-mb
(data, _, _), = read_volumes(path)
shown = data[0] if isinstance(data, list) else data
out = {"default": default_cache_bytes(), "open_volume": limit(open_volume(path).levels[0].array.store),
       "reader": limit(shown.inner.store)}
print(json.dumps(out))
"""


def test_every_way_in_uses_the_memory_sized_default(tmp_path: Path) -> None:
    path = write_zarr2_array(tmp_path).path  # a level TensorStore's driver opens (its spec carries the context)
    env = {k: v for k, v in os.environ.items() if k != "SHARDSCOPE_CACHE_MB"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", PROBE, str(path)], capture_output=True, text=True, env=env,
                         timeout=120, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    from napari_shardscope.core.bytestore.context import MAX_DEFAULT_CACHE_BYTES, MIN_DEFAULT_CACHE_BYTES

    assert MIN_DEFAULT_CACHE_BYTES <= got["open_volume"] <= MAX_DEFAULT_CACHE_BYTES
    assert got["open_volume"] == got["reader"]  # one shared context
    # sized when the first volume opened; the available memory may have moved a little since
    assert abs(got["open_volume"] - got["default"]) <= 0.05 * got["default"], got


def test_cli_help_states_the_default_cache() -> None:
    from napari_shardscope.napari_plugin.cli import _VIEW

    (text,) = [a.options["help"] for a in _VIEW if getattr(a, "options", {}).get("metavar") == "MB"]
    assert "available memory" in text and "512" not in text
