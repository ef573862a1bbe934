"""Export: materialise a volume (or a labelmap version) to a new sharded volume, on Dask.

One task per output shard, so no two tasks ever write one shard file; the threaded scheduler by
default, a ``dask.distributed`` client when the user has a cluster.
"""
