"""The corpus pass of `encode`: input files -> cleaned rows, deduplicated and kept in their language
(`sift`) -> text shards and their manifest (`build`), resumable per input file (`parts`).

It works in constant memory whatever the input size: files are read line by line with a bounded
``readline``, compressed input is decompressed as a stream, and deduplication keeps 64-bit hashes only
(about 16 bytes per unique sentence). What it writes, and how it is read back, is bitextmine/workspace/.
"""
