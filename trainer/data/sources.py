"""Which reader a ``--data_dir`` needs: shards when it holds a shard index (``index.json``, which
``make_shards`` writes last), else a class-folder tree. Shard files without an index are an
interrupted conversion (or copy), said so, rather than a class-folder tree that is missing its
``train/<class>/`` folders.
"""

from __future__ import annotations

from trainer import storage
from trainer.batches import WHOLE, DataSource, HostPart
from trainer.data.shard_index import INDEX_NAME
from trainer.errors import DataError


def open_source(data_dir: str, image_size: int, batch_size: int, num_workers: int, seed: int,
                eval_batch_size: int = 0, host: HostPart = WHOLE, devices: int = 1
                ) -> DataSource:
    """The ``ShardSource`` or ``FolderSource`` of ``data_dir`` (the same arguments; ``devices``,
    this host's, only sizes the plan and the ``/dev/shm`` check)."""
    from trainer.data.folder_source import FolderSource
    from trainer.data.shard_source import ShardSource

    root = storage.open_dir(data_dir)
    if root.exists(INDEX_NAME):
        return ShardSource(data_dir, image_size, batch_size, num_workers, seed,
                           eval_batch_size, host, devices=devices)
    try:
        return FolderSource(data_dir, image_size, batch_size, num_workers, seed,
                            eval_batch_size, host, devices=devices)
    except DataError:
        # Listed only now: a class-folder tree is never listed twice (on gs:// that is a
        # request per thousand images).
        shards = [name for name in root.list() if name.endswith(".tar")]
        if not shards:
            raise
        raise DataError("{} holds {} shard files ({}{}) but no {}: an interrupted make_shards "
                        "(or copy)?".format(root.uri, len(shards), shards[0],
                                            ", ..." if len(shards) > 1 else "", INDEX_NAME),
                        "run it again: python -m trainer.data.make_shards with the same "
                        "options writes only the shards still missing, then the index")
