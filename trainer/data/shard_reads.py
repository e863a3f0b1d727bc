"""Reading pieces of shards (``epoch_order``: runs of consecutive examples of one shard) with
ranged reads located by the index's example table, each example checked against the index.

One piece is one read of exactly its examples' bytes (tar headers included), so nothing is
read that is not trained on. A worker reads the pieces of a whole step (a *run*: its host's
part of one global batch) a few at a time, and ``RUNS_AHEAD`` runs are fetched while it
decodes the current one. ``unpacked`` consumes a run's bytes piece by piece and the decoder
drops each example once decoded, so a worker holds at most ``RUNS_AHEAD + 1`` runs' bytes
(plus one piece while it is unpacked). The runs come from the worker's own list of steps, so
the look-ahead ends where the worker's steps end: nothing past the epoch is read.
"""

from __future__ import annotations

import collections
import io
import itertools
import queue
import tarfile
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, Iterator, List, Sequence, Tuple

from trainer import storage
from trainer.data.epoch_order import Piece, Run
from trainer.data.shard_index import INDEX_NAME, Shard
from trainer.data.tar_members import read_samples
from trainer.errors import DataError

Example = Tuple[str, bytes, int]  # key, image bytes, label
# Runs each data worker fetches ahead of the one it decodes: a store's latency is hidden
# when the next run is under way while this one decodes; each holds one local batch's bytes.
RUNS_AHEAD = 2
# Ranged reads one run has under way at once.
PIECES_IN_FLIGHT = 4
IMAGE_KINDS = ("jpg", "jpeg", "png", "webp", "ppm", "bmp", "pgm", "tif", "tiff", "img")
_END_OF_ARCHIVE = bytes(2 * tarfile.BLOCKSIZE)
_HINT = "write the shards again with python -m trainer.data.make_shards"


class ShardReader:
    """Reads pieces of the shards ``shards`` (one split, in index order) under ``root``."""

    def __init__(self, root: storage.Directory, shards: Sequence[Shard]) -> None:
        self.root, self.shards = root, list(shards)

    def piece_bytes(self, piece: Piece) -> int:
        shard, first, end = piece
        return self.shards[shard].byte_range(first, end)[1]

    def examples_of(self, runs: Sequence[Run]) -> Iterator[List[Example]]:
        """The examples of each run, read ``RUNS_AHEAD`` runs ahead; the caller may drop each
        example once used (the list is its own)."""
        fetched = prefetched([pieces for _, pieces in runs], self.read_run)
        for _, pieces in runs:
            yield self.unpacked(pieces, next(fetched))
        fetched.close()

    def read_run(self, pieces: List[Piece], stop: threading.Event) -> List[bytes]:
        """The bytes of each piece, in order, ``PIECES_IN_FLIGHT`` read at once (a store's
        latency per request, not its bandwidth, is what one read at a time waits on); pieces
        not started when ``stop`` is set (the consumer is gone) are not read."""
        def read(piece: Piece) -> bytes:
            return b"" if stop.is_set() else self.read_piece(piece)

        with ThreadPoolExecutor(max(1, min(PIECES_IN_FLIGHT, len(pieces)))) as pool:
            return list(pool.map(read, pieces))

    def read_piece(self, piece: Piece) -> bytes:
        """The bytes of ``piece``, each example's checked against the index. A mismatch is
        read once more (a transfer can corrupt bytes that no layer below noticed); a second
        one means the file is not the one indexed: a DataError naming the shard."""
        data = self._read(piece)
        bad = self._mismatch(piece, data)
        if bad is not None:
            data = self._read(piece)
            bad = self._mismatch(piece, data)
        if bad is not None:
            raise DataError("{}: example {} of {} does not match {}'s checksum".format(
                self._uri(piece[0]), bad, self.shards[piece[0]].count, INDEX_NAME),
                "the shard changed after the index was written: copy the whole set again, "
                "or " + _HINT)
        return data

    def unpacked(self, pieces: List[Piece], run: List[bytes]) -> List[Example]:
        """(key, image bytes, label) of every example of ``pieces``, whose bytes ``run``
        (``read_run``'s list) holds; empties ``run`` as it goes, so a piece's raw bytes are
        freed once unpacked."""
        found: List[Example] = []
        for piece in pieces:
            shard, first, end = piece
            examples = labelled(self._uri(shard), run.pop(0) + _END_OF_ARCHIVE)
            if len(examples) != end - first:
                raise DataError("{}: its examples {} to {} are {} tar examples, not {}; the "
                                "shard is not the one {} describes".format(
                                    self._uri(shard), first, end, len(examples), end - first,
                                    INDEX_NAME), _HINT)
            found.extend(examples)
        return found

    def _read(self, piece: Piece) -> bytes:
        shard, first, end = piece
        entry = self.shards[shard]
        offset, length = entry.byte_range(first, end)
        try:
            data = self.root.read_range(entry.name, offset, length)
        except FileNotFoundError:
            raise DataError("{} lists shard {} but there is no such file".format(
                self.root.join(INDEX_NAME), entry.name), "copy every shard of the set, or "
                + _HINT)
        if len(data) != length:
            raise DataError("{} ends at byte {}, before its examples that {} lists end "
                            "({})".format(self._uri(shard), offset + len(data), INDEX_NAME,
                                          entry.offset(entry.count)),
                            "copy the whole file again, or " + _HINT)
        return data

    def _mismatch(self, piece: Piece, data: bytes):
        """The first example of ``piece`` whose bytes in ``data`` are not the indexed ones,
        or None."""
        shard, first, end = piece
        entry, at = self.shards[shard], 0
        checksums = entry.checksums()
        for example in range(first, end):
            size = entry.offset(example + 1) - entry.offset(example)
            if zlib.crc32(data[at:at + size]) != checksums[example]:
                return example
            at += size
        return None

    def _uri(self, shard: int) -> str:
        return self.root.join(self.shards[shard].name)


def labelled(where: str, data: bytes) -> List[Example]:
    """(key, image bytes, label) of each example of the tar stream ``data`` (from the shard
    ``where``); a DataError names a stream that is not a tar or an example without an image
    or a label."""
    try:
        samples = list(read_samples(io.BytesIO(data)))
    except tarfile.TarError as error:
        raise DataError("{} is not a readable tar shard: {}".format(where, error), _HINT)
    found = []
    for key, files in samples:
        kinds = [kind for kind in files if kind in IMAGE_KINDS]
        if "cls" not in files or not kinds or not files["cls"].strip().isdigit():
            raise DataError("{}: example {!r} lacks an image or a .cls label".format(
                where, key), _HINT)
        found.append((key, files[kinds[0]], int(files["cls"])))
    return found


def prefetched(items: Iterable, fetch: Callable[[object, threading.Event], object],
               ahead: int = RUNS_AHEAD) -> Iterator:
    """``fetch(item, stop)`` of each item in order, the next ``ahead`` fetched by threads
    while the caller consumes the current one (network reads release the GIL). A fetch's
    exception is raised where its result would have been. Closing the generator early sets
    ``stop`` and starts no more fetches: those under way end at their next check of it."""
    stop = threading.Event()

    def start(item) -> "queue.Queue":
        slot: "queue.Queue" = queue.Queue(maxsize=1)

        def run() -> None:
            try:
                slot.put((fetch(item, stop), None))
            except BaseException as error:  # handed to the consumer, raised there
                slot.put((None, error))

        threading.Thread(target=run, daemon=True).start()
        return slot

    remaining = iter(items)
    pending = collections.deque(start(item) for item in itertools.islice(remaining, ahead))
    try:
        while pending:
            data, error = pending.popleft().get()
            if error is not None:
                raise error
            pending.extend(start(item) for item in itertools.islice(remaining, 1))
            yield data
    finally:
        stop.set()
