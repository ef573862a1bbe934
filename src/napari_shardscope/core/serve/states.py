"""Neuroglancer states kept by the server and served as JSON documents, for links of the form ``client#!<URL>``.

Why not ``client#!{state}``: the client shipped in the ``neuroglancer`` wheel (2.41) restores a
``#!{...}`` state while the page starts, synchronously, with its URL-hash binding already listening.
Restoring the first layer of a cold page takes 100–350 ms in headless Chromium here; the binding's
debounced "write the state back into the URL" (200 ms wait, 400 ms at most) then fires *inside*
that restore, serialises every layer, and an annotation layer not yet restored throws
("Cannot read properties of undefined (reading 'length')": its ``localAnnotationRelationships`` is
set only by ``restoreState``). The layer being restored is deleted for it, so the link opened
without its segmentation (or its annotations) in most page loads.

Given ``#!http://…/state/<id>.json`` instead, the client starts empty, fetches the document and
restores it after its start-up, when a layer restores in ~10–30 ms: far from the 200 ms at which the
binding would interrupt it. The address bar then shows the full ``#!{state}`` as usual (the binding
writes it after the restore), so a user can still copy the view they are looking at.

A document's id is the SHA-256 of its canonical JSON (the same view, the same link; a link cannot be
guessed into another document). The shelf holds at most :data:`MAX_STATES` documents of at most
:data:`~napari_shardscope.core.json_document.MAX_JSON_BYTES` bytes each (least recently published or
fetched dropped first): memory stays bounded however many links a session hands out.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from napari_shardscope.core.cache import LruCache
from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.json_document import MAX_JSON_BYTES
from napari_shardscope.core.serve.bodies import Body, BytesBody

#: First path component of the served documents: ``/state/<id>.json``.
STATE_ROOT = "state"
#: Documents kept at once (each at most MAX_JSON_BYTES; in practice a few kilobytes).
MAX_STATES = 256
#: Total bytes of the documents kept.
MAX_STATE_BYTES = 64 << 20
#: The name of a document: its id (64 lowercase hex digits) and ``.json``.
_NAME = re.compile(r"[0-9a-f]{64}\.json")


def state_document(state: Mapping[str, Any]) -> bytes:
    """``state`` as the compact UTF-8 JSON the server sends (keys in the caller's order, as Neuroglancer wrote them).

    Raises
    ------
    ArgumentError
        When the state is not JSON-serialisable or is larger than MAX_JSON_BYTES.
    """
    try:
        text = json.dumps(state, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ArgumentError(f"the Neuroglancer state is not a JSON document: {exc}") from exc
    data = text.encode("utf-8")
    if len(data) > MAX_JSON_BYTES:
        raise ArgumentError(f"a Neuroglancer state of {len(data)} bytes is larger than the {MAX_JSON_BYTES} served")
    return data


class StateShelf:
    """The states a server hands out links to, served read-only below ``/state/`` (a server :class:`Mount`).

    Documents never change once published (the id is their digest), so the browser may cache them.
    """

    cacheable = True

    def __init__(self, capacity: int = MAX_STATES, max_bytes: int = MAX_STATE_BYTES) -> None:
        self._docs: LruCache[str, bytes] = LruCache(capacity, weigh=len, max_weight=max_bytes)

    def publish(self, state: Mapping[str, Any]) -> str:
        """Keep ``state``; returns its document's name (``<sha256>.json``), the key it is served under."""
        data = state_document(state)
        name = hashlib.sha256(data).hexdigest() + ".json"
        self._docs.put(name, data)
        return name

    def open(self, key: str) -> Body | None:
        if not _NAME.fullmatch(key):  # anything but a digest name: nothing is there (no lookup, whatever its size)
            return None
        data = self._docs.get(key)
        return None if data is None else BytesBody(data)

    def local_roots(self) -> Mapping[str, str]:
        return {}
