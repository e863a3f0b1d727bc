"""Host-side batch sources with fixed shapes, for any trainer.

A ``DataSource`` gives, per epoch, the training batches in a deterministic order (seed +
epoch), optionally starting part-way (resume), and the evaluation batches. The last ragged
training batch is dropped and the last evaluation batch padded, so every step has the same
shapes and the compiled graphs stay the same after the first epoch.

``batch_size`` is the *global* batch (all devices of the job). On a slice of several hosts
each host loads only its part of every global batch (``HostPart``): the same order on every
host, cut into equal consecutive pieces, so the hosts together see each example once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterator, Optional, Tuple

import torch

from trainer.errors import TrainerError

Batch = Tuple[torch.Tensor, torch.Tensor]
# Label of padding examples in evaluation batches: never predicted, never counted.
IGNORE_LABEL = -1


def epoch_order(size: int, seed: int, epoch: int) -> torch.Tensor:
    """The shuffled order of ``size`` examples in ``epoch``: the same for the same seed, so a
    resumed run sees the batches it would have seen."""
    generator = torch.Generator()
    generator.manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(size, generator=generator)


def steps_in(examples: int, batch_size: int, where: str, devices: int = 1) -> int:
    """Full global batches of ``batch_size`` (``--batch_size`` per device times ``devices``)
    in ``examples``; a set smaller than one batch is refused, naming the flag as given (a run
    of zero steps would "succeed" without training)."""
    if examples < batch_size:
        given = ("--batch_size={}".format(batch_size) if devices <= 1 else
                 "--batch_size={} x {} devices = {}".format(batch_size // devices, devices,
                                                           batch_size))
        raise TrainerError("{} is larger than the training set ({} examples in {})".format(
            given, examples, where), "lower --batch_size or add training data")
    return examples // batch_size


@dataclass(frozen=True)
class HostPart:
    """Piece ``index`` of ``count`` equal consecutive pieces of every global batch: what one
    host of a slice loads (``devices.Topology.host_part``)."""

    index: int = 0
    count: int = 1

    def of(self, global_batch: int) -> slice:
        """The positions of this host's piece within a global batch of ``global_batch``."""
        size = global_batch // self.count
        return slice(self.index * size, (self.index + 1) * size)


WHOLE = HostPart()  # one host loads every global batch whole


def host_rows(order: torch.Tensor, batch_size: int, host: HostPart, start_step: int,
              steps: int) -> torch.Tensor:
    """``host``'s examples in each of steps ``start_step .. steps - 1`` of an epoch whose
    ``order`` (``epoch_order``) is cut into global batches of ``batch_size``: int64, a row a
    step, a copy of its own (``order`` can go). As a list of Python ints the order took 36
    bytes an example and 4 s at every epoch's start for 49 M windows (100 B tokens of 2,048);
    this keeps 8 bytes an example of the host's share."""
    return order[start_step * batch_size:steps * batch_size].view(-1, batch_size)[
        :, host.of(batch_size)].clone()


def pad_batch(x: torch.Tensor, y: torch.Tensor, size: int) -> Batch:
    """Pad a short evaluation batch to ``size`` with zero images labelled IGNORE_LABEL."""
    missing = size - len(x)
    if missing <= 0:
        return x, y
    return (torch.cat([x, x.new_zeros((missing,) + tuple(x.shape[1:]))]),
            torch.cat([y, y.new_full((missing,), IGNORE_LABEL)]))


@dataclass(frozen=True)
class RunSchedule:
    """The segments a run asks its data for, in order: epochs ``0 .. epochs - 1`` of
    ``train_steps`` steps each (None: every step of the split), and after each epoch ``e``
    whose number ``e + 1`` is a multiple of ``eval_every`` (and after the last) an evaluation
    of ``eval_steps`` steps (None: all). ``epochs`` None: no end (a source used on its own)."""

    epochs: Optional[int] = None
    eval_every: int = 1
    train_steps: Optional[int] = None
    eval_steps: Optional[int] = None

    def evaluates_after(self, finished: int) -> bool:
        """Whether the run evaluates once ``finished`` epochs have trained."""
        return finished % self.eval_every == 0 or finished == self.epochs

    def trains(self, epoch: int) -> bool:
        return self.epochs is None or epoch < self.epochs


class DataSource:
    """What the training loop needs from a data set."""

    batch_size: int
    steps_per_epoch: int
    eval_steps: int
    # What the training order depends on besides the seed and the global batch, as flag
    # name -> value (checked when a run resumes); None: nothing else.
    layout: Optional[Dict[str, int]] = None
    # Whether its batches are decoded images (data workers, make_shards: the input-bound
    # advice names them) or cut from arrays in memory (MNIST).
    decodes_images = True
    # Whether those images come from make_shards' shards (where they can be made smaller
    # once, --max_shorter_side) or from class folders.
    from_shards = False

    def train_batches(self, epoch: int, start_step: int = 0) -> Iterator[Batch]:
        raise NotImplementedError

    def damaged_images(self, epoch: Optional[int] = None) -> Dict[str, int]:
        """Images skipped as damaged (``trainer.data.damage``): after 0-based epoch ``epoch``,
        or the run's (None); empty where the source decodes none."""
        return {}

    def damaged_image_policy(self, text: str) -> None:
        """``--max_bad_images`` for a source that decodes images."""

    def eval_batches(self) -> Iterator[Batch]:
        raise NotImplementedError

    def describe(self) -> str:
        """Where the data comes from, for the run's log ("" when there is nothing to say)."""
        return ""

    def identity(self) -> Optional[Dict[str, object]]:
        """What identifies the training examples (e.g. a shard set's names, counts and
        checksums), recorded in checkpoints and compared on resume: a resume on other
        examples is refused. None: nothing to check."""
        return None

    def schedule(self, run: RunSchedule) -> None:
        """What the run will ask for, told before its first request: a source that prepares
        batches ahead (``stream``) prepares those and nothing past the run's end. Requests
        outside it are still served."""

    def fixed_batch(self) -> Optional[Batch]:
        """The one batch every step holds (``--fake_data``), which the trainer places on the
        devices once; None: the batches differ, each is copied as it comes."""
        return None

    def close(self) -> None:
        """End what loads the data (data workers that live across epochs); the run calls it
        as it ends, however it ends. A later request starts them again."""


@dataclass
class TensorSource(DataSource):
    """A data set held in memory as tensors (MNIST): slicing beats a DataLoader's per-sample
    collation by far. ``augment`` is applied to each training batch on the host."""

    decodes_images = False  # its batches are cut from arrays in memory
    train_x: torch.Tensor
    train_y: torch.Tensor
    eval_x: torch.Tensor
    eval_y: torch.Tensor
    batch_size: int
    seed: int = 1
    augment: Optional[object] = None
    eval_batch_size: int = 0
    host: HostPart = WHOLE
    devices: int = 1  # the batch's: ``batch_size`` is --batch_size times this

    def __post_init__(self) -> None:
        self.eval_batch_size = self.eval_batch_size or self.batch_size
        self.steps_per_epoch = steps_in(len(self.train_x), self.batch_size, "the data dir",
                                        self.devices)
        self.eval_steps = -(-len(self.eval_x) // self.eval_batch_size)

    def train_batches(self, epoch: int, start_step: int = 0) -> Iterator[Batch]:
        order = epoch_order(len(self.train_x), self.seed, epoch)
        generator = torch.Generator()
        generator.manual_seed(self.seed * 7919 + epoch)
        for step in range(start_step, self.steps_per_epoch):
            index = order[step * self.batch_size:(step + 1) * self.batch_size]
            index = index[self.host.of(self.batch_size)]
            x = self.train_x[index]
            if self.augment is not None:
                x = self.augment(x, generator)
            yield x, self.train_y[index]

    def eval_batches(self) -> Iterator[Batch]:
        """Every evaluation example once; the last batch is padded to full size with label
        ``IGNORE_LABEL`` (not counted), so the shape never changes."""
        size, mine = self.eval_batch_size, self.host.of(self.eval_batch_size)
        for step in range(self.eval_steps):
            x, y = pad_batch(self.eval_x[step * size:(step + 1) * size],
                             self.eval_y[step * size:(step + 1) * size], size)
            yield x[mine], y[mine]


@dataclass
class FakeSource(DataSource):
    """One fixed random batch served ``steps_per_epoch`` times: measures the device, not the
    input pipeline (like the reference scripts' ``--fake_data``)."""

    shape: Tuple[int, ...]
    num_classes: int
    batch_size: int
    steps_per_epoch: int
    eval_steps: int
    # What the training order depends on besides the seed and the global batch, as flag
    # name -> value (checked when a run resumes); None: nothing else.
    layout: Optional[Dict[str, int]] = None
    # Whether its batches are decoded images (data workers, make_shards: the input-bound
    # advice names them) or cut from arrays in memory (MNIST).
    decodes_images = True
    seed: int = 1
    host: HostPart = WHOLE
    dtype: torch.dtype = torch.float32  # uint8: random bytes, as images arrive

    def __post_init__(self) -> None:
        generator = torch.Generator()
        generator.manual_seed(self.seed)
        mine = self.host.of(self.batch_size)
        shape = (self.batch_size,) + tuple(self.shape)
        x = (torch.randint(0, 256, shape, generator=generator, dtype=torch.uint8)
             if self.dtype == torch.uint8 else torch.randn(shape, generator=generator))
        self._batch = (
            x[mine],
            torch.randint(0, self.num_classes, (self.batch_size,), generator=generator)[mine])

    def train_batches(self, epoch: int, start_step: int = 0) -> Iterator[Batch]:
        for _ in range(start_step, self.steps_per_epoch):
            yield self._batch

    def schedule(self, run: RunSchedule) -> None:
        """What the run will ask for, told before its first request: a source that prepares
        batches ahead (``stream``) prepares those and nothing past the run's end. Requests
        outside it are still served."""

    def fixed_batch(self) -> Optional[Batch]:
        return self._batch

    def eval_batches(self) -> Iterator[Batch]:
        for _ in range(self.eval_steps):
            yield self._batch
