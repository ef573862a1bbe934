"""``shardscope repo ...`` and ``shardscope kv ...``: the versioned store from a shell.

Every command takes the repository directory first and a version reference (a branch name, which
means its head, or any unique UUID prefix) where one is needed; ``--json`` prints one JSON
document. Errors exit with the code of their group (:func:`~napari_shardscope.core.errors.exit_code_for`):
an unknown version, branch, key or repository is "not found", a write to a committed version a
"refused write", a merge conflict or held lock a "conflict".
"""

from __future__ import annotations

import argparse
import base64
import importlib
import re
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from napari_shardscope.core.cli.common import (
    emit,
    print_json,
    print_json_line,
    progress_unless_quiet,
    read_argument_file,
)
from napari_shardscope.core.errors import EXIT_CHECK_FAILED, EXIT_OK, ArgumentError, NotFoundError, ShardscopeError
from napari_shardscope.core.versioned import (
    MergeConflictError,
    OpenParentError,
    Repository,
    Version,
    create_repository,
    open_keyvalue,
    open_repository,
)
from napari_shardscope.core.versioned.migrate import migrate_repository


def _describe(v: Version) -> str:
    state = "committed" if v.locked else "open"
    parents = ",".join(p[:8] for p in v.parents) or "-"
    msg = f"  {v.message}" if v.message else ""
    return f"{v.uuid}  {v.branch:<16} {state:<9} parents {parents}{msg}"


def _version_json(repo: Repository, v: Version, *, notes: bool = False) -> dict[str, Any]:
    out = v.to_json()
    if notes:
        out["notes"] = [{"seq": n.seq, "time": n.time, "text": n.text} for n in repo.notes(v)]
    return out


def _value_json(value: bytes) -> dict[str, Any]:
    try:
        return {"value": value.decode("utf-8"), "encoding": "utf-8", "size": len(value)}
    except UnicodeDecodeError:
        return {"value": base64.b64encode(value).decode(), "encoding": "base64", "size": len(value)}


# -- repo ---------------------------------------------------------------------------------------


def cmd_init(args: argparse.Namespace) -> int:
    with create_repository(args.path, engine=args.engine) as repo:
        if args.json:
            print_json({"path": str(repo.path), "engine": repo.engine, "root": _version_json(repo, repo.root)})
        else:
            print(f"created {repo.engine} repository {args.path}; root {repo.root.uuid} on branch main (open)")
    return EXIT_OK


_DATE = re.compile(r"\d{4}-\d{2}-\d{2}([T ].*)?")


def parse_since(repo: Repository, text: str) -> str | datetime:
    """``--since``: an ISO 8601 date or time (naive ones are local time), or a version reference."""
    if not _DATE.fullmatch(text):
        return text
    try:
        when = datetime.fromisoformat(text)
    except ValueError as exc:
        raise ArgumentError(f"--since {text!r}: not an ISO 8601 date or time ({exc})") from exc
    if repo.has_branch(text):
        raise ArgumentError(f"--since {text!r} is both a date and a branch name; give the branch's head by "
                            f"UUID prefix ({repo.head(text).short}) to mean the branch")
    return when


def cmd_log(args: argparse.Namespace) -> int:
    with open_repository(args.path) as repo:
        since = None if args.since is None else parse_since(repo, args.since)
        if args.all:
            if args.first_parent or isinstance(since, str):
                raise ArgumentError("--all lists every version by creation; it takes --limit and --since DATE only")
            versions = repo.newest(args.limit, since=since)
        else:
            versions = repo.log(args.ref, limit=args.limit, since=since, first_parent=args.first_parent)
        for v in versions:
            if args.json:  # JSON Lines: one version per line, flushed, so a reader gets each as it is read
                print_json_line(_version_json(repo, v, notes=True))
                continue
            emit(_describe(v))
            for n in repo.notes(v):
                emit(f"    note {n.seq}: {n.text}")
    return EXIT_OK


def cmd_branches(args: argparse.Namespace) -> int:
    with open_repository(args.path) as repo:
        branches = repo.branches()
        if args.json:
            print_json([{"name": b.name, "base": b.base, "head": b.head, "length": b.length,
                         "head_locked": repo.version(b.head).locked} for b in branches])
        else:
            for b in branches:
                head = repo.version(b.head)
                print(f"{b.name:<20} head {b.head}  {'committed' if head.locked else 'open':<9} {b.length} version(s)")
    return EXIT_OK


def cmd_commit(args: argparse.Namespace) -> int:
    with open_repository(args.path) as repo:
        v = repo.commit(args.ref, args.message)
        if args.json:
            print_json(_version_json(repo, v))
        else:
            print(f"committed {v.uuid} on branch {v.branch}")
    return EXIT_OK


def cmd_branch(args: argparse.Namespace) -> int:
    with open_repository(args.path) as repo:
        try:
            v = repo.new_version(args.parent, args.name)
        except OpenParentError as exc:  # say which committed version to branch from, as a command to run
            head = repo.version(exc.version)
            name = f" {args.name}" if args.name else ""
            commit = f"shardscope repo commit {args.path} {head.short} -m MESSAGE"
            instead = (f", or branch from its committed parent: shardscope repo branch {args.path} "
                       f"{exc.committed_parent[:8]}{name}") if exc.committed_parent else ""
            raise OpenParentError(f"version {head.short} (head of branch {head.branch!r}) is open: commit it first "
                                  f"({commit}){instead}", version=exc.version,
                                  committed_parent=exc.committed_parent) from None
        if args.json:
            print_json(_version_json(repo, v))
        else:
            print(f"new open version {v.uuid} on branch {v.branch} (parent {v.parents[0][:8]})")
    return EXIT_OK


def cmd_checkout(args: argparse.Namespace) -> int:
    with open_repository(args.path) as repo:
        co = repo.checkout(args.ref, write=args.write)
        v = co.version
        if args.json:
            out = _version_json(repo, v, notes=True)
            out["writable"] = not v.locked
            out["instances"] = [{"name": i.name, "type": i.type} for i in repo.instances()]
            print_json(out)
        else:
            print(_describe(v))
            print(f"{'writable' if not v.locked else 'read-only'}; instances: "
                  f"{', '.join(i.name for i in repo.instances()) or 'none'}")
    return EXIT_OK


def cmd_merge(args: argparse.Namespace) -> int:
    with open_repository(args.path) as repo:
        result = repo.merge(args.ours, args.theirs, policy=args.policy, branch=args.branch)
        if args.json:
            print_json({"version": _version_json(repo, result.version), "base": result.base,
                        "merged": result.merged,
                        "conflicts": [{"instance": c.instance, "key": c.key.decode("utf-8", "backslashreplace")}
                                      for c in result.conflicts]})
        else:
            print(f"merge version {result.version.uuid} on branch {result.version.branch} (open): "
                  f"{result.merged} key(s) merged, {len(result.conflicts)} conflict(s) resolved {args.policy}")
    return EXIT_OK


def cmd_note(args: argparse.Namespace) -> int:
    with open_repository(args.path) as repo:
        note = repo.add_note(args.ref, args.text)
        if args.json:
            print_json({"version": note.version, "seq": note.seq, "time": note.time, "text": note.text})
        else:
            print(f"note {note.seq} added to {note.version}")
    return EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:
    with open_repository(args.path) as repo:
        problems = repo.verify()
        hollow, objects = repo.not_local()  # a lazy clone: data on the remote until read (not a problem)
        local = _cached_objects(repo.path, objects)
        not_local = {"versions": hollow, "objects": {r: len(o) for r, o in objects.items()},
                     "objects_local": {r: local[r] for r in objects}}
        if args.json:
            print_json({"ok": not problems, "problems": problems, "versions": repo.version_count(),
                        "not_local": not_local})
        else:
            for p in problems:
                print(p)
            for remote, names in sorted(objects.items()):
                print(f"lazy clone: {hollow} version(s) keep their data on {remote} until read: "
                      f"{local[remote]} of {len(names)} data object(s) local")
            print("ok" if not problems else f"{len(problems)} problem(s)")
    return EXIT_OK if not problems else EXIT_CHECK_FAILED


def _cached_objects(path: Path | None, objects: dict[str, set[str]]) -> dict[str, int]:
    """Per remote, how many of a lazy clone's data objects have a local copy (downloaded on a first read)."""
    from napari_shardscope.core.versioned.remotes.objects import cache_path

    return {r: sum(1 for n in names if path is not None and cache_path(Path(path), n).is_file())
            for r, names in objects.items()}


#: Modules of the data types that register a ``repo migrate`` step when imported (the repository
#: format's own step is registered by :mod:`~napari_shardscope.core.versioned.migrate`).
MIGRATING_TYPES: tuple[str, ...] = ("napari_shardscope.core.labelmap.migrate",
                                    "napari_shardscope.core.annotation.instance")


def cmd_migrate(args: argparse.Namespace) -> int:
    """One verb for every migration: the repository format (opening upgrades it), then each data type's step."""
    for module in MIGRATING_TYPES:
        importlib.import_module(module)
    with open_repository(args.path) as repo:  # opening upgrades the repository format itself
        report = migrate_repository(repo, progress=progress_unless_quiet(args, "migrate"))
    if args.json:
        print_json(report.to_json())
    else:
        for step in report.steps:
            emit(f"{step.name}: {step.done or 'up to date'}")
        for p in report.problems:
            emit(p)
        emit("ok" if not report.problems else f"{len(report.problems)} problem(s)")
    return EXIT_OK if not report.problems else EXIT_CHECK_FAILED


# -- kv -----------------------------------------------------------------------------------------


def cmd_kv_get(args: argparse.Namespace) -> int:
    with open_repository(args.path) as repo:
        value = open_keyvalue(repo, args.instance).get(args.ref, args.key)
    if value is None:
        raise NotFoundError(f"no key {args.key!r} in {args.instance} at {args.ref}")
    if args.json:
        print_json({"key": args.key, "found": True, **_value_json(value)})
    elif args.out:
        Path(args.out).write_bytes(value)
    else:
        sys.stdout.flush()
        sys.stdout.buffer.write(value)
        sys.stdout.buffer.flush()
    return EXIT_OK


def cmd_kv_put(args: argparse.Namespace) -> int:
    if (args.value is None) == (args.file is None):
        raise ArgumentError("give exactly one of VALUE or --file")
    value = args.value.encode("utf-8") if args.value is not None else read_argument_file(args.file, "--file")
    with open_repository(args.path) as repo:
        v = repo.version(args.ref)
        kv = open_keyvalue(repo, args.instance, create=True, write_at=v)
        kv.put(v, args.key, value)
    if args.json:
        print_json({"key": args.key, "version": v.uuid, "instance": args.instance, "size": len(value)})
    else:
        print(f"stored {len(value)} bytes under {args.key!r} in {args.instance} at {v.uuid[:8]}")
    return EXIT_OK


def cmd_kv_delete(args: argparse.Namespace) -> int:
    with open_repository(args.path) as repo:
        existed = open_keyvalue(repo, args.instance).delete(args.ref, args.key)
    if args.json:
        print_json({"key": args.key, "deleted": existed})
    else:
        print(f"deleted {args.key!r}" if existed else f"{args.key!r} had no value")
    return EXIT_OK


def cmd_kv_ls(args: argparse.Namespace) -> int:
    with open_repository(args.path) as repo:
        kv = open_keyvalue(repo, args.instance)
        if args.json:
            print_json([{"key": k, **_value_json(v)} for k, v in kv.items(args.ref, args.prefix)])
        else:
            for key in kv.keys(args.ref, args.prefix):
                print(key)
    return EXIT_OK


# -- verbs --------------------------------------------------------------------------------------


def merge_conflicts_json(exc: ShardscopeError) -> dict[str, Any]:
    """With ``--json``, a merge refused for conflicts still lists them (to choose a ``--policy``)."""
    if not isinstance(exc, MergeConflictError):
        return {}
    return {"conflicts": [{"instance": c.instance, "key": c.key.decode("utf-8", "backslashreplace")}
                          for c in exc.conflicts]}
