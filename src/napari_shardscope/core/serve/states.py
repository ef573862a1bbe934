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
import threading
from collections.abc import Mapping
from typing import Any

from napari_shardscope.core.cache import LruCache
from napari_shardscope.core.errors import ArgumentError, MetadataError
from napari_shardscope.core.json_document import MAX_JSON_BYTES, load_json_object
from napari_shardscope.core.serve.bodies import Body, BytesBody
from napari_shardscope.core.serve.ngstate import state_document_link, state_from_text

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

    def document(self, name: str) -> bytes | None:
        """The published document ``name`` (``<sha256>.json``), or None."""
        return self._docs.get(name) if _NAME.fullmatch(name) else None

    def local_roots(self) -> Mapping[str, str]:
        return {}


#: The shelves of the servers running in this process, by base URL (``http://127.0.0.1:PORT``).
_LIVE_SHELVES: dict[str, StateShelf] = {}
_LIVE_GUARD = threading.Lock()
_LOCAL_DOCUMENT = re.compile(r"(http://127\.0\.0\.1:[0-9]{1,5})/" + STATE_ROOT + r"/([0-9a-f]{64}\.json)")


def register_shelf(base_url: str, shelf: StateShelf | None) -> None:
    """Record (or, given None, forget) the shelf a server of this process serves at ``base_url``."""
    with _LIVE_GUARD:
        if shelf is None:
            _LIVE_SHELVES.pop(base_url, None)
        else:
            _LIVE_SHELVES[base_url] = shelf


def _local_document(url: str) -> bytes | None:
    """A document a server of this very process serves, read from its shelf instead of over HTTP.

    napari's "Open Neuroglancer link" is given links its own server handed out; asking that server
    over loopback from the GUI thread waits on the serving threads, which a busy viewer (layers
    loading, a slow machine) can keep from answering within the remote timeout.
    """
    match = _LOCAL_DOCUMENT.fullmatch(url)
    if match is None:
        return None
    with _LIVE_GUARD:
        shelf = _LIVE_SHELVES.get(match.group(1))
    return None if shelf is None else shelf.document(match.group(2))


def load_state(text: str) -> dict[str, Any]:
    """The state of a Neuroglancer link, JSON document, or link naming a state document (fetched, bounded).

    ``shardscope open`` and napari's "Open Neuroglancer link" take ``serve``'s own links this way
    (``client#!http://127.0.0.1:PORT/state/<id>.json``, while that server runs) as well as CAVE-style
    links to a state on ``gs://``, ``s3://`` or ``https://``.

    Raises
    ------
    ArgumentError
        As :func:`~.ngstate.state_from_text`; when the document cannot be fetched, is missing,
        larger than MAX_JSON_BYTES or not a JSON object (naming its URL).
    """
    url = state_document_link(text)
    if url is None:
        return state_from_text(text)
    data = _local_document(url)
    if data is None:
        data = _fetch_http(url) if url.startswith(("http://", "https://")) else _fetch_store(url)
    try:
        return load_json_object(data, key=url[:200])
    except MetadataError as exc:
        raise ArgumentError(f"the Neuroglancer state at {url[:200]}: {exc}") from exc


def _fetch_http(url: str) -> bytes:
    """A GET read to at most MAX_JSON_BYTES + 1 bytes, under the remote limits (timeout, retries).

    Not through a TensorStore store: its HTTP driver keeps retrying a refused connection (a ``serve``
    link whose server has stopped, the usual dead link) for minutes instead of failing. A refused
    connection or an HTTP error fails at once; a timeout (a server on a busy machine) is tried again,
    ``retries`` times, as every remote read is.
    """
    import time
    import urllib.error
    import urllib.request

    from napari_shardscope.core.bytestore.context import remote_limits, retry_delay

    limits = remote_limits()
    for attempt in range(limits.retries + 1):
        try:
            with urllib.request.urlopen(url, timeout=limits.timeout_s) as answer:
                data: bytes = answer.read(MAX_JSON_BYTES + 1)
            break
        except urllib.error.HTTPError as exc:
            raise ArgumentError(f"no Neuroglancer state at {url[:200]}: HTTP {exc.code}"
                                + (" (a serve link works while its server runs)" if exc.code == 404 else "")) from exc
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            timed_out = isinstance(exc, TimeoutError) or isinstance(reason, TimeoutError)
            if timed_out and attempt < limits.retries:
                time.sleep(retry_delay(attempt))
                continue
            tries = (f" after {attempt + 1} attempts of {limits.timeout_s:g} s (see --timeout/--retries)"
                     if timed_out else "")
            raise ArgumentError(f"cannot fetch the Neuroglancer state at {url[:200]}: {reason}{tries} "
                                "(a serve link works while its server runs)") from exc
    if len(data) > MAX_JSON_BYTES:
        raise ArgumentError(f"the Neuroglancer state at {url[:200]} is larger than the {MAX_JSON_BYTES} bytes read")
    return data


def _fetch_store(url: str) -> bytes:
    """The document through the project's byte stores (``gs://``, ``s3://``, ``file://``), bounded."""
    from napari_shardscope.core.bytestore import open_store
    from napari_shardscope.core.bytestore.protocol import read_bounded

    parent, _, name = url.rstrip("/").rpartition("/")
    if not name or "://" not in parent:
        raise ArgumentError(f"the link names no state document: {url[:200]!r}")
    try:
        data = read_bounded(open_store(parent + "/"), name, MAX_JSON_BYTES, "a Neuroglancer state", MetadataError)
    except MetadataError as exc:
        raise ArgumentError(f"the Neuroglancer state at {url[:200]}: {exc}") from exc
    if data is None:
        raise ArgumentError(f"no Neuroglancer state at {url[:200]}")
    return data
