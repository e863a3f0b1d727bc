"""trainer.batch_tree: a batch's input as a tensor, a tuple or a dict (model(x), model(*x),
model(**x)), a model's outputs as a tensor, a tuple, a dict or a Hugging Face ModelOutput."""

import collections

import pytest
import torch

from trainer import batch_tree
from trainer.steps import cut_rows


class ModelOutput(collections.OrderedDict):
    """As ``transformers.utils.ModelOutput``: entries are attributes too."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name)


def test_the_inputs_type_says_how_the_model_is_called():
    seen = []

    def model(*args, **kwargs):
        seen.append((len(args), sorted(kwargs)))

    a, b = torch.zeros(2), torch.ones(2)
    batch_tree.call_model(model, a)
    batch_tree.call_model(model, (a, b))
    batch_tree.call_model(model, [a, b])
    batch_tree.call_model(model, {"input_ids": a, "attention_mask": b})
    assert seen == [(1, []), (2, []), (2, []), (0, ["attention_mask", "input_ids"])]


class CachingModel(torch.nn.Module):
    """As a Hugging Face model's forward: ``use_cache`` among its parameters."""

    def forward(self, input_ids, use_cache=None):
        return use_cache


class PlainModel(torch.nn.Module):
    def forward(self, input_ids, **kwargs):
        return kwargs.get("use_cache", "not passed")


@pytest.mark.parametrize("model, inputs, expected", [
    (CachingModel(), {"input_ids": torch.zeros(2)}, False),
    (CachingModel(), {"input_ids": torch.zeros(2), "use_cache": True}, True),  # the row's say
    (CachingModel(), (torch.zeros(2),), None),  # positional: the model's own default
    (PlainModel(), {"input_ids": torch.zeros(2)}, "not passed"),
])
def test_a_models_cache_is_off_for_dict_rows_unless_the_row_asks(model, inputs, expected):
    assert batch_tree.call_model(model, inputs) == expected
    args, kwargs = batch_tree.arguments(model, inputs)
    assert model(*args, **kwargs) == expected


@pytest.mark.parametrize("outputs, expected", [
    (torch.ones(2, 3), "tensor"), ((torch.ones(2, 3), torch.zeros(2, 3)), "tensor"),
    ([torch.ones(2, 3)], "tensor"), ({"logits": torch.ones(2, 3)}, "tensor"),
    (ModelOutput(loss=torch.zeros(()), logits=torch.ones(2, 3)), "tensor"),
    ({"hidden": torch.ones(2, 3)}, None), ((), None), ("text", None)])
def test_the_scores_accuracy_is_counted_on(outputs, expected):
    found = batch_tree.logits_of(outputs)
    assert (found is None) if expected is None else torch.equal(found, torch.ones(2, 3))


def test_the_models_own_loss_is_read_from_a_model_output_or_a_dict():
    loss = torch.tensor(0.5)
    assert batch_tree.output_loss(ModelOutput(loss=loss, logits=torch.ones(2))) is loss
    assert batch_tree.output_loss({"loss": loss}) is loss
    with pytest.raises(ValueError, match="the model's outputs hold no loss \\(a Tensor"):
        batch_tree.output_loss(torch.ones(2))


def test_an_input_flattens_to_tensors_and_back_and_describes_itself():
    inputs = {"ids": torch.zeros(2, 4, dtype=torch.int64),
              "extra": (torch.ones(2), [torch.ones(2, 1)])}
    tensors, structure = batch_tree.flatten(inputs)
    assert len(tensors) == 3
    rebuilt = batch_tree.unflatten(tensors, structure)
    assert rebuilt.keys() == inputs.keys() and rebuilt["ids"] is inputs["ids"]
    assert batch_tree.describe(torch.zeros(2, 6)) == "torch.float32 of shape (2, 6)"
    assert batch_tree.describe(inputs) == ("{ids: torch.int64 (2, 4), extra: (torch.float32 "
                                           "(2,), (torch.float32 (2, 1)))}")


def test_cutting_a_model_output_to_its_real_rows_keeps_its_type_and_attributes():
    """The evaluation's last batch is cut to its examples: a ModelOutput was a leaf to torch's
    pytree and went uncut (8 scores against 5 labels)."""
    outputs = ModelOutput(loss=torch.tensor(1.0), logits=torch.arange(8.0).view(8, 1))
    cut = cut_rows(outputs, 8, 5)
    assert type(cut) is ModelOutput and cut.logits.shape == (5, 1) and cut.loss.dim() == 0
    assert outputs.logits.shape == (8, 1)  # the original as it was
    Pair = collections.namedtuple("Pair", "scores aux")
    pair = cut_rows(Pair(torch.zeros(8, 2), torch.zeros(3)), 8, 5)
    assert type(pair) is Pair and pair.scores.shape == (5, 2) and pair.aux.shape == (3,)


def test_a_micro_batch_takes_the_same_slice_of_each_devices_rows():
    """--grad_accum_steps on 2 devices: rows 0-5 are device 0's, 6-11 device 1's; micro-batch
    1 of 3 is rows 2-3 of each, so no row crosses devices, and every row is in one."""
    x = {"ids": torch.arange(12).reshape(12, 1), "mask": torch.arange(12) * 10}
    parts = [batch_tree.micro_batch(x, part, 3, groups=2) for part in range(3)]
    assert parts[1]["ids"].flatten().tolist() == [2, 3, 8, 9]
    assert parts[1]["mask"].tolist() == [20, 30, 80, 90]
    assert sorted(torch.cat([part["ids"] for part in parts]).flatten().tolist()) == list(
        range(12))
    assert torch.equal(batch_tree.micro_batch(torch.arange(6), 0, 1), torch.arange(6))
    with pytest.raises(RuntimeError, match="10 rows cannot be cut into 3 micro-batches"):
        batch_tree.micro_batch(torch.zeros(10), 0, 3)
