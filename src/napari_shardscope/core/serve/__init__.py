"""Hand-off with Neuroglancer: a loopback server for its client, datasets and labelmap versions; states both ways.

From a notebook::

    from napari_shardscope.core.serve import serve
    handoff = serve("path/to/repo", version="main")   # or a dataset path / URL, or several
    handoff.url                                        # open it in a browser; handoff.stop() when done

* :mod:`.server` — :class:`ShardServer` (127.0.0.1, a thread per connection, at most 64; HEAD,
  guarded keys);
* :mod:`.cors` — which other web origins may read the answers (none unless the user names them);
* :mod:`.messages` — error bodies name keys, never local paths;
* :mod:`.bodies` — what an answer sends: a stored key read in 1 MiB ranges, or computed bytes;
* :mod:`.ranges` — the ``Range`` header read as RFC 9110 says, within bounds;
* :mod:`.version_source` — a labelmap version as precomputed computed on request; merge-only
  versions as ``equivalences``;
* :mod:`.ngstate` — Neuroglancer states from a view description and parsed back (pure functions);
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
from napari_shardscope.core.serve.version_source import VersionMount, merge_equivalences

__all__ = [
    "Handoff",
    "LayerView",
    "ParsedState",
    "ServedLayer",
    "ShardServer",
    "StoreMount",
    "VersionMount",
    "ViewDescription",
    "build_state",
    "default_view",
    "merge_equivalences",
    "mount_dataset",
    "mount_version",
    "parse_state",
    "serve",
    "state_from_text",
    "state_url",
]
