"""``trainer.dataset_source`` with a ``collate_fn`` (items of varying length, padded by the
user): every example once an epoch in batches whose shapes follow the items, the same with data
workers and after a resume, the evaluation's last batch padded to full size (labels -100 in
rows) and cut by ``real_rows``; each new shape logged, many shapes warned of once; a collate_fn
that fails or returns what cannot be a batch is one line naming the items, also from a data
worker."""

import collections
import logging
import re

import pytest
import torch

from trainer.batches import HostPart
from trainer.dataset_source import BatchShapes, DatasetSource
from trainer.errors import DataError

VOCABULARY = 11


class Sentences(torch.utils.data.Dataset):
    """Hugging Face style rows of varying length: ``input_ids`` of 2 to 7 tokens (item i's
    first token is i, so a batch says which items it holds) and a ``label``."""

    def __init__(self, count, seed=0):
        generator = torch.Generator().manual_seed(seed)
        lengths = torch.randint(2, 8, (count,), generator=generator).tolist()
        self.ids = [torch.cat([torch.tensor([index]),
                               torch.randint(1, VOCABULARY, (length - 1,), generator=generator)])
                    for index, length in enumerate(lengths)]

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, index):
        return {"input_ids": self.ids[index], "label": index % 3}


def pad_to_longest(rows):
    """A collate_fn as Hugging Face's ``DataCollatorWithPadding`` pads: the batch's ids to
    its longest with 0, an attention mask, the labels stacked."""
    longest = max(len(row["input_ids"]) for row in rows)

    def padded(tensor):
        return torch.cat([tensor, tensor.new_zeros(longest - len(tensor))])

    return {"input_ids": torch.stack([padded(row["input_ids"]) for row in rows]),
            "attention_mask": torch.stack([padded(torch.ones_like(row["input_ids"]))
                                           for row in rows]),
            "labels": torch.tensor([row["label"] for row in rows])}


@pytest.mark.parametrize("workers", [0, 2])
def test_collated_batches_hold_each_example_once_at_the_shape_of_their_items(workers):
    data = Sentences(22)
    source = DatasetSource(data, Sentences(11), 4, 4, seed=3, workers=workers,
                           collate_fn=pad_to_longest)
    batches = list(source.train_batches(0))
    resumed = list(source.train_batches(0, start_step=2))
    evaluation = list(source.eval_batches())
    source.close()
    assert len(batches) == source.steps_per_epoch == 5  # 22 // 4: 2 left out
    firsts = [int(first) for x, _ in batches for first in x["input_ids"][:, 0]]
    assert len(set(firsts)) == 20  # each example once
    for x, y in batches:  # each batch as long as its longest item, labels its target
        longest = max(len(data.ids[first]) for first in x["input_ids"][:, 0].tolist())
        assert x["input_ids"].shape[1] == longest and x["labels"] is y
        assert torch.equal(x["attention_mask"].sum(1), torch.tensor(
            [len(data.ids[first]) for first in x["input_ids"][:, 0].tolist()]))
    assert all(torch.equal(a[0]["input_ids"], b[0]["input_ids"])
               for a, b in zip(batches[2:], resumed))
    # 11 evaluation rows in batches of 4: the last holds 3 examples and one padding row,
    # its labels -100 (what the losses ignore), its ids and mask 0.
    assert [len(y) for _, y in evaluation] == [4, 4, 4]
    assert [source.real_rows(i) for i in range(3)] == [4, 4, 3]
    last_x, last_y = evaluation[-1]
    assert last_y.tolist()[-1] == -100 and int(last_x["attention_mask"][-1].sum()) == 0


def test_a_new_batch_shape_is_logged_once_and_many_are_warned_of_once(caplog):
    shapes = BatchShapes("train_set")
    with caplog.at_level(logging.INFO, logger="trainer"):
        for length in [3, 3, 4] + list(range(5, 14)):
            shapes.see(({"input_ids": torch.zeros(2, length)}, torch.zeros(2)))
    logged = [record.getMessage() for record in caplog.records
              if record.levelno == logging.INFO]
    assert sum("batch shape" in line for line in logged) == 11  # 3 once, then each new one
    assert "train_set: batch shape 2, {input_ids: torch.float32 (2, 4)}" in logged[1]
    [warning] = [record.getMessage() for record in caplog.records
                 if record.levelno == logging.WARNING]
    assert "collate_fn has made 9 batch shapes" in warning and "buckets" in warning


def short_ids(rows):
    batch = pad_to_longest(rows)
    batch["labels"] = batch["labels"][:-1]
    return batch


def ints_then_floats(rows):
    batch = pad_to_longest(rows)
    if len(batch["input_ids"][0]) == 0 or int(batch["input_ids"][0, 0]) >= 4:
        batch["input_ids"] = batch["input_ids"].float()
    return batch


def failing(rows):
    if any(int(row["input_ids"][0]) == 5 for row in rows):
        raise KeyError("text")
    return pad_to_longest(rows)


@pytest.mark.parametrize("collate_fn, text", [
    (failing, "train_set's collate_fn batch of items {}: collate_fn raised KeyError: 'text'"),
    (short_ids, "train_set's collate_fn batch of items 0, 1: its input['labels'] has 1 rows "
                "for 2 items"),
    (lambda rows: [row["input_ids"] for row in rows] + [None],
     "train_set's collate_fn batch of items 0, 1 is a list of 3 parts, not an (input, "
     "target) pair"),
    (ints_then_floats, "train_set's collate_fn batch of items {}: its input['input_ids'] is "
                       "torch.float32 of 2 dimensions where the first batch's is torch.int64 "
                       "of 2"),
])
@pytest.mark.parametrize("workers", [0, 1])
def test_a_collate_fn_that_cannot_make_a_batch_is_one_line_naming_the_items(collate_fn, text,
                                                                            workers):
    """Found on the first items before training, or in an epoch's batch (from a data worker
    alike: the error pickles whole)."""
    with pytest.raises(DataError) as raised:
        source = DatasetSource(Sentences(16), None, 4, 4, seed=0, workers=workers,
                               collate_fn=collate_fn)
        try:
            list(source.train_batches(0))
        finally:
            source.close()
    pattern = re.escape(text).replace(re.escape("{}"), r"[0-9, .]+")
    assert re.fullmatch(pattern, raised.value.message), raised.value.message
    assert raised.value.exit_code == 65


def test_on_a_slice_of_several_hosts_a_second_batch_shape_is_one_line():
    """Each host collates its piece of a step: pieces of different shapes cannot form the
    step's batch, so there collate_fn must pad to one length (here host 0 of 2, injected)."""
    source = DatasetSource(Sentences(32), None, 8, 8, seed=0, host=HostPart(0, 2),
                           collate_fn=pad_to_longest)
    with pytest.raises(DataError, match=r"train_set: collate_fn made a batch of another shape "
                                        r"\(\{attention_mask: torch.int64 \(4, \d\), "
                                        r".* on a slice of 2 hosts"):
        list(source.train_batches(0))
    source.close()


def test_a_hugging_face_collators_batch_encoding_is_a_batch_of_rows():
    """Hugging Face's collators return a BatchEncoding, a UserDict, not a dict."""
    source = DatasetSource(Sentences(16), None, 4, 4, seed=0,
                           collate_fn=lambda rows: collections.UserDict(pad_to_longest(rows)))
    x, y = next(iter(source.train_batches(0)))
    source.close()
    assert isinstance(x, dict) and sorted(x) == ["attention_mask", "input_ids", "labels"]
    assert x["labels"] is y


class Squares(torch.utils.data.Dataset):
    """Item i: (i, i * i); with ``__getitems__`` (torch's batched read, which Hugging Face's
    datasets have), each batch read in one call, recorded; ``answer`` changes what it
    returns."""

    def __init__(self, answer=None):
        self.calls, self.answer = [], answer

    def __len__(self):
        return 32

    def __getitem__(self, index):
        return torch.tensor([float(index)]), torch.tensor(index * index)

    def __getitems__(self, indices):
        self.calls.append(list(indices))
        if self.answer is not None:
            return self.answer(indices)
        return [self[index] for index in indices]


def test_a_datasets_getitems_reads_each_batch_in_one_call():
    dataset = Squares()
    source = DatasetSource(dataset, None, 8, 8, seed=3)
    try:
        batches = list(source.train_batches(0))
    finally:
        source.close()
    read = [call for call in dataset.calls if len(call) == 8]
    assert len(read) == 4 and sorted(sum(read, [])) == list(range(32))
    for (x, y), indices in zip(batches, read):
        assert x.flatten().tolist() == indices and y.tolist() == [i * i for i in indices]


@pytest.mark.parametrize("answer, text", [
    (lambda indices: 1 / 0, "__getitems__ raised ZeroDivisionError: division by zero"),
    (lambda indices: [(torch.zeros(1), torch.tensor(0))], "__getitems__ returned 1 items for "
                                                          "8 indices"),
    (lambda indices: None, "__getitems__ returned a NoneType for 8 indices")])
def test_a_getitems_that_fails_or_returns_another_count_is_one_line_naming_the_items(
        answer, text):
    source = DatasetSource(Squares(), None, 8, 8, seed=3)
    source.train_set.answer = answer
    with pytest.raises(DataError) as raised:
        next(source.train_batches(0))
    source.close()
    assert re.fullmatch(r"train_set items \d+, \d+, \d+, \d+, \.\.\.: " + re.escape(text),
                        raised.value.message), raised.value.message


def test_an_item_that_fails_inside_a_forwarding_getitems_is_named_alone():
    """torch's Subset forwards __getitems__ to item reads: one item that fails is named by
    its own index, as without __getitems__."""
    class Broken(torch.utils.data.Dataset):
        def __len__(self):
            return 32

        def __getitem__(self, index):
            if index == 13:
                raise ValueError("bad row")
            return torch.tensor([float(index)]), torch.tensor(index)

    subset = torch.utils.data.Subset(Broken(), list(range(32)))
    assert hasattr(subset, "__getitems__")
    source = DatasetSource(subset, None, 32, 32, seed=3)
    with pytest.raises(DataError) as raised:
        next(source.train_batches(0))
    source.close()
    assert raised.value.message == "train_set item 13: __getitem__ raised ValueError: bad row"
