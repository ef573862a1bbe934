"""Where a proofreader's repositories and exports go by default: somewhere they will find them again.

Beside the data when it is a local directory the user may write to: ``<dataset>.shardscope/``
next to ``<dataset>``, holding the repository (``<dataset>.repo``) and, beside it, its exports. For
data that is remote, read-only or has no file at all (an array in a notebook), a folder the user
chose once, remembered in a small JSON file in the user's config directory
(``$SHARDSCOPE_CONFIG_DIR``, else ``$XDG_CONFIG_HOME/napari-shardscope``, else
``~/.config/napari-shardscope``) — never a cache directory, which is cleaned without asking and
which nobody browses.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from napari_shardscope.core.bytestore.url import split_format
from napari_shardscope.core.errors import ArgumentError

#: Suffix of the folder made beside a dataset for its repositories and exports.
WORKSPACE_SUFFIX = ".shardscope"
SETTINGS_FILE = "settings.json"
CONFIG_VARIABLE = "SHARDSCOPE_CONFIG_DIR"


def config_dir() -> Path:
    """The user's napari-shardscope config directory (not created here)."""
    explicit = os.environ.get(CONFIG_VARIABLE)
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CONFIG_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".config") / "napari-shardscope"


def _settings() -> dict[str, object]:
    try:
        doc = json.loads((config_dir() / SETTINGS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def remembered_folder() -> Path | None:
    """The folder the user chose for repositories of data that has no writable place of its own."""
    folder = _settings().get("workspace")
    return Path(folder) if isinstance(folder, str) and folder else None


def remember_folder(folder: str | os.PathLike[str]) -> Path:
    """Remember ``folder`` for next time (written atomically: temp file + rename)."""
    path = Path(folder).expanduser().resolve()
    if path.exists() and not path.is_dir():
        raise ArgumentError(f"{path} is a file, not a folder for repositories")
    settings = {**_settings(), "workspace": str(path)}
    where = config_dir()
    where.mkdir(parents=True, exist_ok=True)
    tmp = where / f".{SETTINGS_FILE}.tmp"
    tmp.write_text(json.dumps(settings, indent=1))
    tmp.replace(where / SETTINGS_FILE)
    return path


def local_dataset(url: str | None) -> Path | None:
    """The local directory or file ``url`` names, ``None`` for a remote URL or nothing."""
    if not url:
        return None
    text, _ = split_format(str(url))
    if text.startswith("file://"):
        from urllib.parse import unquote, urlparse

        text = unquote(urlparse(text).path)
    if "://" in text:
        return None
    path = Path(text).expanduser()
    return path if path.exists() else None


def workspace_beside(dataset: Path) -> Path | None:
    """``<dataset>.shardscope`` beside ``dataset`` when the user may write there, else ``None``."""
    parent = dataset.resolve().parent
    folder = parent / f"{dataset.resolve().name}{WORKSPACE_SUFFIX}"
    if folder.is_dir():
        return folder if os.access(folder, os.W_OK) else None
    return folder if os.access(parent, os.W_OK) else None


def default_repository(url: str | None, name: str) -> Path | None:
    """Where a new repository over ``url`` (or over an array called ``name``) goes by default.

    ``<dataset>.shardscope/<dataset>.repo`` beside local, writable data; else
    ``<remembered folder>/<name>.shardscope/<name>.repo``; ``None`` when there is no such place yet
    (a GUI then asks for a folder once and remembers it).
    """
    from napari_shardscope.core.proofreading.imported import safe_name

    dataset = local_dataset(url)
    if dataset is not None:
        folder = workspace_beside(dataset)
        if folder is not None:
            return folder / f"{safe_name(dataset.name)}.repo"
    remembered = remembered_folder()
    if remembered is None:
        return None
    last = str(url).rstrip("/").rsplit("/", 1)[-1] if url else name
    stem = safe_name(dataset.name if dataset is not None else last)
    return remembered / f"{stem}{WORKSPACE_SUFFIX}" / f"{stem}.repo"
