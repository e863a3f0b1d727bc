"""trainer.best_model: --keep_best's keeper: which way is best, the weights of the best
evaluation so far written with best.json, and a resumed run competing with the runs before."""

import json

import pytest
import torch

from trainer.best_model import BestModel, BestSpec, parse_best
from trainer.errors import TrainerError
from trainer.storage import open_dir


@pytest.mark.parametrize("text, spec", [
    ("", None), ("top1", BestSpec("top1", "max")), ("loss", BestSpec("loss", "min")),
    ("mae:min", BestSpec("mae", "min")), ("loss:max", BestSpec("loss", "max"))])
def test_the_name_says_which_way_unless_told(text, spec):
    assert parse_best(text) == spec


@pytest.mark.parametrize("text", ["top-1", "mae:lowest", ":min", "1abc"])
def test_anything_else_is_a_usage_error(text):
    with pytest.raises(TrainerError) as raised:
        parse_best(text)
    assert raised.value.exit_code == 64


def weights(value):
    return lambda: {"w": torch.full((2,), float(value))}


def test_only_a_better_evaluation_is_written_and_a_resumed_run_competes_with_the_earlier(
        tmp_path):
    folder = open_dir(str(tmp_path))
    keeper = BestModel(parse_best("mae:min"), folder, ["loss", "mae"])
    assert keeper.consider({"mae": 2.0}, 1, 10, weights(1), "ckpt-000000010.pt")
    assert not keeper.consider({"mae": 3.0}, 2, 20, weights(2))  # worse
    assert not keeper.consider({"mae": 2.0}, 3, 30, weights(3))  # a tie keeps the earlier
    record = json.loads((tmp_path / "best.json").read_text())
    assert record == {"metric": "mae", "mode": "min", "value": 2.0, "epoch": 1, "step": 10,
                      "checkpoint": "ckpt-000000010.pt"}
    resumed = BestModel(parse_best("mae:min"), folder, ["loss", "mae"])
    assert (resumed.value, resumed.step) == (2.0, 10)  # the run keeps that checkpoint (fit)
    assert not resumed.consider({"mae": 2.5}, 4, 40, weights(4))
    assert resumed.consider({"mae": 1.5}, 5, 50, weights(5))
    assert torch.equal(torch.load(str(tmp_path / "model-best.pt"))["w"], torch.full((2,), 5.0))
    # Another metric (or way) starts afresh: the record is not its.
    assert BestModel(parse_best("loss"), folder, ["loss"]).value is None


def test_a_process_that_writes_nothing_still_follows_the_best():
    keeper = BestModel(parse_best("top1"), None, ["top1"])
    assert keeper.consider({"top1": 0.5}, 1, 10, weights(1))
    assert not keeper.consider({"top1": 0.4}, 2, 20, weights(2))
