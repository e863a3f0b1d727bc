"""Cut the sample shipped in data/mnist-sample/ from a full set of MNIST IDX files.

    python data/cut_mnist_sample.py SOURCE_DIR data/mnist-sample [TRAIN] [TEST]

Takes the first TRAIN (default 2000) training and first TEST (default 500) test examples,
keeps the IDX format, and gzips with a fixed timestamp so the output is byte-for-byte
reproducible. Standard library only.
"""

import gzip
import os
import struct
import sys

FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
         "t10k": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}


def read(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as handle:
        return handle.read()


def cut(data, count):
    """The first ``count`` items of an IDX file, header adjusted."""
    dims = data[3]
    shape = list(struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims]))
    item = 1
    for size in shape[1:]:
        item *= size
    shape[0] = min(count, shape[0])
    header = data[:4] + struct.pack(">" + "I" * dims, *shape)
    start = 4 + 4 * dims
    return header + data[start:start + shape[0] * item]


def main(source, target, train=2000, test=500):
    os.makedirs(target, exist_ok=True)
    for split, count in (("train", train), ("t10k", test)):
        for name in FILES[split]:
            found = [os.path.join(source, name + ext) for ext in (".gz", "")
                     if os.path.isfile(os.path.join(source, name + ext))]
            if not found:
                sys.exit("{} not found in {}".format(name, source))
            with open(os.path.join(target, name + ".gz"), "wb") as raw:
                with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as out:
                    out.write(cut(read(found[0]), count))


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) not in (2, 3, 4):
        sys.exit(__doc__)
    main(args[0], args[1], *(int(value) for value in args[2:]))
