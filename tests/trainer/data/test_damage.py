"""trainer.data.damage: a damaged example stands in for by another of its batch, drawn by the
seed (the same on a resume, whatever the worker count), counted, named a few times an epoch,
and the run stopped past --max_bad_images."""

import logging

import pytest
import torch

from trainer.batches import IGNORE_LABEL
from trainer.data import damage
from trainer.errors import DataError, TrainerError


def batch(masked=(), rows=8):
    x = torch.arange(rows, dtype=torch.uint8).view(rows, 1, 1, 1).repeat(1, 3, 4, 4)
    y = torch.arange(rows, dtype=torch.int64) + 100
    for row in masked:
        x[row].zero_()
        y[row] = IGNORE_LABEL
    return x, y


def test_each_masked_row_takes_a_copy_of_another_row_drawn_by_the_seed():
    x, y = batch(masked=(2, 5))
    assert damage.stand_in(x, y, seed=1, epoch=0, step=3) == 2
    assert (y >= 0).all()
    for row in (2, 5):
        source = int(y[row]) - 100
        assert source not in (2, 5) and torch.equal(x[row], x[source])
    # The same batch again (a resumed run, any worker count) gets the same stand-ins.
    again_x, again_y = batch(masked=(2, 5))
    damage.stand_in(again_x, again_y, seed=1, epoch=0, step=3)
    assert torch.equal(again_x, x) and torch.equal(again_y, y)
    # The draw depends on the seed, epoch and step: over a few, not always the same row.
    drawn = set()
    for step in range(20):
        other_x, other_y = batch(masked=(2,))
        damage.stand_in(other_x, other_y, seed=1, epoch=0, step=step)
        drawn.add(int(other_y[2]))
    assert len(drawn) > 1


def test_a_batch_without_damage_is_left_alone():
    x, y = batch()
    assert damage.stand_in(x, y, 0, 0, 0) == 0
    assert torch.equal(y, batch()[1])


def test_a_batch_with_nothing_left_is_a_data_error():
    x, y = batch(masked=range(4), rows=4)
    with pytest.raises(DataError, match="every example of training step 8 of epoch 2"):
        damage.stand_in(x, y, 0, 1, 7)


@pytest.mark.parametrize("text, examples, allowed", [
    ("0.1%", 1_281_167, 1281), ("0.1%", 192, damage.LEAST_ALLOWED), ("50", 10 ** 6, 50),
    ("0", 10, 0), ("5%", 1000, 50)])
def test_max_bad_images_is_a_count_or_a_share_with_a_floor(text, examples, allowed):
    assert damage.parse_policy(text).allowed(examples) == allowed


@pytest.mark.parametrize("text", ["x", "-1", "150%", "%", "1.5", ""])
def test_a_max_bad_images_that_is_neither_is_a_usage_error(text):
    with pytest.raises(TrainerError) as raised:
        damage.parse_policy(text)
    assert raised.value.exit_code == 64 and "--max_bad_images" in raised.value.message


def test_the_ledger_names_five_an_epoch_counts_them_all_and_stops_past_the_policy(caplog):
    ledger = damage.DamageLedger(damage.parse_policy("7"))
    names = [("s.tar#k{}".format(i), "Premature end of JPEG file") for i in range(7)]
    with caplog.at_level(logging.WARNING, logger="trainer"):
        ledger.named("train", 0, names)
    lines = [record.getMessage() for record in caplog.records]
    assert lines[:5] == ["skipped a damaged image (epoch 1): s.tar#k{}: Premature end of JPEG "
                         "file".format(i) for i in range(5)]
    assert lines[5].startswith("more damaged images in epoch 1: counted, not named")
    assert len(lines) == 6
    ledger.counted("train", 0, 7, 1000)
    assert ledger.figures(0) == {"train_damaged_images": 7, "eval_damaged_images": 0}
    with pytest.raises(DataError) as raised:
        ledger.counted("train", 0, 1, 1000)
    assert raised.value.exit_code == 65
    assert raised.value.message == ("8 damaged images in epoch 1 on this host, more than "
                                    "--max_bad_images=7 allows (7 of 1000): first s.tar#k0, "
                                    "s.tar#k1, s.tar#k2")


def test_an_evaluation_counts_afresh_and_the_run_total_adds_the_epochs():
    ledger = damage.DamageLedger()
    ledger.counted("train", 0, 2, 1000)
    ledger.counted("train", 1, 3, 1000)
    ledger.evaluating(2)
    ledger.counted("eval", 2, 1, 100)
    ledger.evaluating(2)  # the same evaluation again (a resumed run): not counted twice
    ledger.counted("eval", 2, 1, 100)
    assert ledger.figures(1) == {"train_damaged_images": 3, "eval_damaged_images": 1}
    assert ledger.figures() == {"train_damaged_images": 5, "eval_damaged_images": 1}
