"""The labelled examples of one shard: its tar read (``tar_members``), each example's image and
label found, their number checked against the index. Every problem is a ``DataError`` (exit
65) naming the shard's URI and, where there is one, the example's key.

An example is a key with an image (the first of its files whose extension is an image's:
``jpg``, ``png``, ``webp`` ...; the bytes may be in any format Pillow reads) and a ``cls``
file holding its label in decimal, as ``make_shards`` writes them and webdataset's ImageNet
shards have them. Its name, ``SHARD#KEY`` (``train-000012.tar#train-000012_000345``), is
unique in the set and the same wherever the set is stored.
"""

from __future__ import annotations

import io
import tarfile
from typing import List, Optional, Tuple

from trainer.data.tar_members import read_samples
from trainer.errors import DataError

IMAGE_KINDS = ("jpg", "jpeg", "png", "webp", "ppm", "pgm", "pbm", "bmp", "tif", "tiff", "gif",
               "jp2", "j2k", "jpx", "avif", "mpo", "img", "image")
Example = Tuple[str, bytes, int]  # name (SHARD#KEY), image bytes, label
_HINT = "write the shards with python -m trainer.data.make_shards"


def labelled(data: bytes, shard_uri: str, count: Optional[int] = None) -> List[Example]:
    """(name, image bytes, label) of each example of the shard ``data`` read from
    ``shard_uri``, in order; ``count``: how many examples the index says it holds."""
    shard = shard_uri.rstrip("/").rsplit("/", 1)[-1]
    try:
        samples = list(read_samples(io.BytesIO(data)))
    except tarfile.TarError as error:
        raise DataError("{} is not a readable tar shard: {}".format(shard_uri, error), _HINT)
    examples = []
    for key, files in samples:
        kinds = [kind for kind in files if kind in IMAGE_KINDS]
        label = files.get("cls", b"").strip()
        if not kinds or not label.isdigit():
            raise DataError("{}: example {!r} lacks an image or a .cls label (its files: "
                            "{})".format(shard_uri, key, ", ".join(sorted(files))), _HINT)
        examples.append(("{}#{}".format(shard, key), files[kinds[0]], int(label)))
    if count is not None and len(examples) != count:
        raise DataError("{} holds {} examples; the index says {}".format(
            shard_uri, len(examples), count), "the shard was changed or cut after the index "
            "was written: write the shards again with python -m trainer.data.make_shards")
    return examples
