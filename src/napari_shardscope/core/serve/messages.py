"""What an HTTP client is told when a request fails: the key and the reason, never a local path.

An error raised while reading names files as the local user needs them (``/home/ana/data/seg/
4_4_40/1.shard: chunk 4 … truncated``, a link's target, a repository's directory); the server's
log keeps that. An HTTP client is another program — in a browser, possibly any page that found the
port — and learns nothing of the disk from it: :func:`client_message` rewrites each local root a
mount reads to the name the client knows it by (the served root's keys are relative, as the client
asked for them; a labelmap version's base is ``<base>``, its repository ``<repository>``) and any
other absolute path to ``<local path>``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

from napari_shardscope.core.bytestore.url import parse_url
from napari_shardscope.core.errors import ShardscopeError

#: What an absolute path outside every named root becomes.
HIDDEN = "<local path>"

_FILE_URL = re.compile(r"\bfile://(?=/)")
# An absolute POSIX path: a "/" not inside a word, URL or relative path, and what follows it up to
# a space, quote or separator; a Windows drive path.
_POSIX = re.compile(r"(?<![\w.~:/@>\\-])/[^\s'\",;:)\]]+")
_WINDOWS = re.compile(r"\b[A-Za-z]:\\[^\s'\",;:)\]]*")


def client_message(text: str, roots: Iterable[tuple[str, str]]) -> str:
    """``text`` with each local root (given and resolved) replaced by its client-side name, other paths hidden.

    ``roots`` pairs a local directory with the name a client knows it by; ``""`` is the served
    root itself, whose keys then read as relative keys (``/srv/ds/s0/1.shard`` → ``s0/1.shard``).
    """
    text = _FILE_URL.sub("", text)
    pairs: dict[str, str] = {}
    for root, name in roots:
        for form in (root, os.path.realpath(root)):
            form = form.rstrip("/")
            if form:
                pairs.setdefault(form, name)
    for root in sorted(pairs, key=len, reverse=True):
        name = pairs[root]
        inside = (f"{name}/" if name else "").replace("\\", "\\\\")
        itself = (name or "the served root").replace("\\", "\\\\")
        text = re.sub(re.escape(root) + r"/(?=[^\s'\"])", inside, text)
        text = re.sub(re.escape(root) + r"(?![\w.-])", itself, text)
    text = _POSIX.sub(HIDDEN, text)
    return _WINDOWS.sub(HIDDEN, text)


def local_root(url: str, name: str) -> dict[str, str]:
    """``{directory: name}`` for a local dataset URL or path; ``{}`` for a remote one."""
    try:
        loc = parse_url(url)
    except ShardscopeError:
        return {}
    return {str(loc.kvstore["path"]): name} if loc.is_local else {}
