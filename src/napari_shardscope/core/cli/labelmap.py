"""``shardscope labelmap ...`` and the proofreading verbs, on a repository from a shell.

Commands (REPO: repository directory; REF: branch name (its head) or UUID prefix; LABELMAP: the
labelmap instance, always after the version(s) it is read at)::

    shardscope labelmap create REPO LABELMAP BASE_URL [--agglomeration bodies.json|TABLE_URL]
                               [--agglomeration-reverse TABLE_URL] [--id-start N] [--block 64]
    shardscope labelmap info REPO REF LABELMAP               # (REPO LABELMAP: configuration only)
    shardscope labelmap index REPO LABELMAP [--overwrite]
    shardscope label REPO REF LABELMAP Z Y X [--scale KEY] [--xyz]
    shardscope body merge REPO REF LABELMAP TARGET OTHER...
    shardscope body cleave REPO REF LABELMAP BODY SV...
    shardscope body split REPO REF LABELMAP BODY SEEDS [--xyz]    # SEEDS: .json {"1": [[z,y,x], ...], "2": ...}
    shardscope body split-supervoxel REPO REF LABELMAP SV VOXELS [--xyz]   # VOXELS: .npy or .json, (N, 3) z y x
    shardscope body size|history REPO REF LABELMAP BODY
    shardscope undo|redo REPO REF LABELMAP
    shardscope diff REPO A B LABELMAP                         # edits and bodies only in A / only in B
    shardscope branch merge REPO OURS THEIRS LABELMAP [--resolve body:123=ours|theirs|both ...] [--policy ...]

One meaning per noun: ``body merge`` joins bodies, ``branch merge`` joins two branches' labelmap
edits (``repo merge`` joins versions key by key). The old spellings ``merge``, ``split-body``,
``merge-branches``, the top-level ``cleave``, ``size``, ``history``, ``split-supervoxel`` and
``index``, and ``labelmap info REPO LABELMAP REF`` still work and print a deprecation line on
stderr. Voxels are z, y, x as the reader indexes the base (from 0), or with ``--xyz``
Neuroglancer's x, y, z (absolute); ``--scale`` is a scale key, as for ``inspect``.

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

from napari_shardscope.core.cli.common import (
    neuroglancer_origin,
    parse_resolutions,
    print_json,
    progress_unless_quiet,
    read_argument_file,
    reader_voxel,
    reader_voxels,
)
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
from napari_shardscope.core.labelmap.config import TYPE_NAME
from napari_shardscope.core.labelmap.opening import index_meta
from napari_shardscope.core.proofreading.wording import describe_bounds, describe_branch_merge, plural
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


def _describe(m: Mutation, records: dict[int, Mutation] | None = None) -> str:
    """One edit in words, with who made it (``records``: earlier edits by id, for what an undo took back)."""
    from napari_shardscope.core.proofreading.wording import describe_undo, edit_phrase

    if m.operation in ("undo", "redo"):
        original = (records or {}).get(int(m.args.get("mutation", m.target or 0)))
        return f"{describe_undo(m, original)} (by {m.user})"
    return f"{edit_phrase(m)} (by {m.user})"


def _origin(v: LabelmapVersion, scale: int = 0) -> tuple[int, ...]:
    """Where the base's first voxel sits in Neuroglancer's absolute coordinates (z, y, x)."""
    g = v.scales[scale]
    return neuroglancer_origin(g.translate, g.voxel_size)


def _open(args: argparse.Namespace) -> tuple[Repository, Labelmap, LabelmapVersion]:
    repo = open_repository(args.path)
    try:
        lm = open_labelmap(repo, args.name)
        return repo, lm, lm.at(args.ref)
    except BaseException:
        repo.close()
        raise


def _voxel_array(value: Any, where: str) -> npt.NDArray[np.int64]:
    """``value`` as an (N, 3) int64 voxel list, or :class:`ArgumentError` naming ``where``.

    Nothing is reshaped or rounded: ``[[1, 2], [3, 4], [5, 6]]`` is not two voxels, and ``1.7`` is
    not voxel 1 (an edit at coordinates the user did not type is worse than no edit).
    """
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError) as exc:
        raise ArgumentError(f"{where}: not a voxel list ({exc})") from None
    if arr.size == 0:
        return np.zeros((0, 3), dtype=np.int64)
    if arr.ndim != 2 or arr.shape[1] != 3 or arr.dtype.kind not in "iu":
        raise ArgumentError(f"{where}: voxels must be an (N, 3) list of integers z, y, x "
                            f"(x, y, z with --xyz), got shape {arr.shape} of {arr.dtype}")
    if arr.dtype.kind == "u" and arr.size and int(arr.max()) > np.iinfo(np.int64).max:
        raise ArgumentError(f"{where}: voxel coordinate {int(arr.max())} is out of range")
    out: npt.NDArray[np.int64] = arr.astype(np.int64)
    return out


def _read_voxels(path: str) -> npt.NDArray[np.int64]:
    """An (N, 3) z, y, x voxel list from ``.npy`` or JSON."""
    data = read_argument_file(path, "voxels")
    try:
        if path.endswith(".npy"):
            value: Any = np.load(io.BytesIO(data), allow_pickle=False)
        else:
            value = load_json(data, key=path)
    except MetadataError as exc:
        raise ArgumentError(str(exc)) from exc
    except ValueError as exc:
        raise ArgumentError(f"{path}: not a voxel list ({exc})") from exc
    return _voxel_array(value, path)


def _read_seeds(path: str) -> dict[int, npt.NDArray[np.int64]]:
    """Seed groups from JSON: ``{"1": [[z, y, x], ...], "2": [...]}``."""
    data = read_argument_file(path, "seeds")
    try:
        doc = load_json_object(data, key=path)
    except MetadataError as exc:
        raise ArgumentError(str(exc)) from exc
    seeds: dict[int, npt.NDArray[np.int64]] = {}
    for g, vox in doc.items():
        try:
            group = int(g)
        except ValueError:
            raise ArgumentError(f"{path}: seed group {g!r} is not an integer") from None
        seeds[group] = _voxel_array(vox, f"{path} (seed group {g})")
    return seeds


# -- labelmap instance commands ---------------------------------------------------------------------


def cmd_create(args: argparse.Namespace) -> int:
    with open_repository(args.path) as repo:
        lm = create_labelmap(repo, args.name, args.base, agglomeration=args.agglomeration, id_start=args.id_start,
                             block=args.block, build_index=not args.no_index,
                             progress=progress_unless_quiet(args, "index base"),
                             agglomeration_reverse=args.agglomeration_reverse)
        info = _info(repo, lm)
    if args.json:
        print_json(info)
    else:
        print(f"created labelmap {args.name} over {lm.config.base}: {plural(len(lm.config.scales), 'scale')}, "
              f"new ids from {lm.config.id_start}")
    return EXIT_OK


def _info(repo: Repository, lm: Labelmap) -> dict[str, Any]:
    return {"name": lm.name, **lm.config.to_json(), "index": index_meta(repo, lm.name)}


def _info_arguments(repo: Repository, args: argparse.Namespace) -> tuple[str | None, str]:
    """``(ref, labelmap)`` of ``labelmap info REPO [REF] LABELMAP``; the old order ``REPO LABELMAP REF`` is still
    understood (when its second word names a labelmap and the first does not), after a deprecation line."""
    if len(args.words) > 2:
        raise ArgumentError(f"labelmap info takes REPO [REF] LABELMAP, got {len(args.words) + 1} arguments")
    first, second = args.words if len(args.words) == 2 else (None, args.words[0])
    if first is not None:
        names = {i.name for i in repo.instances() if i.type == TYPE_NAME}
        if second not in names and first in names:
            print(f"shardscope labelmap info: deprecated order, use 'shardscope labelmap info REPO {second} {first}' "
                  "(the version before the labelmap, as in every other verb)", file=sys.stderr)
            return second, first
    return first, second


def cmd_info(args: argparse.Namespace) -> int:
    with open_repository(args.path) as repo:
        args.ref, args.name = _info_arguments(repo, args)
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
            print(f"  version {vi['uuid'][:8]} ({vi['branch']}): {plural(vi['mutations'], 'edit')} in its history, "
                  f"{vi['own_mutations']} its own; undo {'yes' if vi['can_undo'] else 'no'}, "
                  f"redo {'yes' if vi['can_redo'] else 'no'}")
    return EXIT_OK


# -- reads ----------------------------------------------------------------------------------------------


def _scale_index(v: LabelmapVersion, key: str | None) -> int:
    """The index of scale ``key`` (``None``: the finest); an unknown key is a bad argument listing the keys."""
    keys = [s.key for s in v.scales]
    if key is None:
        return 0
    if key not in keys:
        raise ArgumentError(f"--scale takes a scale key; {key!r} is not one of {', '.join(keys)}")
    return keys.index(key)


def cmd_label(args: argparse.Namespace) -> int:
    repo, _, v = _open(args)
    with repo:
        scale = _scale_index(v, args.scale)
        typed = (args.z, args.y, args.x)
        z, y, x = reader_voxel(typed, xyz=args.xyz, origin=_origin(v, scale))
        voxel = (z, y, x)
        shape = v.scales[scale].shape
        if not all(0 <= c < n for c, n in zip(voxel, shape, strict=True)):
            raise ArgumentError(f"voxel {voxel} (z, y, x) is outside scale {v.scales[scale].key} (shape {shape})")
        sv = v.supervoxel_at(voxel, scale)
        body = v.body_of(sv)
    if args.json:
        print_json({"voxel": list(voxel), "scale": v.scales[scale].key, "supervoxel": sv, "body": body})
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
        print(f"body {args.body}: {plural(out['voxels'], 'voxel')}, {plural(len(svs), 'supervoxel')} in "
              f"{plural(out['blocks'], 'block')}, bounds {describe_bounds(box['lo'], box['hi'])} (scale 0)")
    return EXIT_OK


def cmd_history(args: argparse.Namespace) -> int:
    repo, _, v = _open(args)
    with repo:
        entries: list[HistoryEntry] = v.history(args.body)
        records = {e.mutation.mutation_id: e.mutation for e in v.mutations()}
    if args.json:
        print_json([mutation_json(e.mutation, e.version) for e in entries])
    else:
        for e in entries:
            print(f"{e.version[:8]}  {_describe(e.mutation, records)}")
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
    from napari_shardscope.core.proofreading.wording import describe_edit

    return _edit_output(args, v, m, {"body": args.target}, describe_edit(m))


def cmd_cleave(args: argparse.Namespace) -> int:
    repo, _, v = _open(args)
    with repo:
        new = v.cleave(args.body, args.supervoxels, user=args.user)
        m = v.mutations(own=True)[-1].mutation
    from napari_shardscope.core.proofreading.wording import describe_edit

    return _edit_output(args, v, m, {"body": args.body, "new_body": new}, describe_edit(m))


def cmd_split_supervoxel(args: argparse.Namespace) -> int:
    typed = _read_voxels(args.voxels)
    repo, _, v = _open(args)
    with repo:
        voxels = reader_voxels(typed, xyz=args.xyz, origin=_origin(v))
        split, remainder = v.split_supervoxel(args.supervoxel, voxels, user=args.user)
        m = v.mutations(own=True)[-1].mutation
    return _edit_output(args, v, m, {"supervoxel": args.supervoxel, "split": split, "remainder": remainder},
                        f"split supervoxel {args.supervoxel}: {len(voxels)} voxel{'s' if len(voxels) != 1 else ''} "
                        f"became {split}, the rest {remainder}")


def cmd_split_body(args: argparse.Namespace) -> int:
    typed = _read_seeds(args.seeds)
    repo, _, v = _open(args)
    with repo:
        seeds = {g: reader_voxels(pts, xyz=args.xyz, origin=_origin(v)) for g, pts in typed.items()}
        out = v.split_body(args.body, seeds, user=args.user)
        m = v.mutations(own=True)[-1].mutation
    extra = {"body": args.body, "bodies": {str(g): b for g, b in out.bodies.items()},
             "cut": {str(s): list(p) for s, p in out.cut.items()}}
    parts = ", ".join(f"seed {g} became body {b}" for g, b in out.bodies.items())
    return _edit_output(args, v, m, extra, f"split body {args.body}: {parts}")


def cmd_undo(args: argparse.Namespace) -> int:
    from napari_shardscope.core.proofreading.wording import describe_undo

    repo, _, v = _open(args)
    with repo:
        m = v.undo(user=args.user) if args.verb == "undo" else v.redo(user=args.user)
        records = {e.mutation.mutation_id: e.mutation for e in v.mutations()}
    original = records.get(int(m.args.get("mutation", m.target or 0)))
    return _edit_output(args, v, m, {}, describe_undo(m, original))


def cmd_diff(args: argparse.Namespace) -> int:
    from napari_shardscope.core.labelmap.diff import diff_versions

    repo = open_repository(args.path)
    with repo:
        d = diff_versions(open_labelmap(repo, args.name), args.a, args.b)
    if args.json:
        print_json(d.to_json())
        return EXIT_OK
    from napari_shardscope.core.proofreading.wording import describe_edits, describe_relation

    print(describe_relation(d.relation, d.a[:8], d.b[:8], d.base[:8]))
    records = {e.mutation.mutation_id: e.mutation for e in (*d.only_a, *d.only_b)}
    for side, entries, bodies in ((d.a[:8], d.only_a, d.bodies_a), (d.b[:8], d.only_b, d.bodies_b)):
        print(f"only in {side}: {describe_edits(len(entries), bodies)}")
        for e in entries:
            print(f"  {_describe(e.mutation, records)}")
    return EXIT_OK


def _show_unresolved(args: argparse.Namespace, exc: BranchMergeConflictError) -> None:
    """The conflicts a merge left unresolved, one line each on stdout (``--json`` lists them instead,
    through :func:`branch_merge_conflicts_json`); the error itself is then reported like any other."""
    if not args.json:
        from napari_shardscope.core.proofreading.wording import describe_conflicts

        words = {w.key: w for w in describe_conflicts(exc.plan)}
        for c in exc.unresolved:
            w = words[c.key]
            print(f"  unresolved {c.key}: mine: {w.mine}; theirs: {w.theirs}")


def bound_annotations(repo: Any, lm: Any) -> list[Any]:
    """The annotation instances of ``repo`` bound to labelmap ``lm`` (a branch merge merges them too)."""
    from napari_shardscope.core.annotation.instance import TYPE_NAME, annotation_config, open_annotation_instance

    return [open_annotation_instance(repo, i.name, labelmap=lm) for i in repo.instances()
            if i.type == TYPE_NAME and annotation_config(i)["labelmap"] == lm.name]


def branch_merge_conflicts_json(exc: ShardscopeError) -> dict[str, Any]:
    """With ``--json``, a merge refused for conflicts still prints its plan and the unresolved conflicts."""
    from napari_shardscope.core.annotation.branch_merge import AnnotationMergeConflictError
    from napari_shardscope.core.labelmap.branch_merge import BranchMergeConflictError

    if not isinstance(exc, BranchMergeConflictError | AnnotationMergeConflictError):
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

    resolutions = parse_resolutions(args.resolve)
    repo = open_repository(args.path)
    with repo:
        lm = open_labelmap(repo, args.name)
        if args.dry_run:
            plan = plan_branch_merge(lm, args.ours, args.theirs)
            if not args.json:
                from napari_shardscope.core.proofreading.wording import plural

                print(f"merge {plan.theirs[:8]} into {plan.ours[:8]} (common version {plan.base[:8]}): "
                      f"{plural(len(plan.ours_mutations), 'edit')} of mine, "
                      f"{plural(len(plan.theirs_mutations), 'edit')} of theirs, "
                      f"{plural(len(plan.conflicts), 'conflict')}")
                from napari_shardscope.core.proofreading.wording import describe_conflicts

                for w in describe_conflicts(plan):
                    print(f"  conflict {w.key}: mine: {w.mine}; theirs: {w.theirs}")
            try:
                outcome = resolve_branch_merge(lm, plan, resolutions=resolutions,
                                               policy=args.policy)
            except BranchMergeConflictError as exc:
                _show_unresolved(args, exc)
                raise
            if args.json:
                print_json({**plan.to_json(), "dry_run": True, **outcome.to_json()})
            else:
                print(f"would apply {plural(len(outcome.applied), 'edit')} of theirs, take back "
                      f"{plural(len(outcome.reverted), 'edit')} of mine, leave out {len(outcome.dropped)} of theirs "
                      f"(dry run: nothing written)")
            return EXIT_OK
        annotations = bound_annotations(repo, lm)
        try:
            if annotations:  # one merge version: the labelmap's edits and the annotations id by id
                from napari_shardscope.core.annotation.branch_merge import merge_with_labelmap

                combined = merge_with_labelmap(lm, annotations, args.ours, args.theirs, resolutions=resolutions,
                                               policy=args.policy, branch=args.branch, user=args.user)
                result = combined.labelmap
            else:
                result = merge_branches(lm, args.ours, args.theirs, resolutions=resolutions,
                                        policy=args.policy, branch=args.branch, user=args.user)
        except BranchMergeConflictError as exc:
            _show_unresolved(args, exc)
            raise
    if args.json:
        doc = result.to_json()
        if annotations:
            doc["annotations"] = {name: {"taken": list(r.taken), "kept": list(r.plan.keep),
                                         "resolutions": dict(r.resolutions)}
                                  for name, r in combined.annotations.items()}
        print_json(doc)
    else:
        for name, r in (combined.annotations.items() if annotations else ()):
            print(f"annotations {name}: {len(r.taken)} taken from {args.theirs}, {len(r.plan.keep)} kept, "
                  f"{len(r.resolutions)} conflict(s) resolved")
        print(describe_branch_merge(args.theirs, args.ours, len(result.applied), len(result.reverted),
                                    len(result.dropped), result.mutation.bodies, result.version.short))
    return EXIT_OK
