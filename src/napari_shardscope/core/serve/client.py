"""Where the Neuroglancer client comes from: the built client inside the ``neuroglancer`` wheel.

A public hosted Neuroglancer cannot fetch from a loopback server in current Chrome (private
network access), so the server hands out the client itself, from the same origin as the data.
The wheel's client is the one its Python integration serves: it must live under ``/v/<token>/``
and it opens ``/events/<token>`` (which the server answers with an idle event stream). Its files
are served like a dataset's, through a local byte store over :func:`client_directory` (range
reads, containment guards).
"""

from __future__ import annotations

import importlib.util
import mimetypes
from pathlib import Path, PurePosixPath

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


def client_type(rel: str) -> str:
    """The content type of client file ``rel`` (by its suffix)."""
    name = PurePosixPath(rel).name
    return _TYPES.get(PurePosixPath(name).suffix) or mimetypes.guess_type(name)[0] or "application/octet-stream"
