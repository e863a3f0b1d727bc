"""A ``DataSource`` over the user's map-style torch Datasets (``trainer.train``).

Items are ``(input, target)`` pairs: the target a tensor or a number, the input one too, or a
tuple, list or dict of them (``model(*x)``, ``model(**x)``: ``batch_tree``); or a dict, a
Hugging Face row (``input_ids``, ``attention_mask``, ``labels`` ...), passed whole as
``model(**row)`` with its ``labels`` (or ``label``, renamed as Hugging Face's collator does)
as the target. Every leaf is batched on a new first dimension. Training batches follow
``batches.epoch_order`` cut into global batches, each host taking its piece
(``HostPart.of``), the ragged end dropped: every example once per epoch over the job, the order
a function of ``--seed`` and the epoch alone, so a resume at ``start_step`` continues at the
exact example. Batches are built by ``--num_workers`` data workers through
``trainer.data.loader.load`` (item ``i`` of its dataset is batch ``i``, collated), so an item
that cannot be batched is reported from a worker as one line (``DataError``, exit 65) naming
the set and the item's index.

Each batch is built with the host's random states (torch's generator, Python's ``random``,
numpy's global one) seeded from (seed, epoch, step) and put back afterwards: randomness in a
dataset's ``__getitem__`` (augmentation drawn from any of the three) is then the same for any
worker count, and after a resume.

Evaluation batches keep the dataset's order; the last is padded to full size with zeros (so
the shapes never change) and ``real_rows(i)`` says how many rows of evaluation batch ``i``
are examples: a prefix, which the steps cut before the loss and top-1 (``steps.Steps``).
On a slice of several hosts the hosts' pieces of a global batch need not land in order on the
mesh, so there a padded last batch is left out of the evaluation (0 real rows), with a warning
naming how many examples that leaves out.
"""

from __future__ import annotations

import contextlib
import logging
import numbers
import random
import sys
from collections.abc import Mapping
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple

import torch
from torch.utils.data import Dataset

from trainer.batch_tree import describe, flatten, unflatten
from trainer.batches import (
    WHOLE,
    Batch,
    DataSource,
    HostPart,
    epoch_order,
    host_rows,
    steps_in,
)
from trainer.errors import DataError, TrainerError

log = logging.getLogger("trainer")

# How each batch's host random state is seeded: from the run's seed, the epoch and the step.
_SEED_MIX = (1_000_003, 7919)
# Seeds are reduced into torch.manual_seed's range: the mix of a --seed up to 2**32-1
# (``config.MAX_SEED``) exceeds 2**64, which manual_seed refuses.
_SEED_RANGE = 2 ** 63


def mixed_seed(seed: int, *parts: int) -> int:
    """A seed in [0, 2**63) from the run's ``seed`` and ``parts`` (epoch, step ...): the
    same numbers give the same seed, for any --seed the flags accept."""
    value = seed
    for multiplier, part in zip(_SEED_MIX, parts):
        value = value * multiplier + part
    return value % _SEED_RANGE


def dataset_size(dataset: Any, name: str) -> int:
    """``len(dataset)`` of a map-style Dataset; anything else is a usage error (64), and an
    empty one a data error (65)."""
    if isinstance(dataset, torch.utils.data.IterableDataset):
        raise TrainerError("{} is an IterableDataset ({}): its items cannot be read by index"
                           .format(name, type(dataset).__name__),
                           "pass a map-style torch.utils.data.Dataset (__len__ and "
                           "__getitem__), e.g. TensorDataset(inputs, targets)")
    if isinstance(dataset, (tuple, list)) and dataset and all(
            isinstance(part, torch.Tensor) for part in dataset):
        # trainer.train(model, (x, y)): Keras' fit(x, y) habit. Its item 0 is x, reported as
        # "a Tensor, not an (input, target) pair" with a hint about __getitem__.
        raise TrainerError("{} is a {} of {} tensors, not a Dataset of (input, target) "
                           "items".format(name, type(dataset).__name__, len(dataset)),
                           "wrap them: torch.utils.data.TensorDataset(inputs, targets)")
    if not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
        raise TrainerError("{} is a {}, not a map-style Dataset (items by index, and a "
                           "length)".format(name, type(dataset).__name__),
                           "pass a torch.utils.data.Dataset with __len__ and __getitem__, "
                           "e.g. TensorDataset(inputs, targets)")
    try:
        size = len(dataset)
    except Exception as error:  # the user's __len__
        raise TrainerError("len({}) failed: {}: {}".format(
            name, type(error).__name__, _first_line(error)),
            "a map-style Dataset's __len__ returns its number of items")
    if size <= 0:
        raise DataError("{} is empty".format(name),
                        "give it at least one (input, target) item{}".format(
                            "" if name == "train_set" else ", or pass eval_set=None"))
    return size


def as_tensor(value: Any, what: str, where: str) -> torch.Tensor:
    """``value`` (a tensor, a number or a numpy array) as a tensor of numbers; anything else
    is a data error naming ``where`` it is (``train_set item 3``) and the part (``what``)."""
    if isinstance(value, torch.Tensor):
        tensor = value
    elif (isinstance(value, numbers.Number) and not isinstance(value, complex)) or (
            type(value).__name__ == "ndarray" and value.dtype.kind in "biuf"):  # numpy's
        try:
            tensor = torch.as_tensor(value)
        except (TypeError, ValueError, RuntimeError) as error:  # e.g. numpy's longdouble
            raise DataError("{}: its {} ({} {}) is no tensor: {}: {}".format(
                where, what, type(value).__name__, getattr(value, "dtype", ""),
                type(error).__name__, _first_line(error)),
                "inputs and targets are real numbers of a dtype torch has (float16/32/64, "
                "int8/16/32/64, uint8, bool)")
    else:
        raise DataError("{}: its {} is a {}, not a tensor or a number".format(
            where, what, type(value).__name__),
            "items are (input, target) pairs of tensors or numbers")
    if tensor.dtype.is_complex or not (tensor.dtype.is_floating_point or tensor.dtype in (
            torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)):
        raise DataError("{}: its {} has dtype {}".format(where, what, tensor.dtype),
                        "inputs and targets are real numbers (float, int or bool)")
    return tensor


# What a row's padding holds in ``labels``: the index torch's and Hugging Face's losses ignore.
IGNORED_LABEL = -100
# A Hugging Face row's target, and the name its datasets often give it (``DataCollator``
# renames it so).
LABELS, LABEL = "labels", "label"


def as_input(value: Any, what: str, where: str) -> Any:
    """An item's input: a tensor (``as_tensor``), or a tuple, list or dict of inputs (string
    keys), nested alike."""
    if isinstance(value, Mapping):  # a dict, or a Hugging Face BatchEncoding (a UserDict)
        for key in value:
            if not isinstance(key, str):
                raise DataError("{}: its {} has a key {!r}, not a name".format(
                    where, what, key), "dict inputs are passed as model(**x): name "
                    "each tensor by a string")
        # In sorted order, as ``flatten`` and the error lines list them: a Dataset whose
        # dicts come in another order each time still has one structure.
        return {key: as_input(value[key], "{}[{!r}]".format(what, key), where)
                for key in sorted(value)}
    if isinstance(value, (tuple, list)):
        parts = [as_input(part, "{}[{}]".format(what, number), where)
                 for number, part in enumerate(value)]
        return tuple(parts) if isinstance(value, tuple) else parts
    return as_tensor(value, what, where)


def read_item(dataset: Any, name: str, index: int) -> Any:
    """``dataset[index]``; a ``__getitem__`` that raises is a data error naming the item."""
    try:
        return dataset[index]
    except TrainerError:  # one of ours, already a line
        raise
    except Exception as error:  # the user's __getitem__: a line naming the item, not a trace
        raise DataError("{} item {}: __getitem__ raised {}: {}".format(
            name, index, type(error).__name__, _first_line(error)),
            "fix the Dataset's __getitem__ for that index (or its data)")


def read_items(dataset: Any, name: str, indices: Sequence[int]) -> List[Any]:
    """``dataset``'s items ``indices``: through its ``__getitems__`` where it has one (torch's
    way to read a batch's items at once, which Hugging Face's datasets and streamed token
    windows have), else one ``read_item`` each. A ``__getitems__`` that raises, or returns
    another number of items, is a data error naming the items."""
    getitems = getattr(dataset, "__getitems__", None)
    if getitems is None or len(indices) < 2:
        return [read_item(dataset, name, index) for index in indices]
    where = "{} items {}".format(name, _shown(indices))
    try:
        items = getitems(list(indices))
    except TrainerError:
        raise
    except Exception as error:  # the user's, or torch's forwarding one (Subset's)
        # Read one at a time, the line names the item that fails, if one does alone.
        for index in indices:
            read_item(dataset, name, index)
        raise DataError("{}: __getitems__ raised {}: {}".format(
            where, type(error).__name__, _first_line(error)),
            "fix the Dataset's __getitems__ for those indices (or its data)")
    if not isinstance(items, (list, tuple)) or len(items) != len(indices):
        raise DataError("{}: __getitems__ returned {} for {} indices".format(
            where, "{} items".format(len(items)) if isinstance(items, (list, tuple))
            else "a " + type(items).__name__, len(indices)),
            "return a list of the items, one for each index, in their order")
    return list(items)


def as_pair(item: Any, where: str) -> Tuple[Any, torch.Tensor]:
    """An item (or a batch a ``collate_fn`` made) as (input, target): the input a tensor or a
    tuple, list or dict of them, the target a tensor; a dict (a Hugging Face row) is the input
    whole and its ``labels`` (or ``label``) the target. Anything else is a data error naming
    ``where`` it comes from."""
    if isinstance(item, Mapping):  # a dict, or what Hugging Face's collators return
        row = as_input(item, "row", where)
        if LABEL in row and LABELS not in row:
            row[LABELS] = row.pop(LABEL)
            row = {key: row[key] for key in sorted(row)}
        if LABELS not in row or not isinstance(row[LABELS], torch.Tensor):
            raise DataError("{} is a dict without 'labels' (its keys: {})".format(
                where, ", ".join(sorted(row))), "give each row its labels (a tensor), "
                "as Hugging Face's Trainer expects, or return (input, target) pairs")
        return row, row[LABELS]
    if not isinstance(item, (tuple, list)) or len(item) != 2:
        what = ("a {} of {} parts".format(type(item).__name__, len(item))
                if isinstance(item, (tuple, list)) else "a {}".format(type(item).__name__))
        raise DataError("{} is {}, not an (input, target) pair".format(where, what),
                        "make __getitem__ (or collate_fn) return (input, target), or a dict "
                        "with 'labels' (a Hugging Face row)")
    return as_input(item[0], "input", where), as_tensor(item[1], "target", where)


def item_pair(dataset: Any, name: str, index: int) -> Tuple[Any, torch.Tensor]:
    """Item ``index`` of ``dataset`` as (input, target) (``as_pair``)."""
    return as_pair(read_item(dataset, name, index), "{} item {}".format(name, index))


class ItemShape:
    """The structure, shapes and dtypes every item of a set has: its item 0's (input, target),
    as ``batch_tree.flatten`` lists their tensors; ``rows``: whether items are dicts (Hugging
    Face rows, whose ``labels`` pad with ``IGNORED_LABEL``)."""

    first = "item 0's"  # what the others are compared with, in error lines

    def __init__(self, first: Tuple[Any, torch.Tensor]) -> None:
        tensors, self.structure = flatten(first)
        self.parts = tuple((tuple(t.shape), t.dtype) for t in tensors)
        # (tensor, tensor), the common case: checked and stacked without flattening each item.
        self.pair = all(isinstance(part, torch.Tensor) for part in first)
        self.rows = isinstance(first[0], dict) and first[0].get(LABELS) is first[1]
        self.names = _leaf_names(first)

    def check(self, pair: Tuple[Any, torch.Tensor], where: str) -> None:
        """A data error naming ``where`` unless ``pair`` has item 0's fields, shapes and
        dtypes."""
        tensors = self._tensors(pair, where)
        for what, tensor, (shape, dtype) in zip(self.names, tensors, self.parts):
            if tuple(tensor.shape) != shape or tensor.dtype != dtype:
                raise DataError(
                    "{}: its {} is {} of shape {} where item 0's is {} of shape {}".format(
                        where, what, tensor.dtype, tuple(tensor.shape), dtype, shape),
                    "every item's input (and target) must have one shape and dtype: pad or "
                    "resize them in the Dataset, or pass a collate_fn that pads each batch "
                    "(items of varying length)")

    def _tensors(self, pair: Tuple[Any, torch.Tensor], where: str) -> List[torch.Tensor]:
        """``pair``'s tensors in ``flatten``'s order; a data error unless its fields are
        those of item 0."""
        if self.pair and isinstance(pair[0], torch.Tensor):
            return list(pair)
        tensors, structure = flatten(pair)
        if structure != self.structure:
            raise DataError("{}: its fields are {} where {} are {}".format(
                where, ", ".join(_leaf_names(pair)), self.first, ", ".join(self.names)),
                "every item must have the same fields (the same keys, the same number of "
                "parts)")
        return tensors

    def stack(self, pairs: Sequence[Tuple[Any, torch.Tensor]], pad_to: int) -> Batch:
        """``pairs`` as one batch, each tensor stacked on a new first dimension, then padded
        to ``pad_to`` rows (``padded``)."""
        columns = list(zip(*(pair if self.pair else flatten(pair)[0] for pair in pairs)))
        stacked = [torch.stack(column) for column in columns] if pairs else [
            torch.zeros((0,) + shape, dtype=dtype) for shape, dtype in self.parts]
        return self.padded(stacked, pad_to)

    def padded(self, stacked: List[torch.Tensor], pad_to: int) -> Batch:
        """A batch's tensors (``flatten``'s order) padded to ``pad_to`` rows: zeros, and
        ``IGNORED_LABEL`` in a row's ``labels``; as (input, target)."""
        missing = pad_to - len(stacked[0])
        if missing > 0:
            stacked = [torch.cat([tensor, tensor.new_full((missing,) + tuple(tensor.shape[1:]),
                                                          self._padding(name))])
                       for tensor, name in zip(stacked, self.names)]
        x, y = unflatten(stacked, self.structure)
        if self.rows:  # one tensor: the row's labels are the target
            y = x[LABELS]
        return x, y

    def _padding(self, name: str) -> int:
        """What a padding row holds in the tensor ``name``: a row's labels the index the
        losses ignore (the model computes its loss on the padded batch), else 0."""
        labels = name == "target" or name == "input[{!r}]".format(LABELS)
        return IGNORED_LABEL if self.rows and labels else 0


class CollatedShape(ItemShape):
    """What every batch a ``collate_fn`` makes of a set has: the first batch's structure, dtypes
    and number of dimensions, one row per item; the sizes past the first dimension may differ
    from batch to batch (items of varying length, padded by the user). ``parts`` holds the
    first batch's shapes of one row (a batch's bytes are estimated from them)."""

    first = "the first batch's"

    def __init__(self, first: Tuple[Any, torch.Tensor]) -> None:
        super().__init__(first)
        self.pair = False  # a batch is checked as a whole: no per-item fast path
        self.parts = tuple((shape[1:], dtype) for shape, dtype in self.parts)

    def check_batch(self, pair: Tuple[Any, torch.Tensor], where: str, rows: int) -> None:
        """A data error naming ``where`` unless ``pair`` has the first batch's fields, dtypes
        and dimensions, and ``rows`` rows in each tensor."""
        tensors = self._tensors(pair, where)
        for what, tensor, (shape, dtype) in zip(self.names, tensors, self.parts):
            if tensor.dtype != dtype or tensor.dim() != len(shape) + 1:
                raise DataError(
                    "{}: its {} is {} of {} dimensions where the first batch's is {} of {}"
                    .format(where, what, tensor.dtype, tensor.dim(), dtype, len(shape) + 1),
                    "make collate_fn return each field in one dtype and number of dimensions")
            if tensor.shape[0] != rows:
                raise DataError("{}: its {} has {} rows for {} items".format(
                    where, what, tensor.shape[0], rows), "collate_fn batches every field on "
                    "its first dimension, one row per item (as default_collate stacks them)")

    def stack(self, pairs: Sequence[Tuple[Any, torch.Tensor]], pad_to: int) -> Batch:
        """No item at all (a host's piece of a short last batch): ``pad_to`` padding rows of
        the first batch's shape."""
        assert not pairs, "collated batches are padded with ``padded``"
        return self.padded([torch.zeros((0,) + shape, dtype=dtype)
                            for shape, dtype in self.parts], pad_to)


def _leaf_names(pair: Tuple[Any, Any]) -> List[str]:
    """What each tensor of ``pair`` is, in ``flatten``'s order: ``input``, ``input[0]``,
    ``input['input_ids']``, ``target``."""
    names: List[str] = []

    def walk(value: Any, path: str) -> None:
        if isinstance(value, dict):
            for key in sorted(value):  # the pytree's order for a dict: sorted keys
                walk(value[key], "{}[{!r}]".format(path, key))
        elif isinstance(value, (tuple, list)):
            for number, part in enumerate(value):
                walk(part, "{}[{}]".format(path, number))
        else:
            names.append(path)

    walk(pair[0], "input")
    walk(pair[1], "target")
    return names


@contextlib.contextmanager
def host_random_state(seed: int) -> Iterator[None]:
    """Within: torch's host generator, Python's ``random`` and numpy's global state seeded from
    ``seed``; after: each as it was. What a ``__getitem__`` draws from any of the three is
    then a function of the batch's seed alone, in whichever process builds the batch."""
    python_state = random.getstate()
    numpy_random = sys.modules.get("numpy.random")  # a Dataset that draws from it imported it
    numpy_state = numpy_random.get_state() if numpy_random is not None else None
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            random.seed(seed)
            if numpy_random is not None:
                numpy_random.seed(seed % 2 ** 32)  # numpy's seeds are 32-bit
            yield
    finally:
        random.setstate(python_state)
        if numpy_random is not None:
            numpy_random.set_state(numpy_state)


class BatchItems(Dataset):
    """Item ``i``: the examples ``indices[i]`` (a list, or a row of a tensor: ``host_rows``)
    of ``dataset`` made into one batch, padded to ``pad_to`` rows (``seeds[i]`` seeding the
    host's random states while they are read and collated): stacked, or where ``collate_fn``
    is given, what it makes of the list of items (``CollatedShape`` checks it)."""

    def __init__(self, dataset: Any, name: str, shape: ItemShape,
                 indices: Sequence[Sequence[int]], seeds: Sequence[int],
                 pad_to: int = 0, collate_fn: Optional[Callable] = None) -> None:
        self.dataset, self.name, self.shape = dataset, name, shape
        self.indices, self.seeds, self.pad_to = indices, seeds, pad_to
        self.collate_fn = collate_fn

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> Batch:
        row = self.indices[i]
        indices = row.tolist() if isinstance(row, torch.Tensor) else row
        if not indices:  # a host's piece of a short last batch may hold no example
            return self.shape.stack([], self.pad_to)
        with host_random_state(self.seeds[i]):
            if self.collate_fn is not None:
                pair = collated(self.dataset, self.name, indices, self.collate_fn)
            else:
                pairs = [as_pair(item, "{} item {}".format(self.name, index)) for index, item
                         in zip(indices, read_items(self.dataset, self.name, indices))]
        if self.collate_fn is None:
            for index, pair in zip(indices, pairs):
                self.shape.check(pair, "{} item {}".format(self.name, index))
            return self.shape.stack(pairs, self.pad_to)
        self.shape.check_batch(pair, collated_where(self.name, indices), len(indices))
        return self.shape.padded(flatten(pair)[0], self.pad_to)


def collated_where(name: str, indices: Sequence[int]) -> str:
    """How error lines name a batch ``collate_fn`` made: by the items it was made of."""
    return "{}'s collate_fn batch of items {}".format(name, _shown(indices))


def _shown(indices: Sequence[int]) -> str:
    """The first few of ``indices``, for a line naming items."""
    return ", ".join(str(index) for index in list(indices)[:4]) + (
        ", ..." if len(indices) > 4 else "")


def collated(dataset: Any, name: str, indices: Sequence[int],
             collate_fn: Callable) -> Tuple[Any, torch.Tensor]:
    """``collate_fn`` of items ``indices`` of ``dataset``, as (input, target) (``as_pair``);
    a ``collate_fn`` that raises is a data error naming the items."""
    items = read_items(dataset, name, indices)
    where = collated_where(name, indices)
    try:
        batch = collate_fn(items)
    except TrainerError:
        raise
    except Exception as error:  # the user's: a line naming the items, not a trace
        raise DataError("{}: collate_fn raised {}: {}".format(where, type(error).__name__,
                                                               _first_line(error)),
                        "fix collate_fn for those items (it takes a list of the Dataset's "
                        "items and returns one batch)")
    return as_pair(batch, where)


def first_batch(dataset: Any, name: str, count: int = 2,
                collate_fn: Optional[Callable] = None) -> Tuple[ItemShape, Batch]:
    """The shape of ``dataset``'s items (or of ``collate_fn``'s batches) and a batch of its
    first ``count`` (checked here, in the training process, before anything starts)."""
    indices = list(range(min(count, len(dataset))))
    if collate_fn is not None:
        with host_random_state(0):
            pair = collated(dataset, name, indices, collate_fn)
        shape: ItemShape = CollatedShape(pair)
        shape.check_batch(pair, collated_where(name, indices), len(indices))
    else:
        shape = ItemShape(item_pair(dataset, name, 0))
    batch = BatchItems(dataset, name, shape, [indices], [0], collate_fn=collate_fn)[0]
    return shape, batch


class DatasetSource(DataSource):
    """``train_set`` and ``eval_set`` (None: no evaluation) in global batches of
    ``batch_size`` (evaluation: ``eval_batch_size``), this host's piece of each, built by
    ``workers`` data workers (0: in the training process, on the device loader's thread)."""

    decodes_images = False  # the input-bound advice: batches are the user's items

    def __init__(self, train_set: Any, eval_set: Optional[Any], batch_size: int,
                 eval_batch_size: int, seed: int, host: HostPart = WHOLE,
                 workers: int = 0, devices: int = 1,
                 collate_fn: Optional[Callable] = None) -> None:
        self.train_set, self.eval_set = train_set, eval_set
        self.collate_fn = collate_fn
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size
        self.seed, self.host, self.workers = seed, host, workers
        self.train_size = dataset_size(train_set, "train_set")
        self.eval_size = 0 if eval_set is None else dataset_size(eval_set, "eval_set")
        # The items first: a set of wrong items is wrong at any batch size.
        self.train_shape, self.sample = first_batch(train_set, "train_set",
                                                    collate_fn=collate_fn)
        # eval_set's first items too: checked through the model and loss before training
        # (``own_loop.first_step_check``), not after the first epoch.
        self.eval_shape, self.eval_sample = (first_batch(eval_set, "eval_set",
                                                         collate_fn=collate_fn)
                                             if eval_set is not None else (None, None))
        # Batches of a collate_fn's may change shape: each new one is logged (it compiles).
        self._shapes = {name: BatchShapes(name, host.count) for name in ("train_set",
                                                                          "eval_set")
                        } if collate_fn is not None else {}
        self.steps_per_epoch = steps_in(self.train_size, batch_size, "train_set", devices)
        self.eval_steps = -(-self.eval_size // eval_batch_size)
        self.check_shared_memory()
        self.layout = {"train_set_examples": self.train_size}
        self._open: List[Any] = []
        last = self.eval_size - (self.eval_steps - 1) * eval_batch_size if self.eval_steps else 0
        self._last_rows = last if last == eval_batch_size or host.count == 1 else 0
        if last != self._last_rows:
            log.warning("evaluation: the last %d examples of eval_set are left out on a slice "
                        "of %d hosts (a padded batch there cannot be cut to its examples); an "
                        "eval_set of a multiple of %d examples is evaluated whole", last,
                        host.count, eval_batch_size)

    def batch_bytes(self) -> int:
        """The bytes of this host's largest batch (training or evaluation, inputs and
        targets): what one batch takes in flight from a data worker."""
        pieces = [(self.train_shape, self.host.of(self.batch_size))]
        if self.eval_shape is not None:
            pieces.append((self.eval_shape, self.host.of(self.eval_batch_size)))
        return max((rows.stop - rows.start) * sum(
            torch.Size(shape).numel() * torch.tensor([], dtype=dtype).element_size()
            for shape, dtype in item.parts) for item, rows in pieces)

    def check_shared_memory(self) -> None:
        """torch's DataLoader hands the workers' batches over through /dev/shm, about two a
        worker in flight (its prefetch): too small a /dev/shm (Docker's 64 MB) stops the run
        here, with one line (exit 78), not with a worker's bus error minutes in."""
        from trainer.data import shared_memory

        per_worker = 2 * self.batch_bytes()
        shared_memory.check(self.workers * per_worker, self.workers, per_worker)

    def describe(self) -> str:
        left_out = self.train_size % self.batch_size  # the ragged end, another each epoch
        return "train_set: {} examples{}{}; {} data worker{}".format(
            self.train_size, " ({} left out each epoch: {} % the global batch {}, the ragged "
            "end, another part of the set each epoch)".format(
                left_out, self.train_size, self.batch_size) if left_out else "",
            ", eval_set: {}".format(self.eval_size) if self.eval_set is not None
            else " (no eval_set)", self.workers, "" if self.workers == 1 else "s")

    def real_rows(self, batch: int) -> int:
        """How many rows of evaluation batch ``batch`` (global) are examples: a prefix."""
        return self._last_rows if batch == self.eval_steps - 1 else self.eval_batch_size

    def train_batches(self, epoch: int, start_step: int = 0) -> Iterator[Batch]:
        indices = host_rows(epoch_order(self.train_size, self.seed, epoch), self.batch_size,
                            self.host, start_step, self.steps_per_epoch)
        steps = range(start_step, self.steps_per_epoch)
        seeds = [mixed_seed(self.seed, epoch, step) for step in steps]
        return self._load(BatchItems(self.train_set, "train_set", self.train_shape, indices,
                                     seeds, collate_fn=self.collate_fn),
                          epoch * _SEED_MIX[0] + start_step)

    def eval_batches(self) -> Iterator[Batch]:
        if self.eval_set is None:
            return iter(())
        size, mine = self.eval_batch_size, self.host.of(self.eval_batch_size)
        indices = [list(range(step * size, min(self.eval_size, (step + 1) * size)))
                   for step in range(self.eval_steps)]
        # Each host's piece of the padded global batch: its real examples, then zeros.
        pieces = [whole[mine] for whole in indices]
        seeds = [mixed_seed(self.seed, -1 - step) for step in range(self.eval_steps)]
        return self._load(BatchItems(self.eval_set, "eval_set", self.eval_shape, pieces,
                                     seeds, pad_to=mine.stop - mine.start,
                                     collate_fn=self.collate_fn), -1)

    def _load(self, items: BatchItems, stream: int) -> Iterator[Batch]:
        from trainer.data.loader import load

        generator = torch.Generator()  # the workers' seeds: never from the global generator
        generator.manual_seed(mixed_seed(self.seed, stream))
        batches = load(items, self.workers, batch_size=None, shuffle=False,
                       generator=generator)
        self._open.append(batches)
        return self._each(batches, self._shapes.get(items.name))

    def _each(self, batches: Iterator[Batch],
              shapes: Optional["BatchShapes"] = None) -> Iterator[Batch]:
        try:
            for batch in batches:
                if shapes is not None:
                    shapes.see(batch)
                yield batch
        finally:
            self._close(batches)

    def _close(self, batches: Any) -> None:
        if batches in self._open:
            self._open.remove(batches)
        close = getattr(batches, "close", None)
        if close is not None:
            close()

    def close(self) -> None:
        for batches in list(self._open):
            self._close(batches)


class BatchShapes:
    """The batch shapes a set's ``collate_fn`` has made so far: each new one is logged (the
    steps compile once more for it: seconds on the CPU, up to minutes for a large model on a
    TPU), and past ``MANY`` one warning names the cost and the fix. ``hosts`` > 1: each host
    collates its own piece of a step's batch, and the pieces must have one shape to form the
    batch, so a second shape is a data error (a hang in the devices' transfer otherwise)."""

    MANY = 8

    def __init__(self, name: str, hosts: int = 1) -> None:
        self.name, self.hosts = name, hosts
        self.seen: set = set()

    def see(self, batch: Batch) -> None:
        tensors = flatten(batch[0])[0]
        shape = tuple(tuple(tensor.shape) for tensor in tensors)
        if shape in self.seen:
            return
        if self.seen and self.hosts > 1:
            raise DataError("{}: collate_fn made a batch of another shape ({}) on a slice of "
                            "{} hosts, where each host collates its own piece of a step and "
                            "the pieces must have one shape".format(
                                self.name, describe(batch[0]), self.hosts),
                            "pad to one fixed length in collate_fn on several hosts")
        self.seen.add(shape)
        log.info("%s: batch shape %d, %s: the steps compile for it once", self.name,
                 len(self.seen), describe(batch[0]))
        if len(self.seen) == self.MANY + 1:
            log.warning("%s: collate_fn has made %d batch shapes, each compiled once: past a "
                        "few, compiling costs more than it saves; pad to a few fixed lengths "
                        "(buckets, e.g. multiples of 64 tokens) in collate_fn", self.name,
                        len(self.seen))


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else repr(error)
