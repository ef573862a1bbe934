"""``shardscope labelmap ...`` and the proofreading verbs, on a repository from a shell.

Commands (REPO: repository directory; REF: branch name (its head) or UUID prefix; NAME: instance)::

    shardscope labelmap create REPO NAME BASE_URL [--agglomeration bodies.json] [--id-start N] [--block 64]
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

(``index`` / ``labelmap index``, a Dask job, lives in :mod:`.export`.) ``--json`` prints one JSON
document; ``--user`` names who edits (default ``$SHARDSCOPE_USER`` or the login). Errors exit with
the code of their group: an edit the mapping does not allow (supervoxel not in the body, empty
split) or a bad file is a bad argument, an unknown version, instance or label "not found", an edit
of a committed version or with nothing to undo a "refused write", labels edited on both branches
of a merge a "conflict".
"""

from __future__ import annotations

import argparse
import io
import sys
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.cli.common import REPOSITORY, print_json, read_argument_file
from napari_shardscope.core.cli.parser import Arg, Verb, VerbGroup, arg
from napari_shardscope.core.errors import EXIT_OK, ArgumentError, MetadataError, ShardscopeError
from napari_shardscope.core.json_document import load_json, load_json_object
from napari_shardscope.core.labelmap import (
    HistoryEntry,
    Labelmap,
    LabelmapVersion,
    Mutation,
    create_labelmap,
    open_labelmap,
)
from napari_shardscope.core.labelmap.opening import index_meta
from napari_shardscope.core.versioned import Repository, open_repository

if TYPE_CHECKING:
    from napari_shardscope.core.labelmap.branch_merge import BranchMergeConflictError


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
    data = read_argument_file(path, "voxels")
    try:
        if path.endswith(".npy"):
            arr = np.load(io.BytesIO(data), allow_pickle=False)
        else:
            arr = np.asarray(load_json(data, key=path), dtype=np.int64)
    except MetadataError as exc:
        raise ArgumentError(str(exc)) from exc
    except ValueError as exc:
        raise ArgumentError(f"{path}: not a voxel list ({exc})") from exc
    if arr.size == 0:
        return np.zeros((0, 3), dtype=np.int64)
    if arr.ndim != 2 or arr.shape[1] != 3 or arr.dtype.kind not in "iu":
        raise ArgumentError(f"{path}: voxels must be an (N, 3) integer list of z, y, x, got shape {arr.shape}")
    out: npt.NDArray[np.int64] = arr.astype(np.int64)
    return out


def _read_seeds(path: str) -> dict[int, npt.NDArray[np.int64]]:
    """Seed groups from JSON: ``{"1": [[z, y, x], ...], "2": [...]}``."""
    data = read_argument_file(path, "seeds")
    try:
        doc = load_json_object(data, key=path)
        return {int(g): np.asarray(vox, dtype=np.int64).reshape(-1, 3) for g, vox in doc.items()}
    except MetadataError as exc:
        raise ArgumentError(str(exc)) from exc
    except ValueError as exc:
        raise ArgumentError(f"{path}: not a seeds file ({exc})") from exc


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


def cmd_merge(args: argparse.Namespace) -> int:
    repo, _, v = _open(args)
    with repo:
        m = v.merge(args.target, args.others, user=args.user)
    return _edit_output(args, v, m, {"body": args.target},
                        f"merged {', '.join(map(str, args.others))} into body {args.target} (mutation {m.mutation_id})")


def cmd_cleave(args: argparse.Namespace) -> int:
    repo, _, v = _open(args)
    with repo:
        new = v.cleave(args.body, args.supervoxels, user=args.user)
        m = v.mutations(own=True)[-1].mutation
    return _edit_output(args, v, m, {"body": args.body, "new_body": new},
                        f"cleaved {len(args.supervoxels)} supervoxel(s) off body {args.body} into new body {new}")


def cmd_split_supervoxel(args: argparse.Namespace) -> int:
    voxels = _read_voxels(args.voxels)
    repo, _, v = _open(args)
    with repo:
        split, remainder = v.split_supervoxel(args.supervoxel, voxels, user=args.user)
        m = v.mutations(own=True)[-1].mutation
    return _edit_output(args, v, m, {"supervoxel": args.supervoxel, "split": split, "remainder": remainder},
                        f"split supervoxel {args.supervoxel}: {len(voxels)} voxel(s) -> {split}, rest -> {remainder}")


def cmd_split_body(args: argparse.Namespace) -> int:
    seeds = _read_seeds(args.seeds)
    repo, _, v = _open(args)
    with repo:
        out = v.split_body(args.body, seeds, user=args.user)
        m = v.mutations(own=True)[-1].mutation
    extra = {"body": args.body, "bodies": {str(g): b for g, b in out.bodies.items()},
             "cut": {str(s): list(p) for s, p in out.cut.items()}}
    parts = ", ".join(f"group {g} -> body {b}" for g, b in out.bodies.items())
    return _edit_output(args, v, m, extra, f"split body {args.body}: {parts}")


def cmd_undo(args: argparse.Namespace) -> int:
    repo, _, v = _open(args)
    with repo:
        m = v.undo(user=args.user) if args.verb == "undo" else v.redo(user=args.user)
    text = f"{args.verb} of mutation {m.args.get('mutation')} (mutation {m.mutation_id})"
    return _edit_output(args, v, m, {}, text)


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


def _show_unresolved(args: argparse.Namespace, exc: BranchMergeConflictError) -> None:
    """The conflicts a merge left unresolved, one line each on stdout (``--json`` lists them instead,
    through :func:`branch_merge_conflicts_json`); the error itself is then reported like any other."""
    if not args.json:
        for c in exc.unresolved:
            print(f"  unresolved {c.key}: ours mutations {list(c.ours)}, theirs {list(c.theirs)}")


def branch_merge_conflicts_json(exc: ShardscopeError) -> dict[str, Any]:
    """With ``--json``, a merge refused for conflicts still prints its plan and the unresolved conflicts."""
    from napari_shardscope.core.labelmap.branch_merge import BranchMergeConflictError

    if not isinstance(exc, BranchMergeConflictError):
        return {}
    return {**exc.plan.to_json(), "conflicts": [c.to_json() for c in exc.unresolved]}


def cmd_merge_branches(args: argparse.Namespace) -> int:
    """``shardscope merge-branches``; ``--dry-run`` checks the resolutions exactly as the merge would.

    The dry run calls the same :func:`resolve_branch_merge` the merge runs before writing, so it
    exits with the merge's code and message (7: conflicts left, 2: a resolution naming no
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
                _show_unresolved(args, exc)
                raise
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
            _show_unresolved(args, exc)
            raise
    if args.json:
        print_json(result.to_json())
    else:
        print(f"merge version {result.version.short} on branch {result.version.branch!r} (open; commit it): "
              f"{len(result.applied)} of their mutation(s) applied, {len(result.reverted)} of ours reverted, "
              f"{len(result.dropped)} dropped")
    return EXIT_OK


# -- verbs ----------------------------------------------------------------------------------------------
REF = arg("ref", help="version: branch name (its head) or UUID prefix")
NAME = arg("name", help="labelmap instance name")
USER = arg("--user", default=None, help="who edits (default $SHARDSCOPE_USER or the login name)")
#: Where a read or an edit happens: a labelmap instance at a version of a repository.
_AT: tuple[Arg, ...] = (REPOSITORY, REF, NAME)
_EDIT: tuple[Arg, ...] = (*_AT, USER)

VERBS = (
    VerbGroup("labelmap", "labelmap instances: supervoxel base + versioned edits",
              "Labelmap instances (DVID's labelmap): a base supervoxel volume that is never modified, and "
              "per-version edits in the repository.", (
        Verb("create", cmd_create, "create a labelmap over a base segmentation", (
            REPOSITORY,
            NAME,
            arg("base", help="base supervoxel volume (path or URL of precomputed, zarr v3 / v2 or N5)"),
            arg("--agglomeration", default=None, help="bodies JSON (supervoxel -> body), e.g. the sample's"),
            arg("--id-start", type=int, default=None, help="first new id (default: above every base id)"),
            arg("--block", type=int, default=64, help="overlay block edge in voxels (default 64)"),
            arg("--no-index", action="store_true", help="build the base label index on first need instead"),
        )),
        Verb("info", cmd_info, "configuration, index and (with REF) a version's edit counts", (
            REPOSITORY, NAME, arg("ref", nargs="?", default=None, help="version to describe"),
        )),
    )),
    Verb("label", cmd_label, "supervoxel and body at a voxel (z y x)", (
        *_AT,
        arg("z", type=int),
        arg("y", type=int),
        arg("x", type=int),
        arg("--scale", type=int, default=0, help="scale index (default 0)"),
    )),
    Verb("merge", cmd_merge, "merge bodies into a target body", (
        *_EDIT, arg("target", type=int), arg("others", type=int, nargs="+"),
    )),
    Verb("cleave", cmd_cleave, "move supervoxels of a body to a new body", (
        *_EDIT, arg("body", type=int), arg("supervoxels", type=int, nargs="+"),
    )),
    Verb("split-supervoxel", cmd_split_supervoxel, "split a supervoxel by a voxel list (.npy or .json, z y x)", (
        *_EDIT,
        arg("supervoxel", type=int),
        arg("voxels", help="file with an (N, 3) list of scale-0 voxels z, y, x"),
    )),
    Verb("split-body", cmd_split_body, "split a body by seed groups (JSON: group -> voxel list)", (
        *_EDIT, arg("body", type=int), arg("seeds", help='JSON file {"1": [[z, y, x], ...], "2": [...]}'),
    )),
    Verb("undo", cmd_undo, "undo the latest edit of an open version", _EDIT),
    Verb("redo", cmd_undo, "redo the latest edit of an open version", _EDIT),
    Verb("size", cmd_size, "voxel count, supervoxels and bounding box of a body", (
        *_AT,
        arg("body", type=int),
        arg("--coarse", action="store_true", help="block-granular bounding box (reads no voxels)"),
    )),
    Verb("diff", cmd_diff, "what changed between two versions: mutations and bodies on each side", (
        REPOSITORY,
        arg("a", help="first version (branch name or UUID prefix)"),
        arg("b", help="second version"),
        NAME,
    )),
    Verb("merge-branches", cmd_merge_branches,
         "3-way merge of two branch heads' labelmap edits (a new open merge version)", (
        REPOSITORY,
        arg("ours", help="our branch (its head) or version; must be committed"),
        arg("theirs", help="their branch or version; must be committed"),
        NAME,
        arg("--resolve", action="append", metavar="KIND:ID=SIDE",
            help="resolve one conflict: body:123=ours or supervoxel:45=theirs (repeatable)"),
        arg("--policy", choices=("fail", "ours", "theirs"), default="fail",
            help="side for conflicts not resolved one by one (default: fail, report them)"),
        arg("--branch", default=None, help="start a new branch for the merge version"),
        arg("--dry-run", action="store_true", help="only report the plan and conflicts"),
        arg("--user", default=None, help="who merges (default $SHARDSCOPE_USER or the login name)"),
    ), description="Merge the labelmap edits of committed version THEIRS into committed version OURS from their "
       "common ancestor. Edits of different bodies and supervoxels replay cleanly; a label edited on both sides "
       "is a conflict: exit 7 and a list (with the plan, as JSON with --json) until each is resolved with "
       "--resolve KIND:ID=ours|theirs or --policy. Nothing is written until then.",
       error_details=branch_merge_conflicts_json),
    Verb("history", cmd_history, "mutations that shaped a body, across the ancestry", (*_AT, arg("body", type=int))),
)
