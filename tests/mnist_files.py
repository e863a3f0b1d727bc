"""MNIST IDX files written by the tests: any shape, any number of examples."""

import struct

import numpy as np

IMAGES_MAGIC, LABELS_MAGIC = 2051, 2049


def write_idx(path, array, magic):
    header = struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in array.shape)
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def write_mnist(folder, train_examples, test_examples=3):
    """The four MNIST IDX files with this many examples (random digits, labels 0-9)."""
    folder.mkdir(parents=True)
    generator = np.random.default_rng(0)
    for split, count in (("train", train_examples), ("t10k", test_examples)):
        write_idx(folder / "{}-images-idx3-ubyte".format(split),
                  generator.integers(0, 256, (count, 28, 28)), IMAGES_MAGIC)
        write_idx(folder / "{}-labels-idx1-ubyte".format(split),
                  generator.integers(0, 10, count), LABELS_MAGIC)
    return folder
