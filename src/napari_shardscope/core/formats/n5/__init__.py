"""N5: ``attributes.json``, block headers and data, multiscale groups, the inspector.

Modules: :mod:`.attributes` (dataset and multiscale metadata), :mod:`.compression` (the block
compressions), :mod:`.lz4_stream` (lz4-java's block framing), :mod:`.block` (block paths, header,
decode/encode), :mod:`.inspector` (:class:`~.inspector.N5Inspector` for the CLI and shard browser).

Axis order everywhere in this package is N5's: ``dimensions`` order, fastest-varying first (x, y, z).
Decoded blocks are numpy arrays in C order of the reversed dimensions, ``(z, y, x)``.
"""
