"""Hand-off with Neuroglancer: a loopback server for its client, datasets and labelmap versions; states both ways.

From a notebook (``serve("path/to/repo", version="main")`` serves a labelmap version the same way):

>>> import json, urllib.request
>>> from napari_shardscope.core.sample_data import ensure_sample_dataset
>>> from napari_shardscope.core.serve import serve
>>> handoff = serve(ensure_sample_dataset().segmentation)   # a dataset path or URL, or several
>>> handoff.url.startswith("http://127.0.0.1:")             # open it in a browser: Neuroglancer, this view
True
>>> source = handoff.layers[0].layer.source                 # what Neuroglancer reads, from the same server
>>> source.startswith("precomputed://http://127.0.0.1:")
True
>>> with urllib.request.urlopen(source.removeprefix("precomputed://") + "info") as answer:
...     json.load(answer)["type"]
'segmentation'
>>> handoff.stop()

* :mod:`.server` — :class:`ShardServer` (127.0.0.1, a thread per connection, at most 64; HEAD,
  guarded keys);
* :mod:`.cors` — which other web origins may read the answers (none unless the user names them);
* :mod:`.messages` — error bodies name keys, never local paths;
* :mod:`.bodies` — what an answer sends: a stored key read in 1 MiB ranges, or computed bytes;
* :mod:`.ranges` — the ``Range`` header read as RFC 9110 says, within bounds;
* :mod:`.version_source` — a labelmap version as precomputed computed on request; merge-only
  versions as ``equivalences``;
* :mod:`.ngstate` — Neuroglancer states from a view description and parsed back (pure functions);
* :mod:`.states` — the states the server keeps for its links (``client#!<URL of the state>``), and
  :func:`load_state`, which reads any link back (fetching a state a link names);
* :mod:`.handoff` — mounting datasets and versions and building the link (:func:`serve`).
"""

from napari_shardscope.core.serve.handoff import Handoff, ServedLayer, default_view, mount_dataset, mount_version, serve
from napari_shardscope.core.serve.ngstate import (
    LayerView,
    ParsedState,
    ViewDescription,
    build_state,
    parse_state,
    state_from_text,
    state_url,
)
from napari_shardscope.core.serve.server import ShardServer, StoreMount
from napari_shardscope.core.serve.states import StateShelf, load_state
from napari_shardscope.core.serve.version_source import VersionMount, merge_equivalences

__all__ = [
    "Handoff",
    "LayerView",
    "ParsedState",
    "ServedLayer",
    "ShardServer",
    "StateShelf",
    "StoreMount",
    "VersionMount",
    "ViewDescription",
    "build_state",
    "default_view",
    "load_state",
    "merge_equivalences",
    "mount_dataset",
    "mount_version",
    "parse_state",
    "serve",
    "state_from_text",
    "state_url",
]
