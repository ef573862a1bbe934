"""Where the Neuroglancer client comes from: the built client inside the ``neuroglancer`` wheel.

A public hosted Neuroglancer cannot fetch from a loopback server in current Chrome (private
network access), so the server hands out the client itself, from the same origin as the data.
The wheel's client is the one its Python integration serves: it must live under ``/v/<token>/``
and it opens ``/events/<token>`` (which the server answers with an idle event stream).
"""

from __future__ import annotations

import importlib.util
import mimetypes
from pathlib import Path

from napari_shardscope.core.bytestore.containment import key_problem
from napari_shardscope.core.errors import NotFoundError

#: Content types of the client's files (``mimetypes`` lacks ``.wasm`` on some systems).
_TYPES = {".js": "application/javascript", ".wasm": "application/wasm", ".css": "text/css",
          ".html": "text/html; charset=utf-8", ".map": "application/json"}


def client_directory() -> Path:
    """The directory of the built Neuroglancer client shipped in the installed ``neuroglancer`` package.

    Raises
    ------
    NotFoundError
        When the package is not installed or carries no built client.
    """
    spec = importlib.util.find_spec("neuroglancer")
    if spec is None or spec.origin is None:
        raise NotFoundError("the Neuroglancer client needs the 'neuroglancer' package: pip install neuroglancer")
    path = Path(spec.origin).parent / "static" / "client"
    if not (path / "index.html").is_file():
        raise NotFoundError(f"the installed neuroglancer package has no built client at {path}")
    return path


def client_file(root: Path, rel: str) -> tuple[bytes, str] | None:
    """The bytes and content type of client file ``rel`` (``""`` is ``index.html``); ``None`` if absent.

    ``rel`` is checked like any store key (no ``..``, no absolute path), so a request never reads
    outside the client directory.
    """
    rel = rel or "index.html"
    if key_problem(rel) is not None:
        return None
    path = root / rel
    if not path.is_file():
        return None
    ctype = _TYPES.get(path.suffix) or mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    return path.read_bytes(), ctype
