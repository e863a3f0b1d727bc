"""trainer.consolidate: the model of the newest checkpoint is model.pt's; of ``--step N`` that
checkpoint's; ``--best`` the one ``--keep_best`` kept (an ``ema_`` figure's: the averaged
weights); a buffer the model was given as -inf
(a mask) does not make its checkpoints unreadable; a job dir without checkpoints, a step it
does not hold and a ``--best`` without best.json are one line each."""

import pytest
import torch

from trainer import own_flags, own_loop
from trainer.checkpoints import CheckpointStore
from trainer.config import TrainConfig
from trainer.consolidate import main
from trainer.outputs import OutputPaths
from trainer.storage import LocalDirectory


class Masked(torch.nn.Module):
    """A linear model holding a persistent buffer of -inf (an additive mask, in its state)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(6, 3)
        self.register_buffer("mask", torch.tensor([0.0, float("-inf"), 0.0]))

    def forward(self, x):
        return self.linear(x) + self.mask.clamp(min=-1e4)


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """A run of 2 epochs of 6 steps, a checkpoint after each (steps 6 and 12), the best
    evaluation of the averaged weights kept (--keep_best=ema_loss: model-best.pt holds the
    averages)."""
    job = tmp_path_factory.mktemp("consolidate") / "job"
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 6, generator=generator)
    data = torch.utils.data.TensorDataset(x, (x[:, 0] > 0).long())
    config = TrainConfig(data_dir=own_flags.DATA_FROM, batch_size=8, num_epochs=2, lr=0.1,
                         lr_batch=0, num_workers=0, log_steps=0, job_dir=str(job), seed=1,
                         keep_best="ema_loss", ema_decay=0.5)
    own_loop.run_own(config, OutputPaths.resolve(str(job), {}), Masked(),
                     torch.utils.data.Subset(data, range(48)),
                     torch.utils.data.Subset(data, range(48, 64)), None)
    return job


def load(path):
    return torch.load(str(path), weights_only=False)


def same(found, expected):
    return found.keys() == expected.keys() and all(
        torch.equal(found[name], expected[name]) for name in found)


def test_the_newest_checkpoints_model_is_model_pt(job):
    assert main([str(job)]) == 0
    assert same(load(job / "model-step-12.pt"), load(job / "model.pt"))


def test_a_steps_model_and_the_best_kept_one(job):
    assert main([str(job), "--step", "6", "--out", "early.pt"]) == 0
    store = CheckpointStore(LocalDirectory(str(job / "checkpoints")), writes=False)
    assert same(load(job / "early.pt"), store.load(6)["model"])
    assert main([str(job), "--best", "--out", "best.pt"]) == 0
    assert same(load(job / "best.pt"), load(job / "model-best.pt"))


@pytest.mark.parametrize("args, code, text", [
    (["{empty}"], 65, "holds no checkpoint"),
    (["{job}", "--step", "5"], 65, "holds no checkpoint of step 5 (it holds 6, 12)"),
    (["{empty}", "--best"], 65, "holds no best.json"),
    (["{job}", "--out", "a/b.pt"], 64, "--out=a/b.pt is a path, not a file name"),
    (["{job}", "--step", "6", "--best"], 64, "not allowed with argument"),
])
def test_what_cannot_be_done_is_one_line(job, tmp_path, capsys, args, code, text):
    (tmp_path / "empty").mkdir()
    filled = [arg.format(job=job, empty=tmp_path / "empty") for arg in args]
    assert main(filled) == code
    assert text in capsys.readouterr().err


@pytest.mark.parametrize("written, text", [("{", "is not JSON"),
                                           ('{"metric": "loss"}', "is no record of --keep_best")])
def test_a_damaged_best_json_is_one_line(tmp_path, capsys, written, text):
    (tmp_path / "best.json").write_text(written)
    assert main([str(tmp_path), "--best"]) == 65
    assert text in capsys.readouterr().err
