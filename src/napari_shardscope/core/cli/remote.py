"""``shardscope remote|clone|fetch|push|pull|status|ids``: share versions through a bucket or a directory.

Git's words: a *remote* is a URL (``s3://``, ``gs://``, a directory or ``file://``; ``http(s)://`` for
clone and fetch only) holding immutable objects and one refs object changed by compare-and-swap.
``push`` sends committed versions only and refuses a non-fast-forward ("fetch and merge first")
unless ``--force-with-lease``; ``pull`` fast-forwards or commits a 3-way merge version (the
labelmap's branch merge when the repository holds a labelmap). Progress (bytes and objects) goes
to stderr; ``--json`` prints the outcome. Interrupted transfers resume: objects already sent or
received are skipped.

The labelmap is imported by the verbs that use it (``clone``: its ids and, with ``--prefetch``, its base;
``pull``: its merge; ``review``), not with this module: ``status``, ``push``, ``fetch``, ``ids`` and ``remote``
work on any instance type without loading it (a fetch adopts instances whose type is not imported).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from napari_shardscope.core.cli.common import parse_resolutions, print_json
from napari_shardscope.core.errors import EXIT_CHECK_FAILED, EXIT_OK, ArgumentError
from napari_shardscope.core.versioned import open_repository
from napari_shardscope.core.versioned import remotes as S
from napari_shardscope.core.versioned.remotes import config as C
from napari_shardscope.core.versioned.remotes.store import Transfer
from napari_shardscope.core.versioned.remotes.verify import remote_versions, verify_remote


class TransferProgress:
    """Bytes and objects moved, on stderr: a rewritten line on a terminal, a line every few seconds otherwise."""

    def __init__(self, label: str, quiet: bool) -> None:
        self.label = label
        self.quiet = quiet
        self.tty = sys.stderr.isatty()
        self.last = 0.0

    def __call__(self, t: Transfer, what: str) -> None:
        now = time.monotonic()
        if self.quiet or now - self.last < (0.1 if self.tty else 5.0):
            return
        self.last = now
        moved = _sent(t) if self.label == "push" else _received(t)
        text = f"{self.label}: {moved}; {what}"
        sys.stderr.write(("\r" + text + "\x1b[K") if self.tty else text + "\n")
        sys.stderr.flush()

    def done(self) -> None:
        if self.tty and not self.quiet and self.last:
            sys.stderr.write("\n")


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"


def _sent(t: Transfer) -> str:
    """What a push moved, in a push's words (the bytes include the refs it wrote)."""
    return f"{t.objects_sent} object(s) sent ({_size(t.bytes_sent)}), {t.objects_skipped} already on the remote"


def _received(t: Transfer) -> str:
    """What a fetch, pull or clone moved (the bytes include the refs it read)."""
    return f"{t.objects_received} object(s) received ({_size(t.bytes_received)})"


def _print_renames(remote: str, migrated: dict[str, str], why: str) -> None:
    for old, new in sorted(migrated.items()):
        print(f"  renamed local branch {old} to {new}: {why}; {remote}/<branch> names the remote's branch")


# -- remote add|list|remove -------------------------------------------------------------------------


def cmd_remote_add(args: argparse.Namespace) -> int:
    with open_repository(args.path) as repo:
        migrated = C.add_remote(repo, args.name, args.url, anonymous=args.anonymous)
    if args.json:
        print_json({"remote": args.name, "url": args.url, "migrated": migrated})
    else:
        print(f"added remote {args.name} -> {args.url}")
        _print_renames(args.name, migrated, f"names starting with {args.name}/ are now remote-tracking names")
    return EXIT_OK


def cmd_remote_list(args: argparse.Namespace) -> int:
    with open_repository(args.path) as repo:
        remotes = C.list_remotes(repo)
        ids = repo.id_source()
    if args.json:
        print_json({"remotes": remotes, "ids_from": ids})
    else:
        for name, url in remotes.items():
            print(f"{name}\t{url}{'  (ids reserved here)' if name == ids else ''}")
    return EXIT_OK


def cmd_remote_remove(args: argparse.Namespace) -> int:
    with open_repository(args.path) as repo:
        C.remove_remote(repo, args.name)
    if args.json:
        print_json({"removed": args.name})
    else:
        print(f"removed remote {args.name}")
    return EXIT_OK


def cmd_remote_check(args: argparse.Namespace) -> int:
    problems = verify_remote(args.url)
    versions = len(remote_versions(args.url)) if not problems else None
    if args.json:
        print_json({"url": args.url, "problems": problems, "versions": versions})
    elif problems:
        for p in problems:
            print(p)
    else:
        print(f"{args.url}: {versions} version(s), every object the refs reach is present and verified")
    return EXIT_CHECK_FAILED if problems else EXIT_OK


# -- clone, fetch, push, pull, status -------------------------------------------------------------


def cmd_clone(args: argparse.Namespace) -> int:
    # imported before the clone: it registers the labelmap's prefetcher (a --prefetch clone copies each base)
    from napari_shardscope.core.labelmap.remote import reserve_labelmap_ids

    progress = TransferProgress("clone", args.json)
    instances = [n for part in args.instances or [] for n in part.split(",") if n] or None
    path, result = S.clone(args.url, args.dest, branch=args.branch, engine=args.engine, region=args.region,
                           instances=instances, anonymous=args.anonymous, progress=progress,
                           prefetch=args.prefetch)  # with --prefetch, also each labelmap's base (registered hook)
    progress.done()
    with open_repository(path) as repo:
        branches = [b.name for b in repo.branches()]
        reserve_labelmap_ids(repo)  # now, while online: a laptop can edit offline straight away
        left = S.remaining_ids(repo)
    prefetched = list(result.prefetched)
    if args.json:
        print_json({"path": str(path), "branches": branches, "ids_left": left, "lazy": not args.prefetch,
                    **result.to_json(), **({"prefetched": [p.to_json() for p in prefetched]} if args.prefetch else {})})
    else:
        print(f"cloned {args.url} into {path}: {len(result.adopted) + 1} version(s), branches {', '.join(branches)}; "
              f"{_received(result.transfer)}")
        if not args.prefetch:
            print("  lazy: version data is downloaded when first read (clone with --prefetch to work offline)")
        for p in prefetched:
            print(f"prefetched {p.labelmap}'s base: {p.objects} object(s), {p.bytes} bytes into {p.path}")
    return EXIT_OK


def cmd_fetch(args: argparse.Namespace) -> int:
    progress = TransferProgress("fetch", args.json)
    with open_repository(args.path) as repo:
        result = S.fetch(repo, args.remote, args.branch or None, progress=progress)
    progress.done()
    if args.json:
        print_json(result.to_json())
    else:
        _print_fetch(args.remote, result)
    return EXIT_OK


def _print_fetch(remote: str, result: S.FetchResult) -> None:
    print(f"fetched {len(result.adopted)} version(s) from {remote}; {_received(result.transfer)}")
    _print_renames(remote, result.migrated, "an older fetch had named it so")
    for branch, node in sorted(result.tracking.items()):
        print(f"  {remote}/{branch} -> {node[:8]}")
    for uuid, name in result.renamed.items():
        print(f"  {uuid[:8]} diverges from the local branch: adopted on {name} "
              f"(review {remote}/<branch>, pull to merge it)")


def cmd_push(args: argparse.Namespace) -> int:
    progress = TransferProgress("push", args.json)
    with open_repository(args.path) as repo:
        result = S.push(repo, args.remote, args.branch, force_with_lease=args.force_with_lease, progress=progress)
    progress.done()
    if args.json:
        print_json(result.to_json())
    elif result.up_to_date:
        print(f"{args.remote}/{args.branch} is up to date at {result.head[:8]}")
    else:
        before = result.previous[:8] if result.previous else "(new branch)"
        print(f"{args.remote}/{args.branch}: {before} -> {result.head[:8]}{' (forced)' if result.forced else ''}; "
              f"{len(result.sent)} version(s), {_sent(result.transfer)}")
    return EXIT_OK


def cmd_pull(args: argparse.Namespace) -> int:
    from napari_shardscope.core.annotation.remote import pull_merger  # annotations merge id by id

    progress = TransferProgress("pull", args.json)
    resolutions = parse_resolutions(args.resolve)
    with open_repository(args.path) as repo:
        result = S.pull(repo, args.remote, args.branch, progress=progress,
                        merge=pull_merger(args.policy, resolutions, args.user))
    progress.done()
    if args.json:
        print_json(result.to_json())
    else:
        _print_renames(args.remote, result.fetch.migrated, "an older fetch had named it so")
        print(f"{args.branch}: {result.kind} at {result.head[:8]} ({len(result.fetch.adopted)} version(s) fetched; "
              f"{_received(result.fetch.transfer)})")
    return EXIT_OK


def pull_conflicts_json(exc: Exception) -> dict[str, Any]:
    from napari_shardscope.core.annotation.branch_merge import AnnotationMergeConflictError
    from napari_shardscope.core.labelmap.branch_merge import BranchMergeConflictError

    if isinstance(exc, BranchMergeConflictError | AnnotationMergeConflictError):
        return {**exc.plan.to_json(), "conflicts": [c.to_json() for c in exc.unresolved]}
    return {}


def cmd_status(args: argparse.Namespace) -> int:
    with open_repository(args.path) as repo:
        rows = S.status(repo, args.remote)
    if args.json:
        print_json({"remote": args.remote, "branches": [r.to_json() for r in rows]})
    else:
        for r in rows:
            local = r.local[:8] if r.local else "-"
            remote = r.remote[:8] if r.remote else "-"
            extra = ", open version" if r.open else ""
            if r.remote is None:
                print(f"{r.branch:<20} local {local}  not on {args.remote} (as last fetched): "
                      f"{r.ahead} committed version(s) to push{extra}")
            else:
                print(f"{r.branch:<20} local {local}  {args.remote}/{r.branch} {remote}  "
                      f"ahead {r.ahead}, behind {r.behind}{extra}")
    return EXIT_OK


def cmd_ids(args: argparse.Namespace) -> int:
    with open_repository(args.path) as repo:
        if args.reserve:
            S.reserve_ids(repo, args.reserve, args.count)
        left = S.remaining_ids(repo)
        source = repo.id_source()
    if args.json:
        print_json({"ids_from": source, "left": left})
    elif source is None:
        print("this repository hands out its own ids (not a clone of a writable remote)")
    else:
        for counter, n in sorted(left.items()):
            print(f"{counter}: {n} reserved id(s) left (from {source})")
    return EXIT_OK


def cmd_review(args: argparse.Namespace) -> int:
    from napari_shardscope.core.labelmap import open_labelmap
    from napari_shardscope.core.labelmap.config import TYPE_NAME
    from napari_shardscope.core.labelmap.review import review_branch

    with open_repository(args.path) as repo:
        name = args.name
        if name is None:
            names = [i.name for i in repo.instances() if i.type == TYPE_NAME]
            if len(names) != 1:
                raise ArgumentError(f"name the labelmap with --labelmap (this repository has {len(names)}: "
                                    f"{', '.join(names) or 'none'})")
            name = names[0]
        review = review_branch(open_labelmap(repo, name), args.branch, args.target)
    if args.json:
        print_json(review.to_json())
    else:
        print(review.to_text())
    return EXIT_OK
