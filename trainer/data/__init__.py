"""Image data for the ImageNet trainer and the shard command, one job per module.

- ``images``: decode + augment one image into a uint8 tensor (reduced-size JPEG decode, crop
  and resize in one resample); ``normalize`` does the float part on the device.
- ``tar_members``: tar shards written and read with the standard library.
- ``shard_examples``: a shard's labelled examples (webdataset's keys).
- ``shard_index``: the index of a shard set (classes, shards, each example's place and
  checksum, format version).
- ``shard_image``: what ``make_shards`` stores of an image (a plain JPEG or a PNG).
- ``make_shards``: the command that turns a class-folder tree into shards.
- ``epoch_order``: which examples each step, host and data worker gets (arithmetic only).
- ``shard_reads``: ranged reads of runs of examples, checked against the index, read ahead.
- ``plan``: the command that prints what a slice will do with a shard set (and the trainer's
  log of it); ``shared_memory``: the ``/dev/shm`` check before data workers start.
- ``shard_source`` and ``folder_source``: the trainer's ``DataSource`` over shards (local or
  ``gs://``, streamed) and over a class-folder tree; ``sources`` picks one for a folder.
- ``stream``: the shard source's one input stream for the whole run (data workers that start
  once and build the evaluation and the next epoch ahead, each step in work units);
  ``step_ring``: the shared-memory step buffers its workers decode into, handed out whole.
- ``loader``: torch's ``DataLoader``, with the data workers' errors kept whole and SIGTERM /
  SIGINT from anyone but the trainer ignored.
"""
