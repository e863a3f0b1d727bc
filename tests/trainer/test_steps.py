"""trainer.steps and the path decision in trainer.xla, on the real XLA CPU device (torch_xla
2.9, where steps can be traced into graphs): both paths compute the same numbers, the learning
rate reaches the compiled step, and neither path compiles anything after the first epoch
(learning-rate changes, the padded last evaluation batch, mid-epoch checkpoints)."""

import os

import pytest
import torch
import torch.nn.functional as F

os.environ.setdefault("PJRT_DEVICE", "CPU")

from agreement import (  # noqa: E402
    DTYPE,
    RELATIVE,
    assert_same_training,
    assert_training_differs,
    host_state,
)
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
    """``steps`` float64 training steps on ``path``: (start state, end state, loss total)."""
    torch.manual_seed(0)
    dev = xla.device()
    model = mnist.MnistNet().to(DTYPE).to(dev)
    start = host_state(model)
    # A warmup over all the steps: the rate changes at every step.
    config = TrainConfig(fake_data=True, num_epochs=1, warmup_epochs=warmup_epochs, lr=0.1)
    optimizer, rate = build_optimizer(config, model, steps)
    runner = Steps(model, optimizer, rate, F.nll_loss, (1,), path)
    generator = torch.Generator().manual_seed(1)
    total = xla.device_number(0, dev, DTYPE)
    for step in range(steps):
        x = torch.randn(16, 1, 28, 28, generator=generator, dtype=DTYPE).to(dev)
        y = torch.randint(0, 10, (16,), generator=generator).to(dev)
        total = runner.train(step, x, y, total)
        xla.sync()
    return start, host_state(model), total.cpu()


@pytest.mark.numeric
def test_both_paths_compute_the_same_training_with_a_changing_rate():
    start, lazy, lazy_total = train_a_few_steps(xla.LAZY)
    _, compiled, compiled_total = train_a_few_steps(xla.COMPILED)
    assert_same_training(compiled, lazy, start)
    # The loss total: 6 losses of about 2.3, each computed with the same float64 weights up
    # to the rate's float32 rounding (agreement.RELATIVE of a step's change, or less).
    assert abs(float(lazy_total) - float(compiled_total)) <= RELATIVE * float(lazy_total)
    # The schedule matters here: without the warmup the same steps end elsewhere, so a
    # compiled step that kept its first rate could not have matched.
    constant_rate = train_a_few_steps(xla.LAZY, warmup_epochs=0.0)[1]
    assert_training_differs(constant_rate, lazy, start, "fc2.weight")


def evaluation_batches():
    """3 float64 batches of 16 with 5 padding labels (-1) each."""
    generator = torch.Generator().manual_seed(2)
    data = []
    for _ in range(3):
        x = torch.randn(16, 1, 28, 28, generator=generator, dtype=DTYPE)
        labels = torch.randint(0, 10, (16,), generator=generator)
        labels[-5:] = -1
        data.append((x, labels))
    return data


def evaluation_model(dev):
    torch.manual_seed(0)
    return mnist.MnistNet().to(DTYPE).to(dev).eval()


def count_hits(path):
    """Top-1 and top-3 hits and examples seen, on ``path``."""
    dev = xla.device()
    model = evaluation_model(dev)
    config = TrainConfig(fake_data=True, num_epochs=1)
    optimizer, rate = build_optimizer(config, model, 1)
    runner = Steps(model, optimizer, rate, F.nll_loss, (1, 3), path)
    counts = runner.zero_counts()
    for x, labels in evaluation_batches():
        counts = runner.evaluate(x.to(dev), labels.to(dev), counts)
    xla.sync()
    correct, seen = counts
    return [int(total.cpu()) for total in correct], int(seen.cpu())


@pytest.mark.numeric
def test_both_paths_count_the_same_hits_and_skip_padding():
    # Equal counts are the right demand only if no example's rank 1 to 4 logits are closer
    # than the paths' float64 rounding (~1e-15 relative, see agreement): checked on the host.
    with torch.no_grad():
        logits = torch.cat([evaluation_model("cpu")(x) for x, _ in evaluation_batches()])
    ranked = logits.sort(dim=1, descending=True).values
    assert (ranked[:, :3] - ranked[:, 1:4]).min() > 1e-9
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


def one_step_loss(path, precision):
    """The loss of one float32 training step of a fixed MnistNet on a fixed batch, and the
    dtypes of the model's parameters after it."""
    torch.manual_seed(0)
    dev = xla.device()
    model = mnist.MnistNet().to(dev)
    config = TrainConfig(fake_data=True, num_epochs=1, lr=0.1)
    optimizer, rate = build_optimizer(config, model, 1)
    runner = Steps(model, optimizer, rate, F.nll_loss, (1,), path, precision)
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(16, 1, 28, 28, generator=generator).to(dev)
    y = torch.randint(0, 10, (16,), generator=generator).to(dev)
    total = runner.train(0, x, y, xla.device_number(0, dev, torch.float32))
    xla.sync()
    return float(total.cpu()), {parameter.dtype for parameter in model.parameters()}


@pytest.mark.parametrize("path", [xla.LAZY, xla.COMPILED])
def test_bf16_runs_the_forward_pass_in_bfloat16_and_keeps_float32_weights(path):
    fp32, fp32_types = one_step_loss(path, "fp32")
    bf16, bf16_types = one_step_loss(path, "bf16")
    assert fp32_types == bf16_types == {torch.float32}
    # Autocast rounds each layer's inputs and weights to bfloat16 (8 significant bits,
    # relative error <= 2^-9), so the loss moves: it is not float32's. How far, at most: a
    # sum of n rounded products is off by sqrt(n) * 2^-9 relative (n <= 320 in MnistNet:
    # 3.5 %), four layers add up to 14 % of the logits, which are below 1 in size at this
    # initialisation (0.53 measured, centred), and the NLL moves by at most twice the largest
    # logit's change: 0.28 of a loss of about 2.3, 12 %. Bound: 15 %. What it catches: a
    # loss left in float32 (equal) or broken by a narrower type (float16 overflow, NaN).
    assert bf16 != fp32
    assert abs(bf16 - fp32) <= 0.15 * abs(fp32)


def test_unknown_precision_is_a_usage_error():
    with pytest.raises(TrainerError, match="--precision='fp16' is not one of fp32, bf16"):
        TrainConfig(fake_data=True, precision="fp16")


@pytest.mark.parametrize("path", [xla.LAZY, xla.COMPILED])
def test_an_evaluation_fetches_its_counts_in_one_transfer(path):
    # One ``.item()`` per count waited for a device round trip each (3 here: examples seen,
    # top-1, top-3), on every host at every evaluation.
    import torch_xla.debug.metrics as met

    from trainer.loop import evaluate

    dev = xla.device()
    model = evaluation_model(dev)
    optimizer, rate = build_optimizer(TrainConfig(fake_data=True, num_epochs=1), model, 1)
    runner = Steps(model, optimizer, rate, F.nll_loss, (1, 3), path)
    batches = [(x.to(dev), labels.to(dev)) for x, labels in evaluation_batches()]
    xla.sync()

    def transfers():
        data = met.metric_data("TransferFromDeviceTime")
        return data[0] if data else 0

    before = transfers()
    accuracy = evaluate(runner, batches)
    assert transfers() - before == 1
    (top1, top3), seen = count_hits(path)  # the same model's counts, fetched one by one
    assert (accuracy["top1"], accuracy["top3"]) == (top1 / seen, top3 / seen)
    assert 0 < top1 < top3 < seen
