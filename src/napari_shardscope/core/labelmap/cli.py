"""``shardscope labelmap ...`` and the proofreading commands, on a repository from a shell.

Commands (REPO: repository directory; REF: branch name (its head) or UUID prefix; NAME: instance)::

    shardscope labelmap create REPO NAME BASE_URL [--agglomeration bodies.json] [--id-start N] [--block 64]
    shardscope index REPO NAME [--scheduler ADDR] [--workers N] [--force]   # base label index on Dask
    shardscope labelmap info REPO NAME [REF]
    shardscope label REPO REF NAME Z Y X [--scale S]
    shardscope merge REPO REF NAME TARGET OTHER...
    shardscope cleave REPO REF NAME BODY SV...
    shardscope split-supervoxel REPO REF NAME SV VOXELS      # VOXELS: .npy or .json, (N, 3) z y x
    shardscope split-body REPO REF NAME BODY SEEDS           # SEEDS: .json {"1": [[z,y,x], ...], "2": ...}
    shardscope undo|redo REPO REF NAME
    shardscope size REPO REF NAME BODY
    shardscope history REPO REF NAME BODY
    shardscope diff REPO A B NAME                             # mutations and bodies only in A / only in B
    shardscope merge-branches REPO OURS THEIRS NAME [--resolve body:123=ours ...] [--policy fail|ours|theirs]

``--json`` prints one JSON document; ``--user`` names who edits (default ``$SHARDSCOPE_USER`` or the
login). Exit codes: 0 ok; 1 the edit was refused (committed version, supervoxel not in the body,
empty split, nothing to undo); 2 bad input (unknown version, instance, body or supervoxel; bad file).
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE, print_json
from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.inspect_cli import parse_positive_int
from napari_shardscope.core.labelmap.errors import UnknownLabelError
from napari_shardscope.core.labelmap.labelmap import Labelmap
from napari_shardscope.core.labelmap.mutations import Mutation
from napari_shardscope.core.labelmap.opening import create_labelmap, index_meta, open_labelmap
from napari_shardscope.core.labelmap.version import HistoryEntry, LabelmapVersion
from napari_shardscope.core.versioned.errors import (
    AmbiguousVersionError,
    UnknownBranchError,
    UnknownInstanceError,
    UnknownVersionError,
)
from napari_shardscope.core.versioned.repository import Repository, open_repository

if TYPE_CHECKING:
    from napari_shardscope.core.labelmap.branch_merge import BranchMergeConflictError

Handler = Callable[[argparse.Namespace], int]


def _bad_input_is_usage(func: Handler) -> Handler:
    """Unknown versions, instances and labels are bad input (exit 2), not refused edits."""

    @functools.wraps(func)
    def wrapper(args: argparse.Namespace) -> int:
        try:
            return func(args)
        except (UnknownVersionError, AmbiguousVersionError, UnknownBranchError, UnknownInstanceError,
                UnknownLabelError) as exc:
            print(f"shardscope {args.command}: {exc}", file=sys.stderr)
            return EXIT_USAGE

    return wrapper


def mutation_json(m: Mutation, version: str | None = None) -> dict[str, Any]:
    """A mutation record as JSON (what ``--json`` prints for edits and history)."""
    out: dict[str, Any] = {"id": m.mutation_id, "operation": m.operation, "args": m.args, "user": m.user,
                           "time": m.time, "bodies": list(m.bodies), "supervoxels": list(m.supervoxels),
                           "blocks": [[b.scale, *b.block] for b in m.blocks], "target": m.target}
    if version is not None:
        out["version"] = version
    return out


def _describe(m: Mutation) -> str:
    target = f" of {m.args.get('mutation')}" if m.operation in ("undo", "redo") else ""
    bodies = ",".join(str(b) for b in m.bodies)
    return f"mutation {m.mutation_id}: {m.operation}{target} bodies {bodies or '-'} by {m.user}"


def _open(args: argparse.Namespace) -> tuple[Repository, Labelmap, LabelmapVersion]:
    repo = open_repository(args.path)
    try:
        lm = open_labelmap(repo, args.name)
        return repo, lm, lm.at(args.ref)
    except BaseException:
        repo.close()
        raise


def _read_voxels(path: str) -> npt.NDArray[np.int64]:
    """An (N, 3) z, y, x voxel list from ``.npy`` or JSON."""
    p = Path(path)
    try:
        if p.suffix == ".npy":
            arr = np.load(p, allow_pickle=False)
        else:
            arr = np.asarray(json.loads(p.read_text()), dtype=np.int64)
    except (OSError, ValueError) as exc:
        raise ArgumentError(f"{path}: not a voxel list ({exc})") from exc
    if arr.size == 0:
        return np.zeros((0, 3), dtype=np.int64)
    if arr.ndim != 2 or arr.shape[1] != 3 or arr.dtype.kind not in "iu":
        raise ArgumentError(f"{path}: voxels must be an (N, 3) integer list of z, y, x, got shape {arr.shape}")
    out: npt.NDArray[np.int64] = arr.astype(np.int64)
    return out


# -- labelmap instance commands ---------------------------------------------------------------------


def cmd_create(args: argparse.Namespace) -> int:
    def progress(done: int, total: int) -> None:
        if not args.json and sys.stderr.isatty():
            print(f"\rindexing base: {done}/{total} blocks", end="" if done < total else "\n", file=sys.stderr)

    with open_repository(args.path) as repo:
        lm = create_labelmap(repo, args.name, args.base, agglomeration=args.agglomeration, id_start=args.id_start,
                             block=args.block, build_index=not args.no_index, progress=progress)
        info = _info(repo, lm)
    if args.json:
        print_json(info)
    else:
        print(f"created labelmap {args.name} over {lm.config.base}: {len(lm.config.scales)} scale(s), "
              f"new ids from {lm.config.id_start}")
    return EXIT_OK


def _info(repo: Repository, lm: Labelmap) -> dict[str, Any]:
    return {"name": lm.name, **lm.config.to_json(), "index": index_meta(repo, lm.name)}


@_bad_input_is_usage
def cmd_index(args: argparse.Namespace) -> int:
    """``shardscope index`` (and ``labelmap index``): the base label index as a Dask job."""
    from napari_shardscope.core.inspect_cli import StderrProgress
    from napari_shardscope.core.labelmap.index_job import build_label_index

    with open_repository(args.path) as repo:
        if index_meta(repo, args.name) is not None and not args.force:
            meta = index_meta(repo, args.name)
            built = False
        else:
            progress = None if args.quiet else StderrProgress("index")
            build_label_index(repo, args.name, scheduler=args.scheduler, num_workers=args.workers,
                              progress=progress, overwrite=args.force)
            meta = index_meta(repo, args.name)
            built = True
    assert meta is not None
    if args.json:
        print_json({**meta, "built": built})
    else:
        state = "built" if built else "already built (--force rebuilds it)"
        print(f"base index of {args.name} {state}: {meta['supervoxels']} supervoxels, {meta['voxels']} voxels, "
              f"largest id {meta['max_id']}")
    return EXIT_OK


def _index_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scheduler", metavar="ADDR",
                   help="'threads' (default), 'sync' or a dask.distributed scheduler address like tcp://host:8786")
    p.add_argument("--workers", type=parse_positive_int, metavar="N", help="threads for the threaded scheduler")
    p.add_argument("--force", action="store_true", help="rebuild an index that is already stored")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")


@_bad_input_is_usage
def cmd_info(args: argparse.Namespace) -> int:
    with open_repository(args.path) as repo:
        lm = open_labelmap(repo, args.name)
        info = _info(repo, lm)
        if args.ref is not None:
            v = lm.at(args.ref)
            own = v.mutations(own=True)
            info["version"] = {**v.version.to_json(), "mutations": len(v.mutations()), "own_mutations": len(own),
                               "can_undo": v.can_undo, "can_redo": v.can_redo}
    if args.json:
        print_json(info)
    else:
        print(f"labelmap {info['name']}: base {info['base']}, block {info['block']}, new ids from {info['id_start']}")
        for s in info["scales"]:
            print(f"  scale {s['key']}: shape {s['shape']} factors {s['factors']}")
        if "version" in info:
            vi = info["version"]
            print(f"  version {vi['uuid'][:8]} ({vi['branch']}): {vi['mutations']} mutation(s), "
                  f"{vi['own_mutations']} own; undo {'yes' if vi['can_undo'] else 'no'}, "
                  f"redo {'yes' if vi['can_redo'] else 'no'}")
    return EXIT_OK


# -- reads ----------------------------------------------------------------------------------------------


@_bad_input_is_usage
def cmd_label(args: argparse.Namespace) -> int:
    repo, _, v = _open(args)
    with repo:
        voxel = (args.z, args.y, args.x)
        shape = v.scales[args.scale].shape if 0 <= args.scale < len(v.scales) else None
        if shape is None or not all(0 <= c < n for c, n in zip(voxel, shape, strict=True)):
            raise ArgumentError(f"voxel {voxel} is outside scale {args.scale} (shape {shape})")
        sv = v.supervoxel_at(voxel, args.scale)
        body = v.body_of(sv)
    if args.json:
        print_json({"voxel": list(voxel), "scale": args.scale, "supervoxel": sv, "body": body})
    else:
        print(f"supervoxel {sv} body {body}")
    return EXIT_OK


@_bad_input_is_usage
def cmd_size(args: argparse.Namespace) -> int:
    repo, _, v = _open(args)
    with repo:
        svs = v.supervoxels(args.body)
        out = {"body": args.body, "voxels": v.size(args.body), "supervoxels": svs,
               "bbox": v.bbox(args.body, exact=not args.coarse).to_json(),
               "blocks": int(v.sparsevol(args.body).blocks.shape[0])}
    if args.json:
        print_json(out)
    else:
        box = out["bbox"]
        print(f"body {args.body}: {out['voxels']} voxels, {len(svs)} supervoxel(s), {out['blocks']} block(s), "
              f"bbox z,y,x {box['lo']}..{box['hi']}")
    return EXIT_OK


@_bad_input_is_usage
def cmd_history(args: argparse.Namespace) -> int:
    repo, _, v = _open(args)
    with repo:
        entries: list[HistoryEntry] = v.history(args.body)
    if args.json:
        print_json([mutation_json(e.mutation, e.version) for e in entries])
    else:
        for e in entries:
            print(f"{e.version[:8]}  {_describe(e.mutation)}")
    return EXIT_OK


# -- edits ----------------------------------------------------------------------------------------------


def _edit_output(args: argparse.Namespace, v: LabelmapVersion, m: Mutation, extra: dict[str, Any], text: str) -> int:
    if args.json:
        print_json({**extra, "mutation": mutation_json(m, v.uuid)})
    else:
        print(text)
    return EXIT_OK


@_bad_input_is_usage
def cmd_merge(args: argparse.Namespace) -> int:
    repo, _, v = _open(args)
    with repo:
        m = v.merge(args.target, args.others, user=args.user)
    return _edit_output(args, v, m, {"body": args.target},
                        f"merged {', '.join(map(str, args.others))} into body {args.target} (mutation {m.mutation_id})")


@_bad_input_is_usage
def cmd_cleave(args: argparse.Namespace) -> int:
    repo, _, v = _open(args)
    with repo:
        new = v.cleave(args.body, args.supervoxels, user=args.user)
        m = v.mutations(own=True)[-1].mutation
    return _edit_output(args, v, m, {"body": args.body, "new_body": new},
                        f"cleaved {len(args.supervoxels)} supervoxel(s) off body {args.body} into new body {new}")


@_bad_input_is_usage
def cmd_split_supervoxel(args: argparse.Namespace) -> int:
    voxels = _read_voxels(args.voxels)
    repo, _, v = _open(args)
    with repo:
        split, remainder = v.split_supervoxel(args.supervoxel, voxels, user=args.user)
        m = v.mutations(own=True)[-1].mutation
    return _edit_output(args, v, m, {"supervoxel": args.supervoxel, "split": split, "remainder": remainder},
                        f"split supervoxel {args.supervoxel}: {len(voxels)} voxel(s) -> {split}, rest -> {remainder}")


@_bad_input_is_usage
def cmd_split_body(args: argparse.Namespace) -> int:
    try:
        doc = json.loads(Path(args.seeds).read_text())
        if not isinstance(doc, dict):
            raise ValueError("expected an object of group -> voxel list")
        seeds = {int(g): np.asarray(vox, dtype=np.int64).reshape(-1, 3) for g, vox in doc.items()}
    except (OSError, ValueError) as exc:
        raise ArgumentError(f"{args.seeds}: not a seeds file ({exc})") from exc
    repo, _, v = _open(args)
    with repo:
        out = v.split_body(args.body, seeds, user=args.user)
        m = v.mutations(own=True)[-1].mutation
    extra = {"body": args.body, "bodies": {str(g): b for g, b in out.bodies.items()},
             "cut": {str(s): list(p) for s, p in out.cut.items()}}
    parts = ", ".join(f"group {g} -> body {b}" for g, b in out.bodies.items())
    return _edit_output(args, v, m, extra, f"split body {args.body}: {parts}")


@_bad_input_is_usage
def cmd_undo(args: argparse.Namespace) -> int:
    repo, _, v = _open(args)
    with repo:
        m = v.undo(user=args.user) if args.command == "undo" else v.redo(user=args.user)
    text = f"{args.command} of mutation {m.args.get('mutation')} (mutation {m.mutation_id})"
    return _edit_output(args, v, m, {}, text)


@_bad_input_is_usage
def cmd_diff(args: argparse.Namespace) -> int:
    from napari_shardscope.core.labelmap.diff import diff_versions

    repo = open_repository(args.path)
    with repo:
        d = diff_versions(open_labelmap(repo, args.name), args.a, args.b)
    if args.json:
        print_json(d.to_json())
        return EXIT_OK
    print(f"{d.a[:8]} vs {d.b[:8]}: {d.relation} (base {d.base[:8]})")
    for side, entries, bodies in ((d.a[:8], d.only_a, d.bodies_a), (d.b[:8], d.only_b, d.bodies_b)):
        print(f"only in {side}: {len(entries)} mutation(s), bodies {', '.join(map(str, bodies)) or '-'}")
        for e in entries:
            print(f"  {_describe(e.mutation)}")
    return EXIT_OK


def _parse_resolutions(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, side = item.partition("=")
        if not sep or side not in ("ours", "theirs") or not key.startswith(("body:", "supervoxel:")):
            raise ArgumentError(f"--resolve takes KIND:ID=ours|theirs (e.g. body:123=ours), got {item!r}")
        out[key] = side
    return out


def _report_conflict(args: argparse.Namespace, exc: BranchMergeConflictError) -> int:
    """The conflicts a merge left unresolved: JSON on stdout with ``--json``, else lines on stderr; exit 1."""
    if args.json:
        out = exc.plan.to_json()
        out["error"] = str(exc)
        out["conflicts"] = [c.to_json() for c in exc.unresolved]
        print_json(out)
    else:
        print(f"shardscope {args.command}: {exc}", file=sys.stderr)
        for c in exc.unresolved:
            print(f"  {c.key}: ours mutations {list(c.ours)}, theirs {list(c.theirs)}", file=sys.stderr)
    return EXIT_FAILED


@_bad_input_is_usage
def cmd_merge_branches(args: argparse.Namespace) -> int:
    """``shardscope merge-branches``; ``--dry-run`` checks the resolutions exactly as the merge would.

    The dry run calls the same :func:`resolve_branch_merge` the merge runs before writing, so it
    exits with the merge's code and message (1: conflicts left, 2: a resolution naming no
    conflict) and only the write is skipped: a script can trust a dry run that exits 0.
    """
    from napari_shardscope.core.labelmap.branch_merge import (
        BranchMergeConflictError,
        merge_branches,
        plan_branch_merge,
        resolve_branch_merge,
    )

    resolutions = _parse_resolutions(args.resolve or [])
    repo = open_repository(args.path)
    with repo:
        lm = open_labelmap(repo, args.name)
        if args.dry_run:
            plan = plan_branch_merge(lm, args.ours, args.theirs)
            if not args.json:
                print(f"merge {plan.theirs[:8]} into {plan.ours[:8]} (base {plan.base[:8]}): "
                      f"{len(plan.ours_mutations)} / {len(plan.theirs_mutations)} mutation(s), "
                      f"{len(plan.conflicts)} conflict(s)")
                for c in plan.conflicts:
                    print(f"  conflict {c.key}: ours {list(c.ours)}, theirs {list(c.theirs)}")
            try:
                outcome = resolve_branch_merge(lm, plan, resolutions=resolutions,  # type: ignore[arg-type]
                                               policy=args.policy)
            except BranchMergeConflictError as exc:
                return _report_conflict(args, exc)
            if args.json:
                print_json({**plan.to_json(), "dry_run": True, **outcome.to_json()})
            else:
                print(f"would apply {len(outcome.applied)} of their mutation(s), revert {len(outcome.reverted)} "
                      f"of ours, drop {len(outcome.dropped)} (dry run: nothing written)")
            return EXIT_OK
        try:
            result = merge_branches(lm, args.ours, args.theirs, resolutions=resolutions,  # type: ignore[arg-type]
                                    policy=args.policy, branch=args.branch, user=args.user)
        except BranchMergeConflictError as exc:
            return _report_conflict(args, exc)
    if args.json:
        print_json(result.to_json())
    else:
        print(f"merge version {result.version.short} on branch {result.version.branch!r} (open; commit it): "
              f"{len(result.applied)} of their mutation(s) applied, {len(result.reverted)} of ours reverted, "
              f"{len(result.dropped)} dropped")
    return EXIT_OK


# -- registration ------------------------------------------------------------------------------------


def _common(p: argparse.ArgumentParser, *, ref: bool = True) -> None:
    p.add_argument("path", help="repository directory")
    if ref:
        p.add_argument("ref", help="version: branch name (its head) or UUID prefix")
    p.add_argument("name", help="labelmap instance name")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _edit_common(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("--user", default=None, help="who edits (default $SHARDSCOPE_USER or the login name)")


def register(subparsers: Any) -> None:
    """Add ``labelmap`` (create/index/info) and the proofreading commands."""
    lm = subparsers.add_parser("labelmap", help="labelmap instances: supervoxel base + versioned edits",
                               description="Labelmap instances (DVID's labelmap): a base supervoxel volume that is "
                                           "never modified, and per-version edits in the repository.")
    lsub = lm.add_subparsers(dest="labelmap_command", metavar="ACTION")
    lsub.required = True
    p = lsub.add_parser("create", help="create a labelmap over a base segmentation")
    _common(p, ref=False)
    p.add_argument("base", help="base supervoxel volume (path or URL of precomputed, zarr v3 or N5)")
    p.add_argument("--agglomeration", default=None, help="bodies JSON (supervoxel -> body), e.g. the sample's")
    p.add_argument("--id-start", type=int, default=None, help="first new id (default: above every base id)")
    p.add_argument("--block", type=int, default=64, help="overlay block edge in voxels (default 64)")
    p.add_argument("--no-index", action="store_true", help="build the base label index on first need instead")
    p.set_defaults(func=cmd_create)
    p = lsub.add_parser("index", help="build the base label index now (one pass over scale 0, on Dask)")
    _common(p, ref=False)
    _index_options(p)
    p.set_defaults(func=cmd_index)
    p = subparsers.add_parser(
        "index", help="build a labelmap's base label index as a Dask job (threads or a distributed cluster)",
        description="Count every scale-0 block of the labelmap's base segmentation as a Dask job (one task per run "
                    "of blocks; the threaded scheduler unless --scheduler names a dask.distributed scheduler) and "
                    "store the label index in the repository in one transaction.")
    _common(p, ref=False)
    _index_options(p)
    p.set_defaults(func=cmd_index)
    p = lsub.add_parser("info", help="configuration, index and (with REF) a version's edit counts")
    _common(p, ref=False)
    p.add_argument("ref", nargs="?", default=None, help="version to describe")
    p.set_defaults(func=cmd_info)

    p = subparsers.add_parser("label", help="supervoxel and body at a voxel (z y x)")
    _common(p)
    p.add_argument("z", type=int)
    p.add_argument("y", type=int)
    p.add_argument("x", type=int)
    p.add_argument("--scale", type=int, default=0, help="scale index (default 0)")
    p.set_defaults(func=cmd_label)

    p = subparsers.add_parser("merge", help="merge bodies into a target body")
    _edit_common(p)
    p.add_argument("target", type=int)
    p.add_argument("others", type=int, nargs="+")
    p.set_defaults(func=cmd_merge)

    p = subparsers.add_parser("cleave", help="move supervoxels of a body to a new body")
    _edit_common(p)
    p.add_argument("body", type=int)
    p.add_argument("supervoxels", type=int, nargs="+")
    p.set_defaults(func=cmd_cleave)

    p = subparsers.add_parser("split-supervoxel", help="split a supervoxel by a voxel list (.npy or .json, z y x)")
    _edit_common(p)
    p.add_argument("supervoxel", type=int)
    p.add_argument("voxels", help="file with an (N, 3) list of scale-0 voxels z, y, x")
    p.set_defaults(func=cmd_split_supervoxel)

    p = subparsers.add_parser("split-body", help="split a body by seed groups (JSON: group -> voxel list)")
    _edit_common(p)
    p.add_argument("body", type=int)
    p.add_argument("seeds", help='JSON file {"1": [[z, y, x], ...], "2": [...]}')
    p.set_defaults(func=cmd_split_body)

    for action in ("undo", "redo"):
        p = subparsers.add_parser(action, help=f"{action} the latest edit of an open version")
        _edit_common(p)
        p.set_defaults(func=cmd_undo)

    p = subparsers.add_parser("size", help="voxel count, supervoxels and bounding box of a body")
    _common(p)
    p.add_argument("body", type=int)
    p.add_argument("--coarse", action="store_true", help="block-granular bounding box (reads no voxels)")
    p.set_defaults(func=cmd_size)

    p = subparsers.add_parser("diff", help="what changed between two versions: mutations and bodies on each side")
    p.add_argument("path", help="repository directory")
    p.add_argument("a", help="first version (branch name or UUID prefix)")
    p.add_argument("b", help="second version")
    p.add_argument("name", help="labelmap instance name")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_diff)

    p = subparsers.add_parser(
        "merge-branches", help="3-way merge of two branch heads' labelmap edits (a new open merge version)",
        description="Merge the labelmap edits of committed version THEIRS into committed version OURS from their "
                    "common ancestor. Edits of different bodies and supervoxels replay cleanly; a label edited on "
                    "both sides is a conflict: exit 1 and a list (JSON with --json) until each is resolved with "
                    "--resolve KIND:ID=ours|theirs or --policy. Nothing is written until then.")
    p.add_argument("path", help="repository directory")
    p.add_argument("ours", help="our branch (its head) or version; must be committed")
    p.add_argument("theirs", help="their branch or version; must be committed")
    p.add_argument("name", help="labelmap instance name")
    p.add_argument("--resolve", action="append", metavar="KIND:ID=SIDE",
                   help="resolve one conflict: body:123=ours or supervoxel:45=theirs (repeatable)")
    p.add_argument("--policy", choices=("fail", "ours", "theirs"), default="fail",
                   help="side for conflicts not resolved one by one (default: fail, report them)")
    p.add_argument("--branch", default=None, help="start a new branch for the merge version")
    p.add_argument("--dry-run", action="store_true", help="only report the plan and conflicts")
    p.add_argument("--user", default=None, help="who merges (default $SHARDSCOPE_USER or the login name)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_merge_branches)

    p = subparsers.add_parser("history", help="mutations that shaped a body, across the ancestry")
    _common(p)
    p.add_argument("body", type=int)
    p.set_defaults(func=cmd_history)
