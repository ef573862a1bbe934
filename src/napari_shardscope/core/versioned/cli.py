"""``shardscope repo ...`` and ``shardscope kv ...``: the versioned store from a shell.

Every command takes the repository directory first and a version reference (a branch name, which
means its head, or any unique UUID prefix) where one is needed; ``--json`` prints one JSON
document. Exit codes follow the package convention: 0 ok, 1 the operation was refused (committed
version, merge conflict, lock timeout, damaged store, missing key), 2 bad input (unknown
version/branch/instance, a path that is not a repository).
"""

from __future__ import annotations

import argparse
import base64
import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from napari_shardscope.core.cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE, print_json
from napari_shardscope.core.versioned.dag import Version
from napari_shardscope.core.versioned.errors import (
    AmbiguousVersionError,
    UnknownBranchError,
    UnknownVersionError,
)
from napari_shardscope.core.versioned.keyvalue import decode_key, open_keyvalue
from napari_shardscope.core.versioned.merge import MERGE_POLICIES
from napari_shardscope.core.versioned.repository import Repository, create_repository, open_repository

Handler = Callable[[argparse.Namespace], int]


def _bad_refs_are_usage_errors(func: Handler) -> Handler:
    """A version or branch that does not exist is bad input (exit 2), not a failed operation."""

    @functools.wraps(func)
    def wrapper(args: argparse.Namespace) -> int:
        try:
            return func(args)
        except (UnknownVersionError, AmbiguousVersionError, UnknownBranchError) as exc:
            print(f"shardscope {args.command}: {exc}", file=sys.stderr)
            return EXIT_USAGE

    return wrapper


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


@_bad_refs_are_usage_errors
def cmd_log(args: argparse.Namespace) -> int:
    with open_repository(args.path) as repo:
        versions = repo.versions()[::-1] if args.all else repo.ancestry(args.ref)
        if args.json:
            print_json([_version_json(repo, v, notes=True) for v in versions])
        else:
            for v in versions:
                print(_describe(v))
                for n in repo.notes(v):
                    print(f"    note {n.seq}: {n.text}")
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


@_bad_refs_are_usage_errors
def cmd_commit(args: argparse.Namespace) -> int:
    with open_repository(args.path) as repo:
        v = repo.commit(args.ref, args.message)
        if args.json:
            print_json(_version_json(repo, v))
        else:
            print(f"committed {v.uuid} on branch {v.branch}")
    return EXIT_OK


@_bad_refs_are_usage_errors
def cmd_branch(args: argparse.Namespace) -> int:
    with open_repository(args.path) as repo:
        v = repo.new_version(args.parent, args.name)
        if args.json:
            print_json(_version_json(repo, v))
        else:
            print(f"new open version {v.uuid} on branch {v.branch} (parent {v.parents[0][:8]})")
    return EXIT_OK


@_bad_refs_are_usage_errors
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


@_bad_refs_are_usage_errors
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


@_bad_refs_are_usage_errors
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
        if args.json:
            print_json({"ok": not problems, "problems": problems, "versions": len(repo.versions())})
        else:
            for p in problems:
                print(p)
            print("ok" if not problems else f"{len(problems)} problem(s)")
    return EXIT_OK if not problems else EXIT_FAILED


# -- kv -----------------------------------------------------------------------------------------


@_bad_refs_are_usage_errors
def cmd_kv_get(args: argparse.Namespace) -> int:
    with open_repository(args.path) as repo:
        value = open_keyvalue(repo, args.instance).get(args.ref, args.key)
    if value is None:
        if args.json:
            print_json({"key": args.key, "found": False})
        print(f"shardscope kv: no key {args.key!r} in {args.instance} at {args.ref}", file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        print_json({"key": args.key, "found": True, **_value_json(value)})
    elif args.out:
        Path(args.out).write_bytes(value)
    else:
        sys.stdout.flush()
        sys.stdout.buffer.write(value)
        sys.stdout.buffer.flush()
    return EXIT_OK


@_bad_refs_are_usage_errors
def cmd_kv_put(args: argparse.Namespace) -> int:
    if (args.value is None) == (args.file is None):
        print("shardscope kv: give exactly one of VALUE or --file", file=sys.stderr)
        return EXIT_USAGE
    value = args.value.encode("utf-8") if args.value is not None else Path(args.file).read_bytes()
    with open_repository(args.path) as repo:
        kv = open_keyvalue(repo, args.instance, create=True)
        v = repo.version(args.ref)
        kv.put(v, args.key, value)
    if args.json:
        print_json({"key": args.key, "version": v.uuid, "instance": args.instance, "size": len(value)})
    else:
        print(f"stored {len(value)} bytes under {args.key!r} in {args.instance} at {v.uuid[:8]}")
    return EXIT_OK


@_bad_refs_are_usage_errors
def cmd_kv_delete(args: argparse.Namespace) -> int:
    with open_repository(args.path) as repo:
        existed = open_keyvalue(repo, args.instance).delete(args.ref, args.key)
    if args.json:
        print_json({"key": args.key, "deleted": existed})
    else:
        print(f"deleted {args.key!r}" if existed else f"{args.key!r} had no value")
    return EXIT_OK


@_bad_refs_are_usage_errors
def cmd_kv_ls(args: argparse.Namespace) -> int:
    with open_repository(args.path) as repo:
        kv = open_keyvalue(repo, args.instance)
        if args.json:
            print_json([{"key": k, **_value_json(v)} for k, v in kv.items(args.ref, args.prefix)])
        else:
            with repo.read(args.ref) as view:
                for raw in view.keys(kv.instance, prefix=args.prefix.encode("utf-8")):
                    print(decode_key(raw))
    return EXIT_OK


# -- registration -------------------------------------------------------------------------------


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", help="repository directory")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def register(subparsers: Any) -> None:
    """Add the ``repo`` and ``kv`` command groups."""
    repo = subparsers.add_parser("repo", help="versioned repositories: versions, branches, merges",
                                 description="Versioned repositories (DVID's model). REF is a branch "
                                             "name (its head) or a unique UUID prefix.")
    rsub = repo.add_subparsers(dest="repo_command", metavar="ACTION")
    rsub.required = True

    p = rsub.add_parser("init", help="create a repository (root version open on main)")
    _common(p)
    p.add_argument("--engine", choices=("lmdb", "sqlite"), default="lmdb", help="storage engine (default lmdb)")
    p.set_defaults(func=cmd_init)

    p = rsub.add_parser("log", help="ancestry of a version, newest first")
    _common(p)
    p.add_argument("ref", nargs="?", default="main", help="version (default: head of main)")
    p.add_argument("--all", action="store_true", help="every version, newest first")
    p.set_defaults(func=cmd_log)

    p = rsub.add_parser("branches", help="branches and their heads")
    _common(p)
    p.set_defaults(func=cmd_branches)

    p = rsub.add_parser("commit", help="commit (lock) an open version")
    _common(p)
    p.add_argument("ref")
    p.add_argument("-m", "--message", required=True)
    p.set_defaults(func=cmd_commit)

    p = rsub.add_parser("branch", help="new open child of a committed version")
    _common(p)
    p.add_argument("parent", help="committed parent version")
    p.add_argument("name", nargs="?", default=None, help="new branch name (default: continue the parent's)")
    p.set_defaults(func=cmd_branch)

    p = rsub.add_parser("checkout", help="show a version as it would be opened (--write: must be open)")
    _common(p)
    p.add_argument("ref")
    p.add_argument("--write", action="store_true", help="fail unless the version accepts writes")
    p.set_defaults(func=cmd_checkout)

    p = rsub.add_parser("merge", help="new open version with two committed parents")
    _common(p)
    p.add_argument("ours")
    p.add_argument("theirs")
    p.add_argument("--policy", choices=MERGE_POLICIES, default="fail", help="conflict policy (default fail)")
    p.add_argument("--branch", default=None, help="new branch for the merge (default: continue ours)")
    p.set_defaults(func=cmd_merge)

    p = rsub.add_parser("note", help="append a note to a version's log")
    _common(p)
    p.add_argument("ref")
    p.add_argument("text")
    p.set_defaults(func=cmd_note)

    p = rsub.add_parser("verify", help="check the whole store (exit 1 on problems)")
    _common(p)
    p.set_defaults(func=cmd_verify)

    kv = subparsers.add_parser("kv", help="keyvalue instances of a repository",
                               description="String keys to bytes at any version of a repository.")
    ksub = kv.add_subparsers(dest="kv_command", metavar="ACTION")
    ksub.required = True

    p = ksub.add_parser("get", help="print a value (raw bytes; exit 1 when absent)")
    _common(p)
    p.add_argument("ref")
    p.add_argument("instance")
    p.add_argument("key")
    p.add_argument("--out", help="write the value to this file")
    p.set_defaults(func=cmd_kv_get)

    p = ksub.add_parser("put", help="store a value at an open version (creates the instance)")
    _common(p)
    p.add_argument("ref")
    p.add_argument("instance")
    p.add_argument("key")
    p.add_argument("value", nargs="?", default=None, help="UTF-8 text value")
    p.add_argument("--file", help="read the value from this file")
    p.set_defaults(func=cmd_kv_put)

    p = ksub.add_parser("delete", help="delete a key at an open version")
    _common(p)
    p.add_argument("ref")
    p.add_argument("instance")
    p.add_argument("key")
    p.set_defaults(func=cmd_kv_delete)

    p = ksub.add_parser("ls", help="list keys at a version")
    _common(p)
    p.add_argument("ref")
    p.add_argument("instance")
    p.add_argument("--prefix", default="")
    p.set_defaults(func=cmd_kv_ls)
