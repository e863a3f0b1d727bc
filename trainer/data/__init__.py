"""Image data for the ImageNet trainer and the shard command, one job per module.

- ``images``: decode + augment one image into a uint8 tensor (reduced-size JPEG decode, crop
  and resize in one resample); ``normalize`` does the float part on the device.
- ``tar_members``: tar shards written and read with the standard library.
- ``shard_examples``: a shard's labelled examples (webdataset's keys, checked against the index).
- ``shard_index``: the index of a shard set (classes, shards, counts, format version).
- ``shard_image``: what ``make_shards`` stores of an image (a plain JPEG or a PNG).
- ``make_shards``: the command that turns a class-folder tree into shards.
- ``shard_source`` and ``folder_source``: the trainer's ``DataSource`` over shards (local or
  ``gs://``, streamed) and over a class-folder tree; ``sources`` picks one for a folder.
- ``loader``: torch's ``DataLoader``, with the data workers' errors kept whole.
"""
