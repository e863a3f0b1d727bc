"""The ImageNet trainer's data from shards (``trainer.data.make_shards``), local or streamed from
``gs://`` through the project's storage layer (its one retry policy).

Who reads what: the shards of a split are dealt out to *streams*, one per data worker of each
host (``hosts x workers``), so every shard is read by exactly one worker of one host and
several shards are in flight at once (each worker fetches its next ``SHARDS_IN_FLIGHT``
while it decodes the current one). A training epoch deals out the shards in the order of a
permutation of (seed, epoch); each worker reads its shards in that order, shuffles each
shard's examples (the shuffle buffer is one shard, drawn again per seed and epoch), and
emits whole batches of this host's part of the global batch. The loader takes the workers'
batches in turn, so step ``k`` of an epoch is batch ``k // workers`` of worker ``k % workers``:
every step of the epoch is a function of (seed, epoch, hosts, workers). The data workers
are part of that order: resume with the same ``--num_workers`` (a changed count is refused).

Every worker emits the same number of batches, the most that every stream can fill in any
epoch (the examples of its ``shards // streams`` smallest shards); the rest of a stream's
examples sit the epoch out, different ones each epoch.

Resuming at step ``s`` skips, per worker, the batches it had emitted: whole shards by the
index's counts without reading them, then the first examples of the shard where it stopped.

Evaluation deals the ``val`` shards out the same way without shuffling; each worker's last
batch is padded, and workers with fewer batches emit all-padding ones (``IGNORE_LABEL``), so
every example is counted once.
"""

from __future__ import annotations

import collections
import itertools
import queue
import random
import threading
from typing import Callable, Iterator, List, Optional, Tuple

import torch
from torch.utils.data import IterableDataset, get_worker_info

from trainer import storage
from trainer.batches import WHOLE, Batch, DataSource, HostPart, epoch_order, pad_batch
from trainer.data import images, loader, shard_examples
from trainer.data.shard_index import INDEX_NAME, ShardIndex
from trainer.errors import DataError, TrainerError

Shards = List[Tuple[str, int]]  # (shard name, examples)
# Shards each data worker fetches ahead of the one it decodes: several requests in flight
# hide a store's latency and per-request cost; each holds a shard in memory (about 110 MB of
# ImageNet at the default --shard_size).
SHARDS_IN_FLIGHT = 2


def load_index(root: storage.Directory) -> ShardIndex:
    try:
        data = root.read_bytes(INDEX_NAME)
    except FileNotFoundError:
        raise DataError("{} has no {}".format(root.uri, INDEX_NAME),
                        "write shards with python -m trainer.data.make_shards, or point "
                        "--data_dir at a train/ val/ class-folder tree")
    return ShardIndex.from_json(data, root.join(INDEX_NAME))


class ShardSource(DataSource):
    """Random-resized-crop + flip for training, 256/224 centre crop for evaluation, uint8."""

    def __init__(self, data_dir: str, image_size: int, batch_size: int, num_workers: int,
                 seed: int, eval_batch_size: int = 0, host: HostPart = WHOLE) -> None:
        self.root = storage.open_dir(data_dir)
        self.index = load_index(self.root)
        self.num_classes = len(self.index.classes)
        self.image_size, self.seed, self.host = image_size, seed, host
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size or batch_size
        train, val = self.index.shards("train"), self.index.shards("val")
        # Fewer workers than asked when there are too few shards for every one to have one.
        self.workers = max(0, min(num_workers, len(train) // host.count))
        self.streams = max(1, self.workers) * host.count
        self.layout = {"num_workers": self.workers, "hosts": host.count}
        if len(train) < self.streams or not val:
            raise DataError("{} has {} train and {} val shards: too few for {} host(s)".format(
                self.root.uri, len(train), len(val), host.count),
                "write smaller shards (make_shards --shard_size) so there is at least one "
                "per host")
        self.local_batch = batch_size // host.count
        smallest = sorted(count for _, count in train)[:len(train) // self.streams]
        self.batches_per_worker = sum(smallest) // self.local_batch
        if not self.batches_per_worker:
            raise TrainerError("--batch_size is too large for {}: each of its {} data streams "
                               "has at least {} examples, fewer than one batch".format(
                                   self.root.uri, self.streams, sum(smallest)),
                               "lower --batch_size or --num_workers")
        self.steps_per_epoch = self.batches_per_worker * max(1, self.workers)
        self.local_eval_batch = self.eval_batch_size // host.count
        self._val = val
        self.eval_batches_per_worker = max(
            -(-sum(count for _, count in val[stream::self.streams]) // self.local_eval_batch)
            for stream in range(self.streams))
        self.eval_steps = self.eval_batches_per_worker * max(1, self.workers)

    def describe(self) -> str:
        return "{} shards ({} train, {} val examples), {} data worker(s) per host".format(
            self.root.uri, self.index.examples("train"), self.index.examples("val"),
            self.workers)

    def train_batches(self, epoch: int, start_step: int = 0) -> Iterator[Batch]:
        train = self.index.shards("train")
        order = [train[i] for i in epoch_order(len(train), self.seed, epoch).tolist()]
        workers = max(1, self.workers)

        def plan(position: int) -> Callable[[], Iterator[Batch]]:
            # The loader's worker ``position`` plays worker ``(start_step + position) %
            # workers``, so the first batch it delivers is step ``start_step``'s.
            worker = (start_step + position) % workers
            emitted = (start_step - worker + workers - 1) // workers
            stream = self.host.index * workers + worker
            return lambda: self._batches(order[stream::self.streams], epoch,
                                         emitted * self.local_batch,
                                         self.batches_per_worker - emitted)

        return self._load([plan(position) for position in range(workers)])

    def eval_batches(self) -> Iterator[Batch]:
        workers = max(1, self.workers)

        def plan(worker: int) -> Callable[[], Iterator[Batch]]:
            stream = self.host.index * workers + worker
            return lambda: self._eval_batches(self._val[stream::self.streams])

        return self._load([plan(worker) for worker in range(workers)])

    def _load(self, plans: List[Callable[[], Iterator[Batch]]]) -> Iterator[Batch]:
        if not self.workers:
            return plans[0]()
        return loader.load(_Streams(plans), self.workers, batch_size=None)

    def _batches(self, shards: Shards, epoch: int, skip: int, count: int) -> Iterator[Batch]:
        """``count`` batches of the shards' examples, each shard shuffled, after ``skip``."""
        examples = self.read_examples(shards, skip, shuffle=(self.seed, epoch))
        for _ in range(count):
            x, y = [], []
            for key, data, label in _take(examples, self.local_batch):
                x.append(images.train_image(data, self.image_size,
                                            images.draws(self.seed, epoch, key),
                                            self.root.join(key)))
                y.append(label)
            yield torch.stack(x), torch.tensor(y, dtype=torch.int64)

    def _eval_batches(self, shards: Shards) -> Iterator[Batch]:
        size, examples = self.local_eval_batch, self.read_examples(shards, 0, shuffle=None)
        empty = torch.zeros((0, 3, self.image_size, self.image_size), dtype=torch.uint8)
        for _ in range(self.eval_batches_per_worker):
            part = _take(examples, size)
            x = torch.stack([images.eval_image(data, self.image_size, self.root.join(key))
                             for key, data, _ in part]) if part else empty
            yield pad_batch(x, torch.tensor([label for _, _, label in part], dtype=torch.int64),
                            size)

    def read_examples(self, shards: Shards, skip: int, shuffle: Optional[Tuple[int, int]]
                  ) -> Iterator[Tuple[str, bytes, int]]:
        """(key, image bytes, label) of ``shards`` in order (each shuffled by ``shuffle``'s
        (seed, epoch) when given), after the first ``skip``; whole skipped shards are not
        read. The next shard is fetched while this one is consumed."""
        wanted = []
        for name, count in shards:
            if skip >= count:
                skip -= count
                continue
            wanted.append((name, skip, count))
            skip = 0
        fetched = _prefetched([name for name, _, _ in wanted], self._read_shard)
        for (name, skip, count), data in zip(wanted, fetched):
            samples = shard_examples.labelled(data, self.root.join(name), count)
            if shuffle is not None:
                random.Random("{}/{}/{}".format(shuffle[0], shuffle[1], name)).shuffle(samples)
            for sample in samples[skip:]:
                yield sample


    def _read_shard(self, name: str) -> bytes:
        try:
            return self.root.read_bytes(name)
        except FileNotFoundError:
            raise DataError("{} lists shard {} but there is no such file".format(
                self.root.join("index.json"), name), "copy every shard of the set, or write "
                "the shards again with python -m trainer.data.make_shards")


class _Streams(IterableDataset):
    """Worker ``i`` of a DataLoader iterates ``plans[i]()``."""

    def __init__(self, plans: List[Callable[[], Iterator[Batch]]]) -> None:
        self.plans = plans

    def __iter__(self) -> Iterator[Batch]:
        info = get_worker_info()
        return self.plans[info.id if info else 0]()


def _take(examples: Iterator, count: int) -> list:
    taken = []
    for example in examples:
        taken.append(example)
        if len(taken) == count:
            break
    return taken


def _prefetched(names: List[str], fetch: Callable[[str], bytes],
                ahead: int = SHARDS_IN_FLIGHT) -> Iterator[bytes]:
    """``fetch(name)`` of each name in order, the next ``ahead`` fetched by threads while the
    caller consumes the current one (network reads release the GIL). A fetch's exception is
    raised where its result would have been. Closing the generator early starts no more
    fetches; those under way finish in their (daemon) threads and are dropped."""

    def start(name: str) -> "queue.Queue":
        slot: "queue.Queue" = queue.Queue(maxsize=1)

        def run() -> None:
            try:
                slot.put((fetch(name), None))
            except BaseException as error:  # handed to the consumer, raised there
                slot.put((None, error))

        threading.Thread(target=run, daemon=True).start()
        return slot

    remaining = iter(names)
    pending = collections.deque(start(name) for name in itertools.islice(remaining, ahead))
    while pending:
        data, error = pending.popleft().get()
        if error is not None:
            raise error
        pending.extend(start(name) for name in itertools.islice(remaining, 1))
        yield data
