"""Everyday models trained as their authors meant (``trainer.train``'s run, in this process,
on the XLA CPU device): a frozen parameter never moves on either step path and optimizer,
tied weights stay one tensor through training and ``model.pt``, a buffer given as ``-inf`` (an
additive causal mask) is no divergence, and an accuracy is reported only where it means what
its name says (top-1 of 2 or more classes, top-5 of more than 5, a binary classifier's
accuracy from its one logit)."""

import pytest
import torch

from trainer import own_flags, own_loop
from trainer.config import TrainConfig
from trainer.errors import DataError
from trainer.outputs import OutputPaths
from trainer.own_loop import accuracy_kind

FEATURES, CLASSES = 6, 3


def pairs(count, seed=0, classes=CLASSES):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(count, FEATURES, generator=generator)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 1).long() * (classes - 2)
    return torch.utils.data.TensorDataset(x, y)


def train(model, job, loss_fn=None, train_set=None, eval_set=None, **flags):
    """The run ``trainer.train`` makes of ``model``: its summary (``job``: the job dir)."""
    settings = dict(data_dir=own_flags.DATA_FROM, batch_size=8, num_epochs=2, lr=0.5,
                    lr_batch=0, warmup_epochs=0, num_workers=0, log_steps=0,
                    job_dir=str(job), seed=1)
    settings.update(flags)
    config = TrainConfig(**settings)
    return own_loop.run_own(config, OutputPaths.resolve(config.job_dir, {}), model,
                            train_set or pairs(48), eval_set or pairs(16, seed=1), loss_fn)


class FrozenBackbone(torch.nn.Module):
    """A pretrained layer frozen by the user, as fine-tuning does, then a head."""

    def __init__(self):
        super().__init__()
        self.backbone = torch.nn.Linear(FEATURES, 8)
        self.head = torch.nn.Linear(8, CLASSES)
        self.backbone.requires_grad_(False)

    def forward(self, x):
        return self.head(torch.relu(self.backbone(x)))


@pytest.mark.parametrize("step_mode", ["compiled", "lazy"])
@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_a_frozen_layer_never_moves_and_gets_no_optimizer_state(tmp_path, step_mode, optimizer):
    """It moved by up to 0.195 in one epoch on the compiled step, and AdamW's compiled step
    ended in a KeyError (its groups leave frozen parameters out)."""
    torch.manual_seed(0)
    model = FrozenBackbone()
    frozen = {name: p.detach().clone() for name, p in model.backbone.named_parameters()}
    head = model.head.weight.detach().clone()
    train(model, tmp_path / "job", step_mode=step_mode, optimizer=optimizer,
          weight_decay=0.1)
    for name, parameter in model.backbone.named_parameters():
        assert torch.equal(parameter.detach().cpu(), frozen[name]), name
        assert not parameter.requires_grad
    assert not torch.equal(model.head.weight.detach().cpu(), head)  # the head trained
    saved = torch.load(str(tmp_path / "job" / "model.pt"), weights_only=False)
    assert torch.equal(saved["backbone.weight"], frozen["weight"])
    checkpoint = torch.load(str(tmp_path / "job" / "checkpoints" / "ckpt-000000012.pt"),
                            weights_only=False)
    # Optimizer state for the head's weight and bias only.
    assert len(checkpoint["optimizer"]["state"]) == 2


class TiedEmbeddings(torch.nn.Module):
    """Input and output projections sharing one weight (GPT-2's tied embeddings)."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Linear(FEATURES, FEATURES, bias=False)
        self.unembed = torch.nn.Linear(FEATURES, FEATURES, bias=False)
        self.unembed.weight = self.embed.weight
        self.head = torch.nn.Linear(FEATURES, CLASSES)

    def forward(self, x):
        return self.head(torch.tanh(self.unembed(torch.tanh(self.embed(x)))))


@pytest.mark.parametrize("step_mode", ["compiled", "lazy"])
def test_tied_weights_stay_one_tensor_through_training_and_model_pt(tmp_path, step_mode):
    """``model.to(xla)`` made two parameters of the one (torch swaps a parameter in place only
    between compatible tensors): they trained apart and ``model.pt`` held two matrices."""
    torch.manual_seed(0)
    model = TiedEmbeddings()
    before = model.embed.weight.detach().clone()
    train(model, tmp_path / "job", step_mode=step_mode)
    assert model.unembed.weight is model.embed.weight
    assert not torch.equal(model.embed.weight.detach().cpu(), before)  # it trained
    assert len(list(model.parameters())) == 3
    saved = torch.load(str(tmp_path / "job" / "model.pt"), weights_only=False)
    assert torch.equal(saved["embed.weight"], saved["unembed.weight"])


class CausalMask(torch.nn.Module):
    """Attention over a sequence of features with an additive causal mask, a persistent buffer
    of ``-inf`` above the diagonal."""

    def __init__(self):
        super().__init__()
        self.register_buffer("mask", torch.full((FEATURES, FEATURES), float("-inf")).triu(1))
        self.value = torch.nn.Linear(1, 1)
        self.head = torch.nn.Linear(FEATURES, CLASSES)

    def forward(self, x):
        scores = x.unsqueeze(2) * x.unsqueeze(1) + self.mask  # N x T x T
        mixed = torch.softmax(scores, dim=-1) @ self.value(x.unsqueeze(2))
        return self.head(mixed.squeeze(2))


def test_a_buffer_given_as_minus_inf_is_no_divergence_and_the_run_resumes(tmp_path):
    """The mask stopped the run at its first checkpoint with exit 65 and a hint to lower
    --lr; without a job dir the run trained and then threw the model away."""
    torch.manual_seed(0)
    summary = train(CausalMask(), tmp_path / "job")
    assert summary["global_step"] == 12
    saved = torch.load(str(tmp_path / "job" / "model.pt"), weights_only=False)
    assert torch.equal(saved["mask"], CausalMask().mask)
    resumed = train(CausalMask(), tmp_path / "job", num_epochs=3)  # from the checkpoint
    assert resumed["global_step"] == 18
    with pytest.raises(DataError) as raised:  # a buffer turned inf in training still stops
        train(OverflowingStatistic(), tmp_path / "diverging")
    assert "running holds nan or inf" in raised.value.message


class OverflowingStatistic(CausalMask):
    """A statistic kept in a buffer that overflows in training (as batch norm's can)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("running", torch.zeros(1))

    def forward(self, x):
        outputs = super().forward(x)
        if self.training:
            self.running.copy_(outputs.detach().abs().sum().reshape(1) * float("inf"))
        return outputs


def test_a_one_logit_binary_classifier_reports_its_accuracy_not_the_share_of_label_0(
        tmp_path):
    """Its top-1 was the share of label 0 (35.2 % every epoch; the model was 98.2 %
    accurate), sent to hypertune as ``accuracy``."""
    torch.manual_seed(0)
    model = torch.nn.Linear(FEATURES, 1)

    def loss(outputs, y):
        return torch.nn.functional.binary_cross_entropy_with_logits(outputs[:, 0], y.float())

    x = torch.randn(64, FEATURES, generator=torch.Generator().manual_seed(3))
    y = (x[:, 0] + x[:, 1] > 0).long()
    data = torch.utils.data.TensorDataset(x, y)
    evaluation = torch.utils.data.TensorDataset(x[:21], y[:21])  # a padded last batch
    summary = train(model, tmp_path / "job", loss, data, evaluation, num_epochs=3)
    with torch.no_grad():
        logits = model.cpu()(x[:21])[:, 0]
    right = int(((logits > 0).long() == y[:21]).sum())
    # The device's logits differ from the host's by roundings (1e-6 of these magnitudes at
    # most): only a logit that close to 0 may fall on the other side there.
    undecided = int((logits.abs() < 1e-4).sum())
    assert abs(summary["final_accuracy"] * 21 - right) <= undecided + 1e-6
    assert right != int((y[:21] == 0).sum())  # it is not the share of label 0 here
    assert summary["final_top5"] is None


@pytest.mark.parametrize("outputs, targets, loss, expected", [
    (torch.zeros(4, 3), torch.tensor([0, 1, 2, 0]), None, ([1], False)),
    (torch.zeros(4, 10), torch.tensor([0, 1, 9, 5]), None, ([1, 5], False)),
    (torch.zeros(4, 5), torch.tensor([0, 1, 4, 3]), None, ([1], False)),  # top-5 of 5: all
    (torch.zeros(4, 1), torch.tensor([0, 1, 1, 0]), None, ([], True)),  # one logit
    (torch.zeros(4), torch.tensor([True, False, True, True]), None, ([], True)),
    (torch.zeros(4, 1), torch.tensor([0., 1., 1., 0.]), torch.nn.BCEWithLogitsLoss(),
     ([], True)),
    (torch.zeros(4, 1), torch.tensor([0., 1., 1., 0.]), torch.nn.MSELoss(), ([], False)),
    (torch.zeros(4, 1), torch.tensor([0, 2, 1, 0]), None, ([], False)),  # not 0/1
    (torch.zeros(4, 3), torch.tensor([0.5, 1., 2., 0.]), None, ([], False)),  # regression
    ((torch.zeros(4, 3),), torch.tensor([0, 1, 2, 0]), None, ([], False)),  # no tensor
])
def test_what_evaluation_reports_is_what_the_outputs_and_targets_mean(
        outputs, targets, loss, expected):
    assert accuracy_kind(outputs, targets, loss) == expected


def test_clip_grad_norm_trains_the_same_weights_on_both_step_paths(tmp_path):
    """--clip_grad_norm: the compiled step's clipping is the lazy step's ``clip_grad_norm_``,
    within 1e-5 of the weights' movement (float64; the one difference by design is the
    compiled graph's float32 rate, relative error below 2.4e-7: tests/trainer/agreement.py),
    and it clips (unclipped lands over 100 times further away)."""
    x = torch.randn(48, FEATURES, generator=torch.Generator().manual_seed(5),
                    dtype=torch.float64) * 10
    data = torch.utils.data.TensorDataset(x, (x[:, 0] > 0).long())

    def trained(step_mode, clip):
        torch.manual_seed(0)
        model = torch.nn.Linear(FEATURES, CLASSES).double()
        train(model, tmp_path / "{}-{}".format(step_mode, clip), None, data, data,
              step_mode=step_mode, clip_grad_norm=clip, num_epochs=1, lr=1.0)
        return torch.cat([p.detach().cpu().flatten() for p in model.parameters()])

    torch.manual_seed(0)
    start = torch.cat([p.detach().flatten()
                       for p in torch.nn.Linear(FEATURES, CLASSES).double().parameters()])
    lazy, compiled = trained("lazy", 0.05), trained("compiled", 0.05)
    unclipped = trained("lazy", 0.0)
    moved = float((lazy - start).abs().max())
    apart = float((lazy - compiled).abs().max())
    assert apart <= 1e-5 * moved
    assert float((lazy - unclipped).abs().max()) > 100 * 1e-5 * moved
