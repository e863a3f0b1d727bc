"""What a slice will do with a shard set, before you pay for it: ``python -m trainer.data.plan
--data_dir=DIR_OR_GS --hosts=16 --devices_per_host=4 --batch_size=128``.

Without ``--data_dir`` it prints only the data workers a host gets and the memory they take,
for an ImageNet-like shard set: ``python -m trainer.data.plan --host_cores=180
--host_memory_gb=720 --devices_per_host=8`` (a v6e host).

Reads only the index (local or ``gs://``) and prints, for that slice: steps per epoch and the
share of the training set an epoch covers, evaluation steps and padding, the runs, ranged
reads and bytes of each data worker per epoch, the bytes read per epoch against the split's,
and the memory each host needs for data (RAM, and the part of it in ``/dev/shm``). The
ImageNet trainer logs the same lines at start (``ShardSource``): both call ``make_plan`` and
``plan_lines``, which enumerate what ``trainer.data.epoch_order`` tells the reader to read.

Memory per host (the trainer's own model and libraries come on top; ``bench/data.py``
measures the totals):

- each data worker holds at most ``RUNS_AHEAD + 1`` runs' encoded bytes (the run it decodes,
  unpacked, and the runs fetched ahead; a run is one work unit of the stream, whole pieces of
  one step's local batch) plus one piece;
- the workers decode straight into a ring of step buffers in shared memory (``/dev/shm``,
  ``trainer.data.step_ring``), allocated once when they start: ``ring_batches`` local
  batches (``ring_slots`` mixing groups: those the trainer's side and the device loader's
  ``LOADER_HELD_BATCHES`` may hold, and those the workers build ahead meanwhile), the same
  across an epoch's end and an evaluation (sized by the larger local batch); a consumer
  that holds more batches than that (not the trainer) gets the rest through memory of the
  workers' own, as before the ring, which this does not count; without workers the trainer
  decodes one unit at a time and holds a group and the device loader's batches;
- each worker process holds about ``WORKER_PROCESS_BYTES`` of its own besides (measured), and
  up to ``WORKER_DECODE_BYTES`` more while it decodes an image at the workers' decode budget
  (``trainer.data.jpeg_limits``: a file past it is a damaged example, never more memory);
  without workers the trainer's process is the one decoder.

Exit codes: 0 printed; 64 bad option; 65 no usable index; 74 the index cannot be read.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from trainer.data import epoch_order
from trainer.data.jpeg_limits import DECODE_BUDGET
from trainer.data.shard_index import Shard, ShardIndex
from trainer.data.shard_reads import RUNS_AHEAD
from trainer.device_prefetch import LOADER_HELD_BATCHES
from trainer.errors import EX_USAGE, DataError, TrainerError

# The DataLoader's prefetch_factor: work units each worker may have built (or be building) and
# not yet handed over. An original step is at most one unit per worker (``epoch_order.units``),
# so the W * PREFETCH_BATCHES units in flight are at least PREFETCH_BATCHES whole steps: the
# trainer takes a mixing group's MIXING_STEPS original steps before the group's first step
# trains, and one step more keeps every worker building meanwhile, so that in steady state the
# next group is ready when a group's last step has trained.
PREFETCH_BATCHES = epoch_order.MIXING_STEPS + 1
# What a data worker process holds of its own besides the runs it reads: decoder buffers and
# the pages it copies from the trainer it was forked from. Measured by bench/data.py (245 to
# 248 MB at 224 px, peak over an epoch and its evaluation, 4 runs; 182 MB over one epoch before
# the stream), rounded up: an estimate for the host's total, not a limit.
WORKER_PROCESS_BYTES = 260 * 10 ** 6
# What one decoder may take beyond that for one image: the decode budget every image is held to
# (libjpeg's ``max_memory_to_use``, the progressive coefficient estimate, Pillow's pixel limit).
# ImageNet's images need a few MB; a 100-megapixel progressive one 286 MiB. Counted for every
# decoder at once, as the bound the worker count is planned from must be: a bucket whose large
# images all meet in one step must not overrun the host.
WORKER_DECODE_BYTES = DECODE_BUDGET
# What the trainer process itself holds on the host (torch, the XLA runtime, the model and its
# optimizer's host copies, the device loader's staging): an estimate with headroom for sizing
# the workers, not a limit (a CPU step's process peaks at about 0.8 GB, docs/benchmarks.md).
TRAINER_PROCESS_BYTES = 4 * 10 ** 9
# An example of an ImageNet-like shard set: ImageNet's training JPEGs average about 108 KB,
# and make_shards adds tar headers and a label (what ``--data_dir`` replaces by its own mean).
IMAGENET_EXAMPLE_BYTES = 110 * 10 ** 3
CHANNELS = 3
# CPU per training image, in ms, measured on one 2-core machine (docs/benchmarks.md, "The
# trainer process at a v6e host's rate"): what ``carry_line`` turns into images/s. The trainer
# process's side of the input (the stream's hand-over of each step from the step ring, its
# leases, the epoch loop; its step cut into 16 work units) at a per-host batch of 512, 0.0038
# and 0.0045 ms in two checkouts of the same code (rounded up here):
# bench/trainer_ceiling.py, the host placement, without the copy to the device (torch_xla's,
# measured apart there). A data worker's decode, augmentation and evaluation share at batch
# 512: bench/feed_cpu.py (2.68 ms).
TRAINER_MS_PER_IMAGE = 0.004
WORKER_MS_PER_IMAGE = 2.7


@dataclass(frozen=True)
class SliceShape:
    """The slice and the loader settings a plan is for; batches are global (all devices)."""

    hosts: int
    devices: int
    batch: int
    eval_batch: int
    workers: int
    image_size: int


@dataclass(frozen=True)
class WorkerLoad:
    """What the busiest data worker of any host reads in one epoch, and the largest run."""

    runs: int
    reads: int
    bytes: int
    largest_run: int


@dataclass(frozen=True)
class Plan:
    shape: SliceShape
    train_examples: int
    train_shards: int
    train_size: int  # bytes of the split's shard files
    steps_per_epoch: int
    read_per_epoch: int  # bytes every host and worker together read in one epoch
    worker: WorkerLoad
    val_examples: int
    eval_steps: int
    eval_padding: int
    largest_eval_run: int

    @property
    def covered(self) -> int:
        return self.steps_per_epoch * self.shape.batch

    @property
    def batch_bytes(self) -> int:
        return batch_bytes(self.shape)

    @property
    def worker_ram(self) -> int:
        """Encoded bytes one data worker (or the trainer, without workers) holds at most."""
        return (RUNS_AHEAD + 1) * max(self.worker.largest_run, self.largest_eval_run)

    @property
    def unit_bytes(self) -> int:
        return unit_bytes(self.shape)

    @property
    def shared_memory(self) -> int:
        return shared_memory(self.shape)

    @property
    def decoded_bytes(self) -> int:
        return decoded_bytes(self.shape)

    @property
    def host_ram(self) -> int:
        """RAM the data takes on one host: the runs the workers hold and the decoded batches
        in flight (``/dev/shm`` is RAM too)."""
        return max(1, self.shape.workers) * self.worker_ram + self.decoded_bytes

    @property
    def host_total(self) -> int:
        """``host_ram``, the worker processes' own memory (an estimate) and the decode budget
        of each decoder (the workers, or the trainer without them)."""
        return (self.host_ram + self.shape.workers * WORKER_PROCESS_BYTES
                + max(1, self.shape.workers) * WORKER_DECODE_BYTES)


# The memory arithmetic needs only the shape, not the index: ``python -m jobspec check`` sizes a
# GKE pod's /dev/shm with it (this module imports no torch).
def batch_bytes(shape: SliceShape) -> int:
    """One decoded local batch, the larger of training and evaluation (uint8 images and
    int64 labels)."""
    local = max(shape.batch, shape.eval_batch) // shape.hosts
    return local * (CHANNELS * shape.image_size ** 2 + 8)


def unit_bytes(shape: SliceShape) -> int:
    """One decoded work unit at most: ``epoch_order.parts_of`` cuts a step of ``L`` rows into
    ``min(workers, pieces)`` units, each a single piece (a part of one block, at most
    ``BLOCK_EXAMPLES`` rows) or fewer than ``L / workers`` rows and one piece more."""
    local = max(shape.batch, shape.eval_batch) // shape.hosts
    rows = min(local, -(-local // max(1, shape.workers)) + epoch_order.BLOCK_EXAMPLES)
    return rows * (CHANNELS * shape.image_size ** 2 + 8)


def held_batches() -> int:
    """Decoded local batches the trainer's side holds besides the units in flight: a mixing
    group's original steps being put together and those the device loader holds."""
    return epoch_order.MIXING_STEPS + LOADER_HELD_BATCHES


def ring_slots(group: int) -> int:
    """Slots of the step ring (``trainer.data.step_ring``) for mixing groups of ``group``
    steps: the groups the trainer's side may hold at once (the device loader's
    ``LOADER_HELD_BATCHES`` and the batch just handed out are consecutive steps, so span at
    most ``ceil(LOADER_HELD_BATCHES / group) + 1`` groups, the one being handed out among
    them) and the groups the workers build ahead meanwhile (``PREFETCH_BATCHES`` original
    steps: the next group and a step more), so that in steady state no worker waits."""
    return (-(-LOADER_HELD_BATCHES // group) + 1) + -(-PREFETCH_BATCHES // group)


def ring_batches() -> int:
    """Local batches in the step ring of shards' mixing groups (the most any source's ring
    has: a class-folder tree's groups of one step need 15 instead of 24)."""
    return ring_slots(epoch_order.MIXING_STEPS) * epoch_order.MIXING_STEPS


def shared_memory(shape: SliceShape) -> int:
    """``/dev/shm`` a host's decoded data needs (none without worker processes), at any
    step and across epoch and evaluation boundaries alike (``batch_bytes`` is the larger
    segment's): the step ring, allocated once when the workers start, whatever their
    number (the workers hand over only notices of what they wrote)."""
    if not shape.workers:
        return 0
    return ring_batches() * batch_bytes(shape)


def decoded_bytes(shape: SliceShape) -> int:
    """All decoded data alive on a host: ``shared_memory``; without workers, the one unit
    the trainer builds and ``held_batches``, in its own memory."""
    if not shape.workers:
        return unit_bytes(shape) + held_batches() * batch_bytes(shape)
    return shared_memory(shape)


def data_memory(shape: SliceShape, example_bytes: float) -> Tuple[int, int]:
    """(fixed, per worker): the bytes a host's data and processes take for ``shape`` with
    any number ``W`` of workers, ``fixed + W * per_worker``, where examples average
    ``example_bytes`` encoded. Fixed: the trainer process's own (``TRAINER_PROCESS_BYTES``),
    the step ring (``ring_batches`` local batches, whatever ``W``) and the encoded runs that
    make up ``RUNS_AHEAD + 1`` local batches. Each worker adds its process
    (``WORKER_PROCESS_BYTES``), the decode budget (``WORKER_DECODE_BYTES``) and, since a
    unit is at most ``ceil(L / W) + BLOCK_EXAMPLES`` rows of a local batch of ``L``,
    ``RUNS_AHEAD + 1`` times ``BLOCK_EXAMPLES + 1`` examples more.
    ``trainer.data.workers.choose`` sizes the default worker count with it."""
    local = max(shape.batch, shape.eval_batch) // shape.hosts
    held = RUNS_AHEAD + 1
    fixed = (TRAINER_PROCESS_BYTES + ring_batches() * batch_bytes(shape)
             + int(held * local * example_bytes))
    runs = int(held * (epoch_order.BLOCK_EXAMPLES + 1) * example_bytes)
    per_worker = WORKER_PROCESS_BYTES + WORKER_DECODE_BYTES + runs
    return fixed, per_worker


def make_plan(index: ShardIndex, shape: SliceShape, seed: int = 0, epoch: int = 0) -> Plan:
    """The plan of ``epoch`` (its figures vary little between epochs) for ``shape``."""
    train, val = index.entries("train"), index.entries("val")
    cut = epoch_order.Cut(index.examples("train"), shape.batch, shape.hosts)
    order = epoch_order.train_order([shard.count for shard in train], seed, epoch)
    loads = [_load(train, order, cut, host, shape.workers, position)
             for host in range(shape.hosts) for position in range(max(1, shape.workers))]
    busiest = WorkerLoad(max(load.runs for load in loads), max(load.reads for load in loads),
                         max(load.bytes for load in loads),
                         max(load.largest_run for load in loads))
    eval_cut = epoch_order.Cut(index.examples("val"), shape.eval_batch, shape.hosts, True)
    eval_order = epoch_order.eval_order([shard.count for shard in val])
    largest_eval = max(_load(val, eval_order, eval_cut, host, shape.workers).largest_run
                       for host in range(shape.hosts)) if eval_cut.steps else 0
    return Plan(shape, cut.examples, len(train), index.size("train"), cut.steps,
                sum(load.bytes for load in loads), busiest, eval_cut.examples, eval_cut.steps,
                eval_cut.steps * eval_cut.batch - eval_cut.examples, largest_eval)


def _load(shards: Sequence[Shard], order: epoch_order.ExampleOrder, cut: epoch_order.Cut,
          host: int, workers: int, position: Optional[int] = None) -> WorkerLoad:
    """What data worker ``position`` of ``workers`` on host ``host`` reads of one epoch (None:
    all of them together): the stream (``trainer.data.stream``) deals the work units of the
    epoch's steps to the workers in turn; where the deal starts moves from epoch to epoch,
    by one unit at most for a worker's count."""
    runs = reads = total = largest = 0
    every = epoch_order.units(order, cut, host, 0, max(1, workers))
    if position is not None:
        every = itertools.islice(every, position, None, max(1, workers))
    for _, _, _, pieces in every:
        size = sum(shards[shard].byte_range(first, end)[1] for shard, first, end in pieces)
        runs, reads, total, largest = runs + 1, reads + len(pieces), total + size, max(largest,
                                                                                      size)
    return WorkerLoad(runs, reads, total, largest)


def plan_lines(plan: Plan) -> List[str]:
    """The plan as log lines."""
    shape = plan.shape
    left = plan.train_examples - plan.covered
    per_host = shape.devices // shape.hosts
    return [
        "slice: {} host{} x {} device{}, global batch {} ({} per device), {} data worker{} "
        "per host".format(shape.hosts, _s(shape.hosts), per_host, _s(per_host), shape.batch,
                          shape.batch // shape.devices, shape.workers, _s(shape.workers)),
        "training: {:,} examples in {:,} shards ({}); {:,} steps per epoch cover {:.2%} of "
        "them, each once{}".format(
            plan.train_examples, plan.train_shards, _size(plan.train_size),
            plan.steps_per_epoch, plan.covered / plan.train_examples,
            " ({:,} left out, fewer than one global batch, other ones each epoch)".format(left)
            if left else ""),
        "evaluation: {:,} examples in global batches of {}: {:,} steps, {:,} padding (in the "
        "last step)".format(plan.val_examples, shape.eval_batch, plan.eval_steps,
                            plan.eval_padding),
        "per data worker per epoch, at most: {:,} runs (work units), {:,} ranged reads, {}; a "
        "run is up to {}".format(plan.worker.runs, plan.worker.reads, _size(plan.worker.bytes),
                             _size(plan.worker.largest_run)),
        "read per epoch by all hosts: {} of {} of training shards ({:.3f}x)".format(
            _size(plan.read_per_epoch), _size(plan.train_size),
            plan.read_per_epoch / plan.train_size),
        "data memory per host: {} RAM ({} x {} runs of up to {} encoded; decoded, {}); "
        "/dev/shm needs {} of it; with the worker processes' own (about {} each) and up to {} "
        "for each decoder's image (the decode budget) about {} in all".format(
            _size(plan.host_ram), max(1, shape.workers), RUNS_AHEAD + 1,
            _size(max(plan.worker.largest_run, plan.largest_eval_run)),
            "a step ring of {} local batches of {} ({} slots of {} steps)".format(
                ring_batches(), _size(plan.batch_bytes),
                ring_slots(epoch_order.MIXING_STEPS), epoch_order.MIXING_STEPS)
            if shape.workers else "1 unit of up to {} and {} local batches of {} held: a "
            "mixing group of {} steps and the device loader's {}".format(
                _size(plan.unit_bytes), held_batches(), _size(plan.batch_bytes),
                epoch_order.MIXING_STEPS, LOADER_HELD_BATCHES),
            _size(plan.shared_memory), _size(WORKER_PROCESS_BYTES), _size(WORKER_DECODE_BYTES),
            _size(plan.host_total)),
        carry_line(shape.workers),
    ]


def carry_line(workers: int) -> str:
    """What one core of the trainer process hands over next to what ``workers`` data workers
    supply, in training images/s, from the CPU each spends per image
    (``TRAINER_MS_PER_IMAGE``, ``WORKER_MS_PER_IMAGE``): which of the two bounds the host."""
    carried = 1000 / TRAINER_MS_PER_IMAGE
    supplied = max(1, workers) * 1000 / WORKER_MS_PER_IMAGE
    decoders = ("the {} data worker{} supply".format(workers, _s(workers)) if workers
                else "its own decoding (no data workers) supplies")
    return ("images/s per host: the trainer process's side of the input carries about {:,.0f} "
            "on its core ({} ms of CPU an image, the copy to the devices apart); {} about "
            "{:,.0f} ({} ms an image each): the {} bound{} the host (measured on one machine: "
            "bench/trainer_ceiling.py, bench/feed_cpu.py)".format(
                carried, TRAINER_MS_PER_IMAGE, decoders, supplied, WORKER_MS_PER_IMAGE,
                "decoders" if supplied <= carried else "trainer's side",
                "" if supplied <= carried else "s"))


def _s(count: int) -> str:
    return "" if count == 1 else "s"


def _size(count: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if count >= scale:
            return "{:.{}f} {}".format(count / scale, 1 if count < 100 * scale else 0, unit)
    return "{} bytes".format(count)


def shape_from_flags(hosts: int, devices_per_host: int, batch_size: int, eval_batch_size: int,
                     workers: int, image_size: int) -> SliceShape:
    """The shape that the trainer's flags (per-device batches) give on ``hosts`` hosts; a
    TrainerError (64) names a value that cannot be."""
    for name, value, least in (("--hosts", hosts, 1), ("--devices_per_host", devices_per_host, 1),
                               ("--batch_size", batch_size, 1),
                               ("--eval_batch_size", eval_batch_size, 0),
                               ("--num_workers", workers, 0), ("--image_size", image_size, 1)):
        if value < least:
            raise TrainerError("{}={} must be at least {}".format(name, value, least),
                               "e.g. --hosts=16 --devices_per_host=4 --batch_size=128",
                               EX_USAGE)
    devices = hosts * devices_per_host
    return SliceShape(hosts, devices, batch_size * devices,
                      (eval_batch_size or batch_size) * devices, workers, image_size)


def main(argv: Optional[List[str]] = None) -> int:
    from trainer import storage
    from trainer.console import run_tool
    from trainer.data.shard_index import load_index
    from trainer.data.workers import choose
    from trainer.host_resources import Host

    parser = argparse.ArgumentParser(prog="python -m trainer.data.plan",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--data_dir", default="",
                        help="the shard set, DIR or gs://... (default none: only the data "
                             "workers and their memory, for an ImageNet-like shard set)")
    parser.add_argument("--hosts", type=int, default=1, help="hosts of the slice (default 1)")
    parser.add_argument("--devices_per_host", type=int, default=4,
                        help="TPU chips per host (default 4: v5e-4t; 8 for v5e-8t)")
    parser.add_argument("--batch_size", type=int, default=128,
                        help="training batch per device, as the trainer's flag (default 128)")
    parser.add_argument("--eval_batch_size", type=int, default=0,
                        help="evaluation batch per device (default 0: --batch_size)")
    parser.add_argument("--num_workers", type=int, default=-1,
                        help="data workers per host (default -1: the trainer's choice on a "
                             "host of --host_cores cores and --host_memory_gb)")
    parser.add_argument("--host_cores", type=int, default=112,
                        help="cores of one host, for --num_workers=-1 (default 112: a v5e "
                             "host; 180 for v6e, 224 for v5e-8t)")
    parser.add_argument("--host_memory_gb", type=float, default=0,
                        help="memory of one host in GB, for --num_workers=-1 (default 0: not "
                             "limited by memory)")
    parser.add_argument("--image_size", type=int, default=224)
    parser.add_argument("--seed", type=int, default=1, help="the trainer's --seed (default 1)")

    def run(args: argparse.Namespace) -> None:
        if args.num_workers < -1 or args.host_cores < 1 or args.host_memory_gb < 0:
            raise TrainerError("--num_workers must be -1 or more, --host_cores positive and "
                               "--host_memory_gb 0 or more",
                               "e.g. --num_workers=-1 --host_cores=180 --host_memory_gb=720",
                               EX_USAGE)
        shape = shape_from_flags(args.hosts, args.devices_per_host, args.batch_size,
                                 args.eval_batch_size, max(0, args.num_workers),
                                 args.image_size)
        index = load_index(storage.open_dir(args.data_dir)) if args.data_dir else None
        if index is not None and (not index.examples("train") or not index.examples("val")):
            raise DataError("{} has {} train and {} val examples: nothing to plan".format(
                args.data_dir, index.examples("train"), index.examples("val")),
                "point --data_dir at a complete shard set")
        example_bytes = (index.size("train") / index.examples("train") if index is not None
                         else IMAGENET_EXAMPLE_BYTES)
        host = Host(args.host_cores, int(args.host_memory_gb * 1e9),
                    "{} cores (--host_cores), {}".format(
                        args.host_cores, "{:g} GB (--host_memory_gb)".format(
                            args.host_memory_gb) if args.host_memory_gb else "memory not "
                        "given (--host_memory_gb)"))
        choice = choose(host, data_memory(shape, example_bytes))
        workers = choice.workers if args.num_workers < 0 else args.num_workers
        shape = shape_from_flags(args.hosts, args.devices_per_host, args.batch_size,
                                 args.eval_batch_size, workers, args.image_size)
        if args.num_workers < 0:
            print(choice.line())
        if index is None:
            for line in memory_lines(shape, example_bytes):
                print(line)
            return
        if index.examples("train") < shape.batch:
            raise TrainerError("a global batch of {} is larger than the training set ({} "
                               "examples)".format(shape.batch, index.examples("train")),
                               "lower --batch_size, or plan fewer hosts", EX_USAGE)
        for line in plan_lines(make_plan(index, shape, args.seed)):
            print(line)

    return run_tool(parser, argv, run)


def memory_lines(shape: SliceShape, example_bytes: float) -> List[str]:
    """Without an index: what ``shape``'s workers take on a host, for shard examples of
    ``example_bytes`` on average."""
    fixed, per_worker = data_memory(shape, example_bytes)
    ring = ring_batches() * batch_bytes(shape) if shape.workers else 0
    return [
        "slice: {} host{} x {} device{}, global batch {} ({} per device), {} data worker{} "
        "per host, an ImageNet-like shard set ({} an example)".format(
            shape.hosts, _s(shape.hosts), shape.devices // shape.hosts,
            _s(shape.devices // shape.hosts), shape.batch, shape.batch // shape.devices,
            shape.workers, _s(shape.workers), _size(int(example_bytes))),
        "memory per host: about {} in all: each data worker about {} ({} its own, up to {} "
        "decoding one image, {} of encoded runs); the step ring {} in /dev/shm ({} local "
        "batches of {}); the trainer process about {} (estimate); runs of {} local "
        "batches {}".format(
            _size(fixed + shape.workers * per_worker if shape.workers
                  else fixed - ring + WORKER_DECODE_BYTES),
            _size(per_worker), _size(WORKER_PROCESS_BYTES), _size(WORKER_DECODE_BYTES),
            _size(per_worker - WORKER_PROCESS_BYTES - WORKER_DECODE_BYTES), _size(ring),
            ring_batches(),
            _size(batch_bytes(shape)), _size(TRAINER_PROCESS_BYTES), RUNS_AHEAD + 1,
            _size(fixed - TRAINER_PROCESS_BYTES - ring_batches() * batch_bytes(shape))),
        carry_line(shape.workers),
    ]


if __name__ == "__main__":
    sys.exit(main())
