"""trainer.steps and the path decision in trainer.xla, on the real XLA CPU device (torch_xla
2.9, where steps can be traced into graphs): both paths compute the same numbers, the learning
rate reaches the compiled step, and neither path compiles anything after the first epoch
(learning-rate changes, the padded last evaluation batch, mid-epoch checkpoints)."""

import os

import pytest
import torch
import torch.nn.functional as F

os.environ.setdefault("PJRT_DEVICE", "CPU")

from trainer import mnist, xla  # noqa: E402
from trainer.batches import TensorSource  # noqa: E402
from trainer.config import TrainConfig  # noqa: E402
from trainer.errors import TrainerError  # noqa: E402
from trainer.optim import build_optimizer  # noqa: E402
from trainer.outputs import OutputPaths  # noqa: E402
from trainer.steps import Steps  # noqa: E402


def test_auto_compiles_where_steps_can_be_traced_and_lazy_is_always_available():
    assert xla.graph_compiler_available()
    assert xla.step_path("auto") == xla.step_path("compiled") == xla.COMPILED
    assert xla.step_path("lazy") == xla.LAZY


def test_asking_for_compiled_steps_without_a_graph_compiler_is_refused(monkeypatch):
    # torch_xla 1.x (the XRT image) has no graph bridge; it cannot be installed here, so
    # this one case stands in for it.
    monkeypatch.setattr(xla, "graph_compiler_available", lambda: False)
    assert xla.step_path("auto") == xla.LAZY
    with pytest.raises(TrainerError) as raised:
        xla.step_path("compiled")
    assert "--step_mode=compiled needs torch_xla >= 2.1" in raised.value.message
    assert raised.value.exit_code == 64


def test_unknown_step_mode_is_a_usage_error():
    with pytest.raises(TrainerError, match="--step_mode='fast' is not one of auto, compiled, "
                                           "lazy"):
        TrainConfig(fake_data=True, step_mode="fast")


def train_a_few_steps(path, warmup_epochs=1.0, steps=6):
    torch.manual_seed(0)
    dev = xla.device()
    model = mnist.MnistNet().to(dev)
    # A warmup over all the steps: the rate changes at every step.
    config = TrainConfig(fake_data=True, num_epochs=1, warmup_epochs=warmup_epochs, lr=0.1)
    optimizer, rate = build_optimizer(config, model, steps)
    runner = Steps(model, optimizer, rate, F.nll_loss, (1,), path)
    generator = torch.Generator().manual_seed(1)
    total = xla.device_number(0, dev)
    for step in range(steps):
        x = torch.randn(16, 1, 28, 28, generator=generator).to(dev)
        y = torch.randint(0, 10, (16,), generator=generator).to(dev)
        total = runner.train(step, x, y, total)
        xla.sync()
    return {name: value.cpu() for name, value in model.state_dict().items()}, total.cpu()


def test_both_paths_compute_the_same_training_with_a_changing_rate():
    lazy_state, lazy_total = train_a_few_steps(xla.LAZY)
    compiled_state, compiled_total = train_a_few_steps(xla.COMPILED)
    assert torch.allclose(lazy_total, compiled_total, rtol=1e-4)
    for name, value in lazy_state.items():
        assert torch.allclose(value.float(), compiled_state[name].float(), rtol=1e-3,
                              atol=1e-5), name
    # The schedule matters here: without the warmup the same steps end elsewhere, so a
    # compiled step that kept its first rate could not have matched.
    constant_rate = train_a_few_steps(xla.LAZY, warmup_epochs=0.0)[0]
    assert not torch.allclose(lazy_state["fc2.weight"], constant_rate["fc2.weight"],
                              rtol=1e-3, atol=1e-5)


def count_hits(path):
    torch.manual_seed(0)
    dev = xla.device()
    model = mnist.MnistNet().to(dev).eval()
    config = TrainConfig(fake_data=True, num_epochs=1)
    optimizer, rate = build_optimizer(config, model, 1)
    runner = Steps(model, optimizer, rate, F.nll_loss, (1, 3), path)
    generator = torch.Generator().manual_seed(2)
    counts = runner.zero_counts()
    for _ in range(3):
        x = torch.randn(16, 1, 28, 28, generator=generator).to(dev)
        labels = torch.randint(0, 10, (16,), generator=generator)
        labels[-5:] = -1  # a padded batch
        counts = runner.evaluate(x, labels.to(dev), counts)
    xla.sync()
    correct, seen = counts
    return [int(total.cpu()) for total in correct], int(seen.cpu())


def test_both_paths_count_the_same_hits_and_skip_padding():
    lazy = count_hits(xla.LAZY)
    assert lazy == count_hits(xla.COMPILED)
    (top1, top3), seen = lazy
    assert seen == 3 * 11 and 0 < top1 < top3 < seen


def ragged_digits(train=100, test=30):
    """Random digit-shaped data whose sizes are no multiple of the batch sizes used."""
    generator = torch.Generator().manual_seed(3)
    return TensorSource(torch.randn(train, 1, 28, 28, generator=generator),
                        torch.randint(0, 10, (train,), generator=generator),
                        torch.randn(test, 1, 28, 28, generator=generator),
                        torch.randint(0, 10, (test,), generator=generator), batch_size=12,
                        eval_batch_size=16)


@pytest.mark.parametrize("step_mode", ["compiled", "lazy"])
def test_no_graph_is_compiled_after_the_first_epoch(step_mode, tmp_path):
    # Warmup then cosine decay (a new rate every step), a dropped ragged training batch, a
    # padded evaluation batch, and checkpoints in the middle of every epoch.
    config = TrainConfig(data_dir="unused", num_epochs=3, batch_size=12, eval_batch_size=16,
                         warmup_epochs=1.0, log_steps=3, checkpoint_steps=4,
                         step_mode=step_mode)
    summary = mnist.run(config, data_override=ragged_digits(),
                        paths=OutputPaths.resolve(str(tmp_path), {}))
    assert summary["step_path"] == step_mode
    first, *later = summary["compiles_after_each_epoch"]
    assert first > 0 and later == [first, first]
