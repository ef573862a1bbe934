"""Every core verb of ``shardscope``: its name, help, arguments and the function that runs it.

Declarations only: this module is imported to build the parser (``shardscope --help``, ``--version``,
any usage error) and imports nothing but :mod:`.parser` and :mod:`.common`, which need only the
standard library. Each verb names its function with :func:`~.parser.lazy`, so the verb's module (and
what it imports: numpy, TensorStore, the formats, the versioned store) loads only when that verb runs;
``tests/core/cli/test_startup_imports.py`` fails if a help text or usage error imports any of them.

A default that the library defines (a merge policy, the id block size, the default remote) is
spelt here as a literal so that ``--help`` can show it without importing the library;
``test_startup_imports.py`` checks each one against the library's constant.

One section per implementation module, in ``shardscope --help`` order: :mod:`.inspect` (inspect,
locate, ls, validate), :mod:`.repo` (repo, kv), :mod:`.export` (export-meshes, export, index),
:mod:`.labelmap` (labelmap and the proofreading verbs), :mod:`.serve`, :mod:`.remote` (remote, clone,
fetch, push, pull, status, review, ids).
"""

from __future__ import annotations

from napari_shardscope.core.cli.common import (
    COORDS_HELP,
    LABELMAP,
    LABELMAP_HELP,
    QUIET,
    REF,
    REPOSITORY,
    RESOLVE,
    SCHEDULER,
    WORKERS,
    XYZ,
    parse_coords,
    parse_floats,
    parse_positive_int,
    parse_shape,
    parse_size,
    parse_uint64,
)
from napari_shardscope.core.cli.parser import Arg, OneOf, Verb, VerbGroup, arg, deprecated, deprecated_option, lazy

#: Library constants shown by ``--help``, as literals (checked against the library by the tests).
MERGE_POLICIES = ("fail", "ours", "theirs")  # core.versioned.merge.MERGE_POLICIES
DEFAULT_REMOTE = "origin"  # core.versioned.remotes.config.DEFAULT_REMOTE
ID_BLOCK = 100_000  # core.versioned.remotes.id_blocks.ID_BLOCK
DEFAULT_GZIP_LEVEL = 9  # core.encoding.DEFAULT_GZIP_LEVEL


# -- inspect ---------------------------------------------------------------------------------------------
_INSPECT = "napari_shardscope.core.cli.inspect"
RECORD_HELP = ("records give positions in the format's own order (precomputed and N5 x,y,z, absolute; zarr in "
               "its shape order) and voxel_zyx in the reader's")
#: The dataset and scale every inspection verb starts from.
_DATASET: tuple[Arg, ...] = (
    arg("path", help="dataset path or URL (local, file://, http(s)://, gs://, s3://)"),
    arg("--scale", metavar="KEY",
        help="scale key / array path (default: all for inspect and validate, the finest otherwise)"),
)

INSPECT_VERBS = (
    Verb("inspect", lazy(_INSPECT, "cmd_inspect"), "summarise shards, minishards, chunks and bytes", _DATASET,
         description="Summarise the sharded layout, reading only index bytes (the JSON reports bytes_read)."),
    Verb("locate", lazy(_INSPECT, "cmd_locate"), "where one chunk is stored", (
        *_DATASET,
        OneOf((
            arg("--voxel", type=parse_coords, metavar="Z,Y,X", help="a voxel (" + COORDS_HELP + ")"),
            arg("--chunk-id", type=parse_uint64, metavar="ID",
                help="a precomputed chunk id (compressed Morton code of the grid position)"),
            arg("--segment", type=parse_uint64, metavar="ID",
                help="a segment id: its mesh, skeleton or annotations (precomputed)"),
            arg("--annotation", type=parse_uint64, metavar="ID",
                help="an annotation id: where by_id stores it (precomputed annotations)"),
            arg("--cell", type=parse_coords, metavar="I,J,K",
                help="a spatial index cell of the level --scale names (default: the finest; precomputed "
                     "annotations)"),
            arg("--point", type=parse_floats, metavar="X,Y,Z",
                help="a position in the annotations' coordinates: the cell holding it at every spatial level "
                     "(or the --scale one)"),
        ), required=True),
        XYZ,
    ), description="Where the chunk holding a voxel (or a chunk id / segment id; of annotations, an annotation "
       "id, a spatial cell or the cells holding a point) is stored: "
       "shard file, minishard and byte range [start, end). " + COORDS_HELP + "; " + RECORD_HELP + ".",
       epilog=COORDS_HELP),
    Verb("ls", lazy(_INSPECT, "cmd_ls"), "list stored chunks with their byte ranges", (
        *_DATASET,
        arg("--shard", type=int, metavar="N", help="only this shard"),
        arg("--minishard", type=int, metavar="M", help="only this minishard (needs --shard)"),
    ), description="One record per stored chunk. With --json, JSON Lines (one object a line)."),
    Verb("validate", lazy(_INSPECT, "cmd_validate"), "check every shard's indexes and data", (*_DATASET, QUIET),
         description="Check index ranges (inside the file, no overlaps), minishard indexes, "
         "sorted unique ids that hash to the shard and minishard holding them, decodable data, "
         "crc32c (zarr v3). Exit 0 clean, 1 with one line per problem; errors exit with the "
         "code of their group (see the README)."),
)


# -- repo ------------------------------------------------------------------------------------------------
_REPO = "napari_shardscope.core.cli.repo"
_KV_KEY = (REPOSITORY, REF, arg("instance", help="keyvalue instance name"), arg("key"))

REPO_VERBS = (
    VerbGroup("repo", "versioned repositories: versions, branches, merges",
              "Versioned repositories (DVID's model). REF is a branch name (its head) or a unique UUID prefix.", (
        Verb("init", lazy(_REPO, "cmd_init"), "create a repository (root version open on main)", (
            REPOSITORY,
            arg("--engine", choices=("lmdb", "sqlite"), default="lmdb", help="storage engine (default lmdb)"),
        )),
        Verb("log", lazy(_REPO, "cmd_log"), "a version and its ancestors, newest first (--json: one line each)", (
            REPOSITORY,
            arg("ref", nargs="?", default="main", help="version (default: head of main)"),
            arg("-n", "--limit", type=parse_positive_int, metavar="N",
                help="at most N versions (reads only those, whatever the history)"),
            arg("--since", metavar="DATE|REF",
                help="stop at the first version created before DATE (ISO 8601, e.g. 2025-01-31 or "
                     "2025-01-31T14:00; naive times are local), or leave out REF and its ancestors (REF..ref)"),
            arg("--first-parent", action="store_true",
                help="follow only first parents (the branch each merge was made on)"),
            arg("--all", action="store_true", help="every version by creation, newest first"),
        )),
        Verb("branches", lazy(_REPO, "cmd_branches"), "branches and their heads", (REPOSITORY,)),
        Verb("commit", lazy(_REPO, "cmd_commit"), "commit (lock) an open version", (
            REPOSITORY, REF, arg("-m", "--message", required=True),
        )),
        Verb("branch", lazy(_REPO, "cmd_branch"), "new open child of a committed version", (
            REPOSITORY,
            arg("parent", help="committed parent version"),
            arg("name", nargs="?", default=None, help="new branch name (default: continue the parent's)"),
        )),
        Verb("checkout", lazy(_REPO, "cmd_checkout"), "show a version as it would be opened (--write: must be open)", (
            REPOSITORY, REF, arg("--write", action="store_true", help="fail unless the version accepts writes"),
        )),
        Verb("merge", lazy(_REPO, "cmd_merge"), "new open version with two committed parents", (
            REPOSITORY,
            arg("ours"),
            arg("theirs"),
            arg("--policy", choices=MERGE_POLICIES, default="fail", help="conflict policy (default fail)"),
            arg("--branch", default=None, help="new branch for the merge (default: continue ours)"),
        ), error_details=lazy(_REPO, "merge_conflicts_json")),
        Verb("note", lazy(_REPO, "cmd_note"), "append a note to a version's log", (REPOSITORY, REF, arg("text"))),
        Verb("verify", lazy(_REPO, "cmd_verify"), "check the whole store (exit 1 on problems)", (REPOSITORY,)),
        Verb("migrate", lazy(_REPO, "cmd_migrate"),
             "bring a repository made by an older version up to date, then verify it (exit 1 on problems)",
             (REPOSITORY, QUIET),
             description="Upgrades the repository format (opening a repository does that too) and then runs "
                         "every data type's own migration, in one command; each step says what it did or "
                         "'up to date', and the whole store is verified at the end. Running it again does "
                         "nothing."),
    )),
    VerbGroup("kv", "keyvalue instances of a repository",
              "String keys to bytes at any version of a repository.", (
        Verb("get", lazy(_REPO, "cmd_kv_get"), "print a value (raw bytes; exit 3 when absent)", (
            *_KV_KEY, arg("--out", help="write the value to this file"),
        )),
        Verb("put", lazy(_REPO, "cmd_kv_put"), "store a value at an open version (creates the instance)", (
            *_KV_KEY,
            arg("value", nargs="?", default=None, help="UTF-8 text value"),
            arg("--file", help="read the value from this file"),
        )),
        Verb("delete", lazy(_REPO, "cmd_kv_delete"), "delete a key at an open version", _KV_KEY),
        Verb("ls", lazy(_REPO, "cmd_kv_ls"), "list keys at a version", (*_KV_KEY[:3], arg("--prefix", default=""))),
    )),
)


# -- export ----------------------------------------------------------------------------------------------
_EXPORT = "napari_shardscope.core.cli.export"
EXPORT_VERBS = (
    Verb("export-meshes", lazy(_EXPORT, "cmd_export_meshes"),
         "write a version's changed bodies as sharded multilod Draco meshes", (
        REPOSITORY,
        arg("dest", help="new mesh directory (inside an exported precomputed volume, its info is linked to it)"),
        arg("--labelmap", metavar="LABELMAP", help=LABELMAP_HELP),
        arg("--version", metavar="REF", help="version (branch name = its head, or a UUID prefix; default main)"),
        arg("--bodies", type=parse_coords, metavar="ID,ID,...",
            help="these bodies instead of the ones the version changed"),
        arg("--lod", type=int, default=0, help="level of detail read from the base's mesh source (-1: coarsest)"),
        arg("--overwrite", action="store_true", help="replace an existing mesh directory at DEST"),
        QUIET,
    ), description="Mesh every body the version's mutation log touched (or --bodies) as the union of its "
       "supervoxels' meshes (the base's mesh source, or meshed from the labels) and write them as a sharded "
       "neuroglancer_multilod_draco directory that Neuroglancer, CloudVolume and TensorStore read. Written to a "
       "temporary directory and renamed into place."),
    Verb("export", lazy(_EXPORT, "cmd_export"), "write a volume as a new sharded volume (precomputed or OME-Zarr v3)", (
        arg("source", help="volume path or URL to read, or a repository directory (with --labelmap)"),
        arg("dest", help="new directory (or writable URL) to create"),
        arg("--format", choices=("precomputed", "zarr3"), default="precomputed"),
        arg("--chunk", type=parse_shape, metavar="Z,Y,X",
            help="chunk size (precomputed) or inner chunk (zarr3), z,y,x like every shape here (default 64,64,64)"),
        arg("--sharding", metavar="JSON",
            help="precomputed: the sharding spec of every scale, as in an info file "
            '(\'{"@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 9, "hash": "murmurhash3_x86_128", '
            "...}'), a JSON list of one spec per scale, or @FILE holding either (default: identity hash + "
            "preshift, about 1000 chunks per minishard)"),
        arg("--shard-bytes", type=parse_size, metavar="SIZE",
            help="target uncompressed bytes per shard for the default sharding, e.g. 512M or 2G (default 2G)"),
        arg("--gzip-level", type=int, default=DEFAULT_GZIP_LEVEL, metavar="0-9",
            help="precomputed: gzip level of gzip-encoded chunks and minishard indexes "
            f"(default {DEFAULT_GZIP_LEVEL}, TensorStore's)"),
        arg("--shard-shape", type=parse_shape, metavar="Z,Y,X",
            help="zarr3: the shard shape in voxels, whole inner chunks "
            "(default: grown from the inner chunk to --shard-bytes)"),
        SCHEDULER,
        WORKERS,
        arg("--overwrite", action="store_true", help="replace an existing dataset at DEST"),
        arg("--xyz", action="store_true", help="--chunk and --shard-shape in Neuroglancer's x,y,z order"),
        arg("--labelmap", metavar="LABELMAP",
            help="SOURCE is a repository: export this labelmap instance at --version (default: its only one)"),
        arg("--version", metavar="REF",
            help="version to export (branch name = its head, or a UUID prefix; default main)"),
        arg("--supervoxels", action="store_true",
            help="export supervoxel ids (the base patched by splits) instead of body ids"),
        arg("--allow-open", action="store_true",
            help="export an open (uncommitted) version as it is now (default: committed versions only)"),
        arg("--annotations", metavar="INSTANCE",
            help="SOURCE is a repository: export this annotation instance at --version as Neuroglancer "
            "precomputed annotations (neuroglancer_annotations_v1) related to the version's body ids"),
        arg("--geometry", choices=("lines", "points"), default=None,
            help="--annotations: one line per synapse pre->post with pre_segment/post_segment (lines, the default) "
            "or every annotation as a point with a kind property and a segment relationship (points)"),
        arg("--unsharded", action="store_true", help="--annotations: one file per key instead of sharded indexes"),
        arg("--properties", metavar="NAME,NAME",
            help="--annotations: export only these instance properties (default: all)"),
        arg("--tags", metavar="TAG,TAG", help="--annotations: export only these tags (default: all)"),
        QUIET,
    ), description="Materialise a volume (any format `shardscope open` reads) as a new sharded precomputed "
       "volume or an OME-Zarr 0.5 group of sharding_indexed Zarr v3 arrays, every scale. One Dask task per "
       "output shard (no two tasks write one file); the threaded scheduler unless --scheduler names a "
       "dask.distributed scheduler. With --annotations, a repository's annotation instance at a version is "
       "written as a precomputed annotation collection instead."),
    Verb("index", lazy(_EXPORT, "cmd_index"),
         "build a labelmap's base label index as a Dask job (threads or a distributed cluster)", (
        REPOSITORY,
        LABELMAP,
        SCHEDULER,
        WORKERS,
        arg("--overwrite", action="store_true", help="rebuild an index that is already stored"),
        deprecated_option("--force", "--overwrite", dest="overwrite", switch=True),
        QUIET,
    ), description="Count every scale-0 block of the labelmap's base segmentation as a Dask job (one task per run "
       "of blocks; the threaded scheduler unless --scheduler names a dask.distributed scheduler) and "
       "store the label index in the repository in one transaction.", also_in=("labelmap",)),
)


# -- labelmap --------------------------------------------------------------------------------------------
_LABELMAP = "napari_shardscope.core.cli.labelmap"
# -- verbs ----------------------------------------------------------------------------------------------
NAME = LABELMAP
USER = arg("--user", default=None, help="who edits (default $SHARDSCOPE_USER or the login name)")
#: Where a read or an edit happens: a labelmap instance at a version of a repository.
_AT: tuple[Arg, ...] = (REPOSITORY, REF, NAME)
_EDIT: tuple[Arg, ...] = (*_AT, USER)


_VOXELS_HELP = "file with an (N, 3) list of scale-0 voxels z, y, x (x, y, z with --xyz)"
LABEL = Verb("label", lazy(_LABELMAP, "cmd_label"), "supervoxel and body at a voxel (z y x)", (
    *_AT,
    arg("z", type=int, help="z (x with --xyz)"),
    arg("y", type=int),
    arg("x", type=int, help="x (z with --xyz)"),
    arg("--scale", metavar="KEY", default=None, help="scale key, as inspect lists it (default: the finest)"),
    XYZ,
), description="The supervoxel and body at a voxel. " + COORDS_HELP + ".")
BODY_MERGE = Verb("merge", lazy(_LABELMAP, "cmd_merge"), "merge bodies into a target body", (
    *_EDIT, arg("target", type=int), arg("others", type=int, nargs="+"),
))
CLEAVE = Verb("cleave", lazy(_LABELMAP, "cmd_cleave"), "move supervoxels of a body to a new body", (
    *_EDIT, arg("body", type=int), arg("supervoxels", type=int, nargs="+"),
), also_in=("body",))
SPLIT_SUPERVOXEL = Verb("split-supervoxel", lazy(_LABELMAP, "cmd_split_supervoxel"),
                        "split a supervoxel by a voxel list (.npy or .json, z y x)", (
    *_EDIT, arg("supervoxel", type=int), arg("voxels", help=_VOXELS_HELP), XYZ,
), also_in=("body",))
BODY_SPLIT = Verb("split", lazy(_LABELMAP, "cmd_split_body"),
                  "split a body by seed groups (JSON: group -> voxel list)", (
    *_EDIT, arg("body", type=int),
    arg("seeds", help='JSON file {"1": [[z, y, x], ...], "2": [...]} (x, y, z with --xyz)'), XYZ,
))
SIZE = Verb("size", lazy(_LABELMAP, "cmd_size"), "voxel count, supervoxels and bounding box of a body", (
    *_AT,
    arg("body", type=int),
    arg("--coarse", action="store_true", help="block-granular bounding box (reads no voxels)"),
), also_in=("body",))
HISTORY = Verb("history", lazy(_LABELMAP, "cmd_history"), "the edits that shaped a body, across the ancestry",
               (*_AT, arg("body", type=int)), also_in=("body",))
BRANCH_MERGE = Verb("merge", lazy(_LABELMAP, "cmd_merge_branches"),
                    "3-way merge of two branch heads' labelmap edits (a new open merge version)", (
    REPOSITORY,
    arg("ours", help="my branch (its head) or version; must be committed"),
    arg("theirs", help="their branch or version; must be committed"),
    NAME,
    RESOLVE,
    arg("--policy", choices=("fail", "ours", "theirs"), default="fail",
        help="side for conflicts not resolved one by one (default: fail, report them)"),
    arg("--branch", default=None, help="start a new branch for the merge version"),
    arg("--dry-run", action="store_true", help="only report the plan and conflicts"),
    arg("--user", default=None, help="who merges (default $SHARDSCOPE_USER or the login name)"),
), description="Merge the labelmap edits of committed version THEIRS into committed version OURS from their "
   "common ancestor. Edits of different bodies and supervoxels replay cleanly; a label edited on both sides "
   "is a conflict: exit 7 and a list (with the plan, as JSON with --json) until each is resolved with "
   "--resolve KIND:ID=ours|theirs|both or --policy. Nothing is written until then.",
   error_details=lazy(_LABELMAP, "branch_merge_conflicts_json"))

LABELMAP_VERBS = (
    VerbGroup("labelmap", "labelmap instances: supervoxel base + versioned edits",
              "Labelmap instances (DVID's labelmap): a base supervoxel volume that is never modified, and "
              "per-version edits in the repository.", (
        Verb("create", lazy(_LABELMAP, "cmd_create"), "create a labelmap over a base segmentation", (
            REPOSITORY,
            NAME,
            arg("base", help="base supervoxel volume (path or URL of precomputed, zarr v3 / v2 or N5)"),
            arg("--agglomeration", default=None, metavar="JSON_OR_TABLE",
                help="supervoxel -> body: a bodies JSON (*.json, e.g. the sample's, copied into the repository) "
                     "or a sorted table's path or URL (zarr v3, Parquet, sharded lookup; read in place)"),
            arg("--agglomeration-reverse", default=None, metavar="TABLE",
                help="the table's body-sorted reverse (read in place; default: the repository keeps a copy)"),
            arg("--id-start", type=int, default=None, help="first new id (default: above every base id)"),
            arg("--block", type=int, default=64, help="overlay block edge in voxels (default 64)"),
            arg("--no-index", action="store_true", help="build the base label index on first need instead"),
            QUIET,
        )),
        Verb("info", lazy(_LABELMAP, "cmd_info"), "configuration, index and (with REF) a version's edit counts", (
            REPOSITORY,
            arg("words", nargs="+", metavar="[REF] LABELMAP",
                help="the version to describe (optional) and the labelmap instance"),
        ), usage="shardscope labelmap info [-h] [--json] REPO [REF] LABELMAP"),
    )),
    VerbGroup("body", "edit and read bodies: merge, cleave, split, size, history",
              "Body edits and reads on an open version of a labelmap (one meaning of 'merge': bodies).",
              (BODY_MERGE, BODY_SPLIT)),
    VerbGroup("branch", "merge two branches' labelmap edits",
              "Branch-level labelmap work (one meaning of 'merge': two branches' edits, conflicts per body).",
              (BRANCH_MERGE,)),
    LABEL,
    CLEAVE,
    SPLIT_SUPERVOXEL,
    Verb("undo", lazy(_LABELMAP, "cmd_undo"), "undo the latest edit of an open version", _EDIT),
    Verb("redo", lazy(_LABELMAP, "cmd_undo"), "redo the latest edit of an open version", _EDIT),
    SIZE,
    Verb("diff", lazy(_LABELMAP, "cmd_diff"), "what changed between two versions: the edits and bodies on each side", (
        REPOSITORY,
        arg("a", metavar="A", help="first version (branch name or UUID prefix)"),
        arg("b", metavar="B", help="second version"),
        NAME,
    )),
    HISTORY,
    deprecated(BODY_MERGE, "merge", "body merge"),
    deprecated(BODY_SPLIT, "split-body", "body split"),
    deprecated(BRANCH_MERGE, "merge-branches", "branch merge"),
)


# -- connectome -----------------------------------------------------------------------------------------
_CONNECTOME = "napari_shardscope.core.cli.connectome"
_ROWS: tuple[Arg | OneOf, ...] = (
    arg("--annotations", dest="instance", default=None, metavar="NAME",
        help="annotation instance (default: the repository's only one)"),
    OneOf((arg("--csv", action="store_true", help="CSV on stdout (a header line, then one line per row)"),
          arg("--parquet", metavar="FILE", default=None,
              help="write the rows to a Parquet file (needs pyarrow: the 'tables' extra)"))),
)
CONNECTOME_VERBS = (
    Verb("synapses", lazy(_CONNECTOME, "cmd_synapses"),
         "a body's pre/post synaptic sites and their partners at a version",
         (REPOSITORY, REF, arg("body", type=parse_uint64, nargs="?", default=None,
                               help="body whose synapses to list (with --todo: the body to check; none: the "
                                    "whole version)"),
          arg("--todo", choices=("orphans", "weak"), default=None,
              help="list the synapses a proofreader should look at instead: 'orphans' (a site on background, "
                   "without a partner or whose partner is missing, or an autapse) or 'weak' (partners connected "
                   "by fewer than --min-synapses synapses); one row per site with a note saying why"),
          arg("--min-synapses", type=int, default=3, metavar="N",
              help="with --todo weak: a partner with fewer synapses than N is weak (default 3, FlyEM's usual "
                   "threshold)"),
          arg("--min-body-synapses", type=int, default=10, metavar="N",
              help="with --todo weak and no BODY: check every body with at least N synapses (default 10)"),
          arg("--save", metavar="LIST", default=None,
              help="with --todo: also store the rows as to-do list LIST at REF (an open version), for the "
                   "Navigate panel's Next/Previous"),
          *_ROWS),
         description="One row per synapse end in BODY (a site without a partner: partner 0): annotation id, "
                     "kind, point z y x, body, partner annotation and its body. JSON Lines with --json. "
                     "With --todo orphans|weak: the synapse to-do list of BODY (or of the whole version): "
                     "one row per site to look at (check, id, kind, z y x, body, reasons, partner_body, count, "
                     "note); --save LIST stores it as a to-do list at REF."),
    Verb("connections", lazy(_CONNECTOME, "cmd_connections"),
         "a body's partner bodies with synapse counts, outgoing and incoming",
         (REPOSITORY, REF, arg("body", type=parse_uint64), *_ROWS),
         description="One row per partner: direction 'out' (BODY is pre-synaptic) or 'in', partner body, "
                     "synapse count; largest first. Costs the body's supervoxels and synapses."),
    Verb("connectome", lazy(_CONNECTOME, "cmd_connectome"),
         "adjacency table (pre, post, count) of bodies, or what changed against another version",
         (REPOSITORY, REF, arg("bodies", type=parse_uint64, nargs="*", metavar="BODY",
                               help="bodies whose connections to list (none: the whole connectome)"),
          arg("--within", action="store_true", help="only connections with both ends among the BODY list"),
          arg("--against", metavar="REF2", default=None,
              help="list the connections that differ from version REF2 to REF: pre, post, before, after, "
                   "status (created, removed, changed)"),
          *_ROWS),
         description="The connections touching the BODY list (or every connection) at version REF, one row "
                     "per (pre body, post body, synapse count). With --against REF2, only what the edits "
                     "between the two versions created, removed or changed."),
)


# -- serve -----------------------------------------------------------------------------------------------
_SERVE = "napari_shardscope.core.cli.serve"
SERVE_VERBS = (
    Verb("serve", lazy(_SERVE, "run_serve"),
         "serve datasets or a labelmap version to Neuroglancer (client included) on 127.0.0.1",
         (arg("targets", nargs="+", metavar="DATASET|REPO", help="dataset path/URL, or a repository directory"),
          arg("--version", metavar="REF", help="version of the repository's labelmap (UUID, prefix or branch; "
              "default: main's head)"),
          arg("--labelmap", dest="instance", metavar="LABELMAP", help=LABELMAP_HELP),
          deprecated_option("--instance", "--labelmap", dest="instance"),
          arg("--port", type=int, default=0, metavar="N", help="port on 127.0.0.1 (default: any free port)"),
          arg("--segments", metavar="ID,ID", help="bodies to select in the version's layer"),
          arg("--cors", action="append", metavar="ORIGIN",
              help="also let web pages of ORIGIN (scheme://host[:port], e.g. a Neuroglancer you run at "
              "http://localhost:8080) read the served data; repeatable (default: only the client the server "
              "serves itself)"),
          arg("--print-url", action="store_true", help="print the link and exit (nothing is served)"),
          arg("--annotations", metavar="NAME,NAME",
              help="annotation instances served beside the version, as precomputed annotation layers linked to "
              "its segmentation (default: every one bound to the labelmap)"),
          arg("--no-annotations", action="store_true", help="serve no annotation instance"),
          arg("--equivalences", action="store_true",
              help="print a state over the (remote) base with a merge-only version's merges as equivalences")),
         description="Start a loopback HTTP server that serves the Neuroglancer client (from the neuroglancer "
         "package), the datasets as stored (byte ranges; cross-origin reads only for --cors origins) and a labelmap "
         "version as a precomputed "
         "segmentation computed on request (the version id is in the URL), with the annotation instances bound to "
         "the labelmap as precomputed annotation layers linked to it. Prints the link; Ctrl-C stops."),
)


# -- remote ----------------------------------------------------------------------------------------------
_REMOTE = "napari_shardscope.core.cli.remote"
REMOTE_ARG = arg("remote", nargs="?", default=DEFAULT_REMOTE, help="remote name (default origin)")
BRANCH_ARG = arg("branch", nargs="?", default="main", help="branch (default main)")

# -- annotation -------------------------------------------------------------------------------------------
_ANNOTATION = "napari_shardscope.core.cli.annotation"
ANNOTATION_VERBS = (
    VerbGroup("annotation", "annotation instances: synapses and points bound to a labelmap",
              "Annotation instances (DVID's annotation type): points and synapses bound to a labelmap, "
              "versioned like it.", (
        Verb("import", lazy(_ANNOTATION, "cmd_import"),
             "create an annotation instance whose base is a synapse table or precomputed annotations", (
            REPOSITORY,
            arg("name", metavar="NAME", help="the new annotation instance"),
            arg("source", metavar="SOURCE",
                help="a CSV, Parquet or Feather synapse table (CAVE or neuPrint columns) or a precomputed "
                     "annotation source (path or URL)"),
            arg("--labelmap", required=True, metavar="LABELMAP", help="the labelmap instance it is bound to"),
            arg("--pre", default=None, metavar="COLS", help="pre sites: one x,y,z list column or X,Y,Z columns "
                                                             "(default: CAVE's or neuPrint's names)"),
            arg("--post", default=None, metavar="COLS", help="post sites, as --pre (none: a table of points)"),
            arg("--id-column", default=None, metavar="COL", help="synapse ids (default: the row number)"),
            arg("--properties", default=None, metavar="COLS",
                help="comma-separated columns to keep (default: every other numeric or boolean column)"),
            arg("--voxel-size", type=parse_floats, default=None, metavar="X,Y,Z",
                help="the source is in nm: nm per voxel of the labelmap's scale 0"),
            arg("--base-dir", default=None, metavar="DIR",
                help="where the base tables go (default REPO/annotation-bases/NAME)"),
            arg("--format", choices=("parquet", "zarr3"), default="parquet", help="base table format"),
        ), description="Convert SOURCE once into two page-readable tables (by id, by block) beside the "
           "repository and create annotation instance NAME on them: every version reads them where they are "
           "and stores only its edits. Each synapse row becomes a pre and a post annotation (ids 2S+1, 2S+2) "
           "linked PreSynTo/PostSynTo; other numeric columns become properties."),
    )),
)

REMOTE_VERBS = (
    VerbGroup("remote", "remotes of a repository (buckets, directories)",
              "Remotes: URLs (s3://, gs://, a directory, file://; http(s):// read-only) to push to and fetch from.", (
        Verb("add", lazy(_REMOTE, "cmd_remote_add"), "add a remote", (
            REPOSITORY, arg("name"), arg("url"),
            arg("--anonymous", action="store_true", help="a public bucket: send no credentials (s3)"),
        )),
        Verb("list", lazy(_REMOTE, "cmd_remote_list"), "list the remotes", (REPOSITORY,)),
        Verb("remove", lazy(_REMOTE, "cmd_remote_remove"), "forget a remote (the remote itself is untouched)",
             (REPOSITORY, arg("name"))),
        Verb("check", lazy(_REMOTE, "cmd_remote_check"),
             "verify a remote: every object its refs reach (exit 1 on problems)",
             (arg("url", help="remote URL"),)),
    )),
    Verb("clone", lazy(_REMOTE, "cmd_clone"), "copy a remote repository into a new directory (origin configured)", (
        arg("url", help="remote URL"), arg("dest", help="new repository directory"),
        arg("--branch", default=None, help="fetch only this branch's history"),
        arg("--region", default=None, metavar="Z0:Z1,Y0:Y1,X0:X1",
            help="a region clone: labelmap edits only inside these scale-0 voxels (recorded on pushed branches)"),
        arg("--anonymous", action="store_true", help="a public bucket: send no credentials (s3)"),
        arg("--instances", action="append", metavar="NAME[,NAME]",
            help="a partial clone holding only these data instances"),
        arg("--engine", choices=("lmdb", "sqlite"), default=None, help="storage engine (default lmdb)"),
        arg("--prefetch", action="store_true",
            help="download every version's data now and copy the base segmentation's objects holding the region "
                 "(or all of it), for offline work (default: a lazy clone, data downloaded when first read)"),
    )),
    Verb("fetch", lazy(_REMOTE, "cmd_fetch"),
         "download the remote's versions this repository lacks (remote-tracking heads)", (
        REPOSITORY, REMOTE_ARG, arg("--branch", action="append", help="only this branch (repeatable)"),
    )),
    Verb("push", lazy(_REMOTE, "cmd_push"),
         "send a branch's committed versions and move the remote branch (fast-forward only)", (
        REPOSITORY, REMOTE_ARG, BRANCH_ARG,
        arg("--force-with-lease", action="store_true",
            help="move the remote branch even when not a fast-forward, if it is still where it was last fetched"),
    )),
    Verb("pull", lazy(_REMOTE, "cmd_pull"), "fetch a branch and fast-forward or merge it (a committed merge version)", (
        REPOSITORY, REMOTE_ARG, BRANCH_ARG,
        arg("--policy", choices=("fail", "ours", "theirs"), default="fail",
            help="side for body conflicts not resolved with --resolve (default fail: nothing written)"),
        RESOLVE,
        arg("--user", default=None, help="who merges (default $SHARDSCOPE_USER or the login name)"),
    ), error_details=lazy(_REMOTE, "pull_conflicts_json")),
    Verb("status", lazy(_REMOTE, "cmd_status"),
         "committed versions ahead of and behind the remote, per branch (as last fetched)", (
        REPOSITORY, REMOTE_ARG,
    )),
    Verb("review", lazy(_REMOTE, "cmd_review"), "the bodies a branch changed against its target, like a pull request", (
        REPOSITORY, arg("branch", help="the branch to review (e.g. origin/alice, after a fetch)"),
        arg("--target", default="main", help="the branch it would merge into (default main)"),
        arg("--labelmap", dest="name", metavar="LABELMAP", default=None, help=LABELMAP_HELP),
        deprecated_option("--name", "--labelmap", dest="name"),
    )),
    Verb("ids", lazy(_REMOTE, "cmd_ids"),
         "ids left in this clone's reserved blocks (--reserve COUNTER: reserve more, online)", (
        REPOSITORY,
        arg("--reserve", metavar="COUNTER", default=None, help="reserve another block of this counter"),
        arg("--count", type=int, default=ID_BLOCK, help=f"ids per block (default {ID_BLOCK})"),
    )),
)


#: The core verbs, in ``shardscope --help`` order.
VERBS = (*INSPECT_VERBS, *REPO_VERBS, *EXPORT_VERBS, *LABELMAP_VERBS, *ANNOTATION_VERBS, *CONNECTOME_VERBS,
         *SERVE_VERBS, *REMOTE_VERBS)
