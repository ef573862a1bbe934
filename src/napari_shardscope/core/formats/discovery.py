"""What can be opened below a path that is not a dataset itself: the parent of one, a group of groups.

A user pointing one level too high (``wk_simple_n5/color`` instead of ``color/1``, an N5 container,
a zarr group holding OME-Zarr images) should be told where the datasets are, not only that this is
not one. :func:`find_openable` looks for them, bounded so that an answer never costs more than a
few dozen small reads whatever lies below:

* at most :data:`MAX_DEPTH` levels below the path, :data:`MAX_PROBED` directories examined in all,
  and :data:`MAX_LISTED` datasets named;
* a local directory is listed with ``os.scandir`` (sub-directories only, names starting with ``.``
  skipped, links not followed); a remote store is not listed — TensorStore's listing has neither a
  delimiter nor a limit, so listing a bucket prefix would enumerate every chunk below it — and only
  the names the metadata itself gives (zarr v3 consolidated metadata, OME-Zarr ``labels``) are probed;
* a directory is probed by reading its metadata documents (the registry's, at once) and computing
  its volume specs — metadata only, never a chunk. One that holds volumes is named with its format,
  dtype and shape; one that is a group again (``NotADatasetError``) is looked into; anything else is
  passed over.

Probing opens datasets, whose own "not a dataset" errors would look below them in turn: a
context variable turns that off while a search runs, so the search is never recursive.
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from napari_shardscope.core.bytestore import Location
from napari_shardscope.core.errors import NotADatasetError, ShardscopeError

#: Levels below the path looked into (zarrs writes ``x.zarr/group/array``: three).
MAX_DEPTH = 3
#: Directories examined (metadata read) per search, at most.
MAX_PROBED = 48
#: Datasets named per search, at most.
MAX_LISTED = 12
#: Entries of one directory read, at most (a directory of chunk files is not read to its end).
MAX_ENTRIES = 1024

_SEARCHING: contextvars.ContextVar[bool] = contextvars.ContextVar("shardscope_discovery", default=False)


@dataclass(frozen=True)
class OpenableChild:
    """A dataset found below a path: where (relative, ``/``-separated), its format and what it holds."""

    path: str
    format: str
    summary: str

    def __str__(self) -> str:
        return f"{self.path} ({self.format} {self.summary})"


@dataclass(frozen=True)
class Openable:
    """What :func:`find_openable` found.

    Attributes
    ----------
    children
        The datasets found, in the order met (sorted names, breadth first).
    complete
        ``False`` when a limit stopped the search before everything within reach was seen.
    listed
        ``False`` when the store could not be listed (remote): only names from the metadata were probed.
    """

    children: tuple[OpenableChild, ...]
    complete: bool
    listed: bool

    def describe(self) -> str:
        """The sentence an error message ends with."""
        if self.children:
            names = ", ".join(str(c) for c in self.children)
            more = "; there may be more (the search stops after a few levels and entries)" if not self.complete else ""
            return f"datasets below it: {names}{more}"
        if not self.listed:
            return "a remote store is not listed: give the path of a dataset below it"
        if not self.complete:
            return (f"no dataset found below it (the search looks {MAX_DEPTH} levels down and into at most "
                    f"{MAX_PROBED} directories: give a path closer to a dataset)")
        return f"no dataset found within {MAX_DEPTH} levels below it"


#: ``probe(location) -> (format title, summary)`` of the volumes at ``location``; raises NotADatasetError for a
#: group (looked into) and other errors for what is not a volume (passed over); ``None`` without metadata.
Probe = Callable[[Location], "tuple[str, str] | None"]


def searching() -> bool:
    """Whether a search is running in this context (a dataset's error should then not search again)."""
    return _SEARCHING.get()


def find_openable(location: Location, probe: Probe, *, named: Sequence[str] = (), max_depth: int = MAX_DEPTH,
                  max_probed: int = MAX_PROBED, max_listed: int = MAX_LISTED) -> Openable:
    """The datasets below ``location`` (see the module docstring for the bounds and what is probed).

    ``named`` are children the metadata names (consolidated arrays, label images): probed first, and
    the only ones probed on a store that cannot be listed.
    """
    token = _SEARCHING.set(True)
    try:
        return _search(location, probe, named, max_depth, max_probed, max_listed)
    finally:
        _SEARCHING.reset(token)


def _search(location: Location, probe: Probe, named: Sequence[str], max_depth: int, max_probed: int,
            max_listed: int) -> Openable:
    found: list[OpenableChild] = []
    complete = True
    probed = 0
    seen: set[str] = set()
    level: list[str] = list(dict.fromkeys(n.strip("/") for n in named if n.strip("/")))
    level += [n for n in _subdirectories(location, "") if n not in level]
    for depth in range(1, max_depth + 1):
        below: list[str] = []
        for rel in level:
            if rel in seen:
                continue
            seen.add(rel)
            if probed >= max_probed or len(found) >= max_listed:
                return Openable(tuple(found), False, location.is_local)
            probed += 1
            child = location.child(rel)
            try:
                what = probe(child)
            except NotADatasetError:  # a group: the datasets are further down
                what = None
            except ShardscopeError:  # meshes, skeletons, broken metadata: not a volume to open
                continue
            if what is not None:
                found.append(OpenableChild(rel, *what))
                continue
            if depth == max_depth:  # not looked into: the search is complete only if there is nothing to look into
                complete = complete and next(_subdirectories(location, rel), None) is None
                continue
            below.extend(f"{rel}/{n}" for n in _subdirectories(location, rel))
        level = below
    return Openable(tuple(found), complete, location.is_local)


def _subdirectories(location: Location, rel: str) -> Iterator[str]:
    """The names of the sub-directories of ``rel`` below a local ``location``, sorted; nothing for a remote one."""
    if not location.is_local:
        return iter(())
    base = os.path.join(str(location.kvstore["path"]), rel)
    names: list[str] = []
    if not os.path.isdir(base):  # a path that is not there (a typo) is not listed at all
        return iter(())
    try:
        with os.scandir(base) as entries:
            for count, entry in enumerate(entries):
                if count >= MAX_ENTRIES:
                    break
                if not entry.name.startswith(".") and entry.is_dir(follow_symlinks=False):
                    names.append(entry.name)
    except OSError:  # unreadable or gone: nothing to name there
        return iter(())
    return iter(sorted(names))
