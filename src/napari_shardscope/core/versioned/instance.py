"""Data instances: named, typed namespaces of keys in a repository (DVID's data instances).

A repository holds several instances — a ``labelmap`` segmentation, ``keyvalue`` stores of
bookmarks and notes — each with a small integer id that prefixes all its keys, so instances never
see each other's data and one range scan never crosses into another instance.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from napari_shardscope.core.errors import ArgumentError

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")

#: Instance types the store accepts; type modules add theirs with :func:`register_instance_type`.
INSTANCE_TYPES: set[str] = {"keyvalue"}


def register_instance_type(name: str) -> None:
    """Allow instances of type ``name`` (called by a type's module, e.g. the labelmap)."""
    INSTANCE_TYPES.add(name)


def check_instance_name(name: object) -> str:
    """``name`` if it is a well-formed instance name (also applied to names a remote hands us)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ArgumentError(f"bad instance name {str(name)[:80]!r}: use 1-128 letters, digits, '.', '_' or '-'")
    return name


def check_instance(name: str, type_name: str) -> None:
    """Reject malformed names and unregistered types before anything is written."""
    check_instance_name(name)
    if type_name not in INSTANCE_TYPES:
        raise ArgumentError(f"unknown instance type {type_name!r}; known: {', '.join(sorted(INSTANCE_TYPES))}")


@dataclass(frozen=True)
class Instance:
    """A data instance: a named, typed namespace of keys (DVID's data instance).

    Attributes
    ----------
    name
        Unique name in the repository.
    type
        Instance type (``keyvalue``, ``labelmap``).
    iid
        Small integer id used as the first 4 bytes of the instance's keys.
    config
        Type-specific settings (e.g. a labelmap's base volume URL), JSON-serialisable.
    """

    name: str
    type: str
    iid: int
    config: Mapping[str, Any] = field(default_factory=dict, hash=False)
