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
import itertools
import queue
import tarfile
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, Iterator, List, Sequence

from trainer import storage
from trainer.data.epoch_order import Piece, Run
from trainer.data.shard_examples import Example, labelled
from trainer.data.shard_index import INDEX_NAME, Shard
from trainer.errors import DataError

# Runs each data worker fetches ahead of the one it decodes: a store's latency is hidden
# when the next run is under way while this one decodes; each holds one local batch's bytes.
RUNS_AHEAD = 2
# Ranged reads one run has under way at once.
PIECES_IN_FLIGHT = 4
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
        """The bytes of each piece, in order (``read_each``)."""
        return read_each(pieces, self.read_piece, stop)

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
            # The count check: the piece's bytes hold exactly the examples the index places
            # there, or the shard is not the one it describes.
            found.extend(labelled(run.pop(0) + _END_OF_ARCHIVE, self._uri(shard), end - first))
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


def read_each(items: Sequence, read: Callable[[object], bytes], stop: threading.Event
              ) -> List[bytes]:
    """``read(item)`` of each item, in order, ``PIECES_IN_FLIGHT`` read at once (a store's
    latency per request, not its bandwidth, is what one read at a time waits on); items not
    started when ``stop`` is set (the consumer is gone) are not read (``b""``)."""
    def guarded(item) -> bytes:
        return b"" if stop.is_set() else read(item)

    with ThreadPoolExecutor(max(1, min(PIECES_IN_FLIGHT, len(items)))) as pool:
        return list(pool.map(guarded, items))


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
