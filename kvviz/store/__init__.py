"""The recording format (SQLite, WAL): docs/FORMAT.md defines it, docs/STORE_API.md the API.

    schema.py      every table and its columns, file checks, SQL helpers
    arraycodec.py  integer arrays <-> zlib streams (narrowing, byte shuffle, nibbles)
    mapcodec.py    BlockMap <-> stored blobs (runs over all planes, or one stream per plane)
    eventcodec.py  events: rare kinds as rows, the per-request bulk as compressed columns
    writer.py      RunWriter (numpy and the standard library only: the writer process)
    reader.py      RunReader (pandas DataFrames, BlockMaps), also while the writer runs
    kv_writer.py   the kv_* tables (KV-event streams as received): KvEventWriter
    kv_reader.py   the kv_* tables read back in bounded slices (streams, counts, batches)
    liveness.py    a "running" run whose writer stopped committing: "stopped unexpectedly"

Import the module you need (`from kvviz.store.reader import RunReader`); this package's
__init__ imports nothing, so the writer process never loads pandas.
"""
