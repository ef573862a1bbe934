"""Every error the package raises belongs to a group a caller can act on, with one exit code."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import napari_shardscope.core as core
from napari_shardscope.core.errors import (
    EXIT_CODES,
    EXIT_INTERNAL,
    EXIT_OTHER,
    ArgumentError,
    FormatError,
    NotFoundError,
    RefusedDestinationError,
    ShardscopeError,
    exit_code_for,
    group_name,
)


def all_subclasses(cls: type) -> set[type]:
    out = set()
    for sub in cls.__subclasses__():
        out |= {sub} | all_subclasses(sub)
    return out


#: Roots of a domain's errors (every subclass also joins a group); never raised themselves.
DOMAIN_ROOTS = {"VersionError", "LabelmapError", "AnnotationError"}


def test_every_error_class_in_core_has_a_group() -> None:
    sources = []
    for info in pkgutil.walk_packages(core.__path__, core.__name__ + "."):
        module = importlib.import_module(info.name)
        if module.__file__ and module.__file__.endswith(".py"):
            sources.append(Path(module.__file__).read_text())
    for root in DOMAIN_ROOTS:
        assert not any(f"raise {root}(" in text for text in sources), f"{root} is raised without a group"
    groups = {group for group, _ in EXIT_CODES}
    for cls in {c for c in all_subclasses(ShardscopeError) - groups if c.__name__ not in DOMAIN_ROOTS}:
        exc = cls.__new__(cls)
        assert exit_code_for(exc) != EXIT_OTHER, f"{cls.__module__}.{cls.__qualname__} belongs to no group"


def test_the_more_specific_group_wins() -> None:
    class UnknownThing(NotFoundError, ArgumentError):
        pass

    assert exit_code_for(UnknownThing("x")) == 3 and group_name(UnknownThing("x")) == "not_found"
    assert exit_code_for(RefusedDestinationError("occupied")) == 6
    assert isinstance(RefusedDestinationError("occupied"), ArgumentError)
    assert exit_code_for(ValueError("bug")) == EXIT_INTERNAL and group_name(ValueError()) == "internal"


def test_format_errors_name_the_key_and_byte_and_survive_pickling() -> None:
    import pickle

    err = FormatError("bad index", key="s0/1.shard", offset=4096)
    assert str(err) == "s0/1.shard: bad index at byte 4096"
    again = pickle.loads(pickle.dumps(err))  # Dask sends errors between processes
    assert (type(again), again.key, again.offset, str(again)) == (FormatError, "s0/1.shard", 4096, str(err))
