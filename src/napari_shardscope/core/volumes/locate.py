"""Where a volume lives: turn what a user types into a TensorStore kvstore spec.

Accepted forms (the same for every format):

* a local path (``~`` expanded, made absolute) or a ``file://`` URL;
* ``http://`` / ``https://`` — TensorStore's http kvstore issues range requests, so a sharded
  volume on any static web server (or a public bucket's HTTPS endpoint) opens without a
  download;
* ``gs://bucket/path`` and ``s3://bucket/path`` — handed to TensorStore's gcs / s3 drivers,
  which take credentials from the environment as the Google and AWS SDKs do
  (``GOOGLE_APPLICATION_CREDENTIALS`` or ``gcloud auth application-default login``;
  ``AWS_PROFILE`` / ``AWS_ACCESS_KEY_ID`` …, ``AWS_REGION``). Public buckets need none.

Any of these may carry a Neuroglancer-style format prefix — ``precomputed://``, ``zarr3://``
(or ``zarr://``), ``n5://`` — which skips format detection, as in Neuroglancer's own URLs.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlparse

from napari_shardscope.core.errors import ArgumentError, MetadataError, StoreError

#: Neuroglancer-style prefixes that name the format, and the format they select.
FORMAT_PREFIXES: dict[str, str] = {
    "precomputed://": "precomputed",
    "zarr3://": "zarr",
    "zarr://": "zarr",
    "n5://": "n5",
}
REMOTE_SCHEMES = ("http", "https", "gs", "s3")


@dataclass(frozen=True)
class Location:
    """A directory-like place in a kvstore.

    Attributes
    ----------
    url
        The location as a user would type it (format prefix removed).
    kvstore
        TensorStore kvstore JSON spec whose ``path`` ends with ``/``.
    format_hint
        The format named by a prefix (``"precomputed"``, ``"zarr"``, ``"n5"``), or ``None``.
    """

    url: str
    kvstore: dict[str, Any]
    format_hint: str | None = None

    @property
    def name(self) -> str:
        """The last path component: a layer name a user recognises."""
        path = str(self.kvstore.get("path", "")).rstrip("/")
        return path.rsplit("/", 1)[-1] or self.url.rstrip("/").rsplit("/", 1)[-1] or "volume"

    @property
    def is_local(self) -> bool:
        return self.kvstore.get("driver") == "file"

    def parent(self) -> Location:
        """The location one level up (used when a user points at a metadata file itself)."""
        path = str(self.kvstore.get("path", "")).rstrip("/")
        head = path.rsplit("/", 1)[0] if "/" in path else ""
        spec = dict(self.kvstore)
        spec["path"] = f"{head}/" if head else ""
        return Location(url=self.url.rstrip("/").rsplit("/", 1)[0], kvstore=spec, format_hint=self.format_hint)

    def child(self, *parts: str) -> Location:
        """The location ``parts`` below this one (``"labels"``, ``"cells"`` …)."""
        rel = "/".join(p.strip("/") for p in parts if p.strip("/"))
        if not rel:
            return self
        spec = dict(self.kvstore)
        spec["path"] = f"{spec.get('path', '')}{rel}/"
        return Location(url=f"{self.url.rstrip('/')}/{rel}", kvstore=spec, format_hint=None)


def parse_location(url: str | os.PathLike[str]) -> Location:
    """Parse a path or URL (optionally prefixed with a format) into a :class:`Location`.

    Raises
    ------
    ArgumentError
        For an empty string or a URL scheme we cannot read.
    """
    text = os.fspath(url).strip()
    if not text:
        raise ArgumentError("an empty path is not a volume")
    hint = None
    for prefix, fmt in FORMAT_PREFIXES.items():
        if text.lower().startswith(prefix):
            hint, text = fmt, text[len(prefix):]
            break
    parsed = urlparse(text)
    scheme = parsed.scheme.lower()
    if scheme == "" or (len(scheme) == 1 and os.name == "nt"):
        path = os.path.abspath(os.path.expanduser(text))
        return Location(url=text, kvstore={"driver": "file", "path": _dir(path)}, format_hint=hint)
    if scheme == "file":
        path = os.path.abspath(unquote(parsed.path))
        return Location(url=text, kvstore={"driver": "file", "path": _dir(path)}, format_hint=hint)
    if scheme in REMOTE_SCHEMES:
        import tensorstore as ts

        try:
            spec = ts.KvStore.Spec(_dir(text)).to_json()
        except (ValueError, TypeError) as exc:
            raise ArgumentError(f"{text!r} is not a URL TensorStore can open: {exc}") from None
        return Location(url=text, kvstore=dict(spec), format_hint=hint)
    raise ArgumentError(f"unsupported URL scheme {parsed.scheme!r} in {text!r}; use a path, file://, "
                        "http(s)://, gs:// or s3://")


def is_remote(url: str | os.PathLike[str]) -> bool:
    """Whether ``url`` (prefix allowed) names a remote store rather than the local disk."""
    text = os.fspath(url).strip()
    for prefix in FORMAT_PREFIXES:
        if text.lower().startswith(prefix):
            text = text[len(prefix):]
            break
    return urlparse(text).scheme.lower() in REMOTE_SCHEMES


def _dir(path: str) -> str:
    return path if path.endswith("/") else path + "/"


def read_bytes(loc: Location, key: str, context: Any) -> bytes | None:
    """The bytes of ``key`` under ``loc``, or ``None`` when it does not exist."""
    return read_keys(loc, [key], context)[key]


def read_keys(loc: Location, keys: list[str], context: Any) -> dict[str, bytes | None]:
    """The bytes of each of ``keys`` under ``loc`` (``None`` for missing ones), read concurrently.

    Goes through TensorStore's kvstore (with the shared context), so local files, HTTP, GCS and
    S3 behave the same and share connection pools with the voxel reads; concurrent reads make
    format detection on a remote store cost one round-trip, not three.
    """
    import tensorstore as ts

    try:
        kv = ts.KvStore.open(loc.kvstore, context=context).result()
    except Exception as exc:  # TensorStore raises ValueError for bad specs and unreachable stores
        raise StoreError(f"{loc.url}: {exc}") from exc
    futures = {key: kv.read(key) for key in keys}
    out: dict[str, bytes | None] = {}
    for key, future in futures.items():
        try:
            result = future.result()
        except Exception as exc:  # I/O, auth and network failures
            message = str(exc)
            if "NOT_FOUND" in message or "404" in message or "Not a directory" in message:
                out[key] = None
                continue
            raise StoreError(f"{loc.url.rstrip('/')}/{key}: {message}") from exc
        out[key] = bytes(result.value) if result.state == "value" else None
    return out


def read_json(loc: Location, key: str, context: Any) -> dict[str, Any] | None:
    """``key`` under ``loc`` parsed as a JSON object, ``None`` when absent.

    Raises
    ------
    MetadataError
        When the key exists but is not a JSON object (with the byte offset of a syntax error).
    """
    return parse_json_object(read_bytes(loc, key, context), f"{loc.url.rstrip('/')}/{key}")


def parse_json_object(data: bytes | None, where: str) -> dict[str, Any] | None:
    """``data`` parsed as a JSON object (``None`` passes through); errors name ``where``."""
    if data is None:
        return None
    try:
        obj = json.loads(data)
    except UnicodeDecodeError as exc:
        raise MetadataError("is not UTF-8 text", key=where, offset=exc.start) from None
    except json.JSONDecodeError as exc:
        raise MetadataError(f"invalid JSON ({exc.msg})", key=where, offset=exc.pos) from None
    if not isinstance(obj, dict):
        raise MetadataError(f"must be a JSON object, got {type(obj).__name__}", key=where)
    return obj
