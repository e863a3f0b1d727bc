"""Everyday models trained as their authors meant (``trainer.train``'s run, in this process,
on the XLA CPU device): a frozen parameter never moves on either step path and optimizer,
tied weights stay one tensor through training and ``model.pt``, a buffer given as ``-inf`` (an
additive causal mask) is no divergence, and an accuracy is reported only where it means what
its name says (top-1 of 2 or more classes, top-5 of more than 5, a binary classifier's
accuracy from its one logit)."""

import collections
import json
import logging
import math
import re

import pytest
import torch

from trainer import own_flags, own_loop
from trainer.checkpoints import CheckpointStore
from trainer.config import TrainConfig
from trainer.errors import DataError, TrainerError
from trainer.outputs import OutputPaths
from trainer.own_loop import accuracy_kind
from trainer.storage import LocalDirectory

FEATURES, CLASSES = 6, 3


def pairs(count, seed=0, classes=CLASSES):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(count, FEATURES, generator=generator)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 1).long() * (classes - 2)
    return torch.utils.data.TensorDataset(x, y)


def train(model, job, loss_fn=None, train_set=None, eval_set=None, metrics=None,
          param_groups=None, collate_fn=None, **flags):
    """The run ``trainer.train`` makes of ``model``: its summary (``job``: the job dir)."""
    settings = dict(data_dir=own_flags.DATA_FROM, batch_size=8, num_epochs=2, lr=0.5,
                    lr_batch=0, warmup_epochs=0, num_workers=0, log_steps=0,
                    job_dir=str(job), seed=1)
    settings.update(flags)
    config = TrainConfig(**settings)
    return own_loop.run_own(config, OutputPaths.resolve(config.job_dir, {}), model,
                            train_set or pairs(48), eval_set or pairs(16, seed=1), loss_fn,
                            metrics, param_groups, collate_fn)


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
    # A tuple (an auxiliary head's, timm's distillation models): its first element's scores;
    # a dict or Hugging Face ModelOutput: its logits. Their top-1 silently disappeared.
    ((torch.zeros(4, 3), torch.zeros(4, 3)), torch.tensor([0, 1, 2, 0]), None, ([1], False)),
    ({"logits": torch.zeros(4, 3), "loss": torch.zeros(())}, torch.tensor([0, 1, 2, 0]),
     None, ([1], False)),
    ({"hidden": torch.zeros(4, 3)}, torch.tensor([0, 1, 2, 0]), None, ([], False)),
])
def test_what_evaluation_reports_is_what_the_outputs_and_targets_mean(
        outputs, targets, loss, expected):
    assert accuracy_kind(outputs, targets, loss) == expected


def test_clip_grad_norm_trains_the_same_weights_on_both_step_paths_and_logs_the_norm(
        tmp_path):
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
        job = tmp_path / "{}-{}".format(step_mode, clip)
        train(model, job, None, data, data, step_mode=step_mode, clip_grad_norm=clip,
              num_epochs=1, lr=1.0, log_steps=1)
        norms[step_mode, clip] = [record.get("grad_norm") for record in map(
            json.loads, (job / "metrics.jsonl").read_text().splitlines())
            if record["kind"] == "train"]
        return torch.cat([p.detach().cpu().flatten() for p in model.parameters()])

    norms = {}

    torch.manual_seed(0)
    start = torch.cat([p.detach().flatten()
                       for p in torch.nn.Linear(FEATURES, CLASSES).double().parameters()])
    lazy, compiled = trained("lazy", 0.05), trained("compiled", 0.05)
    unclipped = trained("lazy", 0.0)
    moved = float((lazy - start).abs().max())
    apart = float((lazy - compiled).abs().max())
    assert apart <= 1e-5 * moved
    assert float((lazy - unclipped).abs().max()) > 100 * 1e-5 * moved
    # Each logged step's norm before clipping (clip_grad_norm_'s return), the same on both
    # paths up to the compiled graph's float32 (relative 6e-8 for the norm itself, 1e-5 for
    # the weights it came from, as above); none without clipping.
    assert len(norms["lazy", 0.05]) == 6 and min(norms["lazy", 0.05]) > 0.05
    for lazy_norm, compiled_norm in zip(norms["lazy", 0.05], norms["compiled", 0.05]):
        assert compiled_norm == pytest.approx(lazy_norm, rel=1e-5)
    assert norms["lazy", 0.0] == [None] * 6


@pytest.mark.parametrize("step_mode", ["compiled", "lazy"])
@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_gradient_accumulation_is_the_update_of_the_batch_it_adds_up_to(tmp_path, step_mode,
                                                                         optimizer):
    """--grad_accum_steps=4 of --batch_size=8 trains the weights of --batch_size=32 (a model
    without batch statistics, float64: the sums differ in order only, within 1e-9 of the
    weights' movement), not those of 4 steps of 8; the summary says how."""
    x = torch.randn(96, FEATURES, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    data = torch.utils.data.TensorDataset(x, (x[:, 0] > 0).long())

    def trained(name, **flags):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(FEATURES, 8), torch.nn.Tanh(),
                                    torch.nn.Linear(8, CLASSES)).double()
        summary = train(model, tmp_path / name, None, data, data, step_mode=step_mode,
                        optimizer=optimizer, clip_grad_norm=0.5, **flags)
        return torch.cat([p.detach().cpu().flatten() for p in model.parameters()]), summary

    torch.manual_seed(0)
    start = torch.cat([p.detach().flatten() for p in torch.nn.Sequential(
        torch.nn.Linear(FEATURES, 8), torch.nn.Tanh(), torch.nn.Linear(8, CLASSES)).double()
        .parameters()])
    larger, _ = trained("larger", batch_size=32)
    accumulated, summary = trained("accumulated", batch_size=8, grad_accum_steps=4)
    smaller, _ = trained("smaller", batch_size=8)
    moved = float((larger - start).abs().max())
    assert float((accumulated - larger).abs().max()) <= 1e-9 * moved
    assert float((smaller - larger).abs().max()) > 1e-3 * moved
    assert (summary["global_batch"], summary["batch_size_per_device"],
            summary["grad_accum_steps"], summary["global_step"]) == (32, 8, 4, 6)


class Backbone(torch.nn.Module):
    """A pretrained part and a new head, float64 (the paths compared to their rounding)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.backbone = torch.nn.Sequential(torch.nn.Linear(FEATURES, 8), torch.nn.Tanh(),
                                            torch.nn.LayerNorm(8)).double()
        self.head = torch.nn.Linear(8, CLASSES).double()

    def forward(self, x):
        return self.head(self.backbone(x.double()))


def flat(model):
    return torch.cat([p.detach().cpu().flatten() for p in model.parameters()])


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_parameter_groups_train_alike_on_both_paths_and_a_zero_scale_holds_still(tmp_path,
                                                                                 optimizer):
    """param_groups: the backbone at a tenth of the rate with its own weight decay (its norm's
    weight and bias decay too, which AdamW's default exempts) trains the same weights on both
    step paths (float64 but for the compiled graph's float32 rate, relative error below
    2.4e-7: within 1e-6 of the movement), not those of one group; at lr_scale 0 it never
    moves while the head trains."""
    def trained(step_mode, groups, name):
        model = Backbone()
        start = {n: p.detach().clone() for n, p in model.named_parameters()}
        train(model, tmp_path / name, None, None, None, None,
              groups(model) if groups else None, step_mode=step_mode, optimizer=optimizer,
              weight_decay=0.01, lr=0.2)
        return model, start

    def tenth(model):
        return [{"params": model.backbone, "lr_scale": 0.1, "weight_decay": 0.05}]

    lazy, start = trained("lazy", tenth, "lazy")
    compiled, _ = trained("compiled", tenth, "compiled")
    alone, _ = trained("lazy", None, "alone")
    moved = float((flat(lazy) - torch.cat([p.flatten() for p in start.values()])).abs().max())
    assert float((flat(lazy) - flat(compiled)).abs().max()) <= 1e-6 * moved
    assert float((flat(lazy) - flat(alone)).abs().max()) > 1e-3 * moved
    checkpoint = torch.load(str(tmp_path / "compiled" / "checkpoints" / "ckpt-000000012.pt"),
                            weights_only=False)
    assert sorted(g["lr_scale"] for g in checkpoint["optimizer"]["param_groups"])[0] == 0.1
    for step_mode in ("lazy", "compiled"):
        held, start = trained(step_mode, lambda model: [
            {"params": list(model.backbone.parameters()), "lr_scale": 0}], "held-" + step_mode)
        for name, parameter in held.named_parameters():
            unchanged = torch.equal(parameter.detach().cpu(), start[name])
            assert unchanged == name.startswith("backbone."), (step_mode, name)


@pytest.mark.parametrize("groups, text", [
    (lambda m: {"params": m.backbone}, "param_groups is a dict, not a list of dicts"),
    (lambda m: [{"lr_scale": 0.1}], 'param_groups[0] is not a dict with "params"'),
    (lambda m: [{"params": m.backbone, "lr": 0.1}], "param_groups[0] has 'lr': not one of"),
    (lambda m: [{"params": torch.nn.Linear(2, 2)}], "holds a parameter that is not the model's"),
    (lambda m: [{"params": m.backbone}, {"params": m.head, "lr_scale": -1}],
     "param_groups[1]['lr_scale'] must be a number of 0 or more, got -1"),
    (lambda m: [{"params": m.backbone}, {"params": m.parameters()}],
     "param_groups[1] holds backbone.0.weight, which param_groups[0] holds too"),
])
def test_parameter_groups_torch_would_refuse_are_one_line_before_training(tmp_path, groups,
                                                                          text):
    model = Backbone()
    with pytest.raises(TrainerError, match=re.escape(text)) as raised:
        train(model, tmp_path / "job", param_groups=groups(model))
    assert raised.value.exit_code == 64


def test_an_average_of_the_weights_trains_alike_on_both_paths_and_is_evaluated_beside_them(
        tmp_path):
    """--ema_decay=0.8: the average written to model-ema.pt is the same on both step paths
    (float64 but for the compiled graph's float32 rate: within 1e-6 of its movement), is
    not the weights, and the evaluation's ema_loss and ema_top1 are the averaged model's on
    the evaluation set (16 examples in 2 batches: a float32 sum, within 1e-6 relative);
    --keep_best=ema_loss keeps the averaged weights."""
    x = torch.randn(64, FEATURES, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    data = torch.utils.data.TensorDataset(x, (x[:, 0] > 0).long() + (x[:, 1] > 0).long())
    evaluation = torch.utils.data.TensorDataset(x[:16], data.tensors[1][:16])

    def trained(step_mode):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(FEATURES, 8), torch.nn.Tanh(),
                                    torch.nn.Linear(8, CLASSES)).double()
        job = tmp_path / step_mode
        summary = train(model, job, None, data, evaluation, step_mode=step_mode,
                        ema_decay=0.8, keep_best="ema_loss", num_epochs=1)
        return job, summary

    lazy_job, _ = trained("lazy")
    compiled_job, summary = trained("compiled")
    lazy, compiled = (torch.load(str(job / "model-ema.pt"), weights_only=False)
                      for job in (lazy_job, compiled_job))
    weights = torch.load(str(compiled_job / "model.pt"), weights_only=False)
    torch.manual_seed(0)
    start = torch.nn.Sequential(torch.nn.Linear(FEATURES, 8), torch.nn.Tanh(),
                                torch.nn.Linear(8, CLASSES)).double().state_dict()
    for name in start:
        moved = float((compiled[name] - start[name]).abs().max())
        assert float((lazy[name] - compiled[name]).abs().max()) <= 1e-6 * moved, name
        assert not torch.equal(compiled[name], weights[name]), name
    averaged = torch.nn.Sequential(torch.nn.Linear(FEATURES, 8), torch.nn.Tanh(),
                                   torch.nn.Linear(8, CLASSES)).double()
    averaged.load_state_dict(compiled)
    with torch.no_grad():
        scores = averaged(evaluation.tensors[0])
    loss = float(torch.nn.functional.cross_entropy(scores, evaluation.tensors[1]))
    top1 = float((scores.argmax(1) == evaluation.tensors[1]).double().mean())
    record = [json.loads(line) for line in (compiled_job / "metrics.jsonl").read_text()
              .splitlines() if '"eval"' in line][-1]
    assert record["ema_loss"] == pytest.approx(loss, rel=1e-6)
    assert round(record["ema_top1"] * 16) == round(top1 * 16)
    assert "top1" in record and "loss" in record
    best = torch.load(str(compiled_job / "model-best.pt"), weights_only=False)
    assert json.loads((compiled_job / "best.json").read_text())["metric"] == "ema_loss"
    assert all(torch.equal(best[name], compiled[name]) for name in compiled)  # one epoch


# --- inputs and outputs as the ecosystem passes them ------------------------------------------

class Split(torch.utils.data.Dataset):
    """``pairs`` with each input in two parts, as a tuple or as a dict."""

    def __init__(self, base, as_dict=False):
        self.base, self.as_dict = base, as_dict

    def __len__(self):
        return len(self.base)

    def __getitem__(self, index):
        x, y = self.base[index]
        parts = (x[:2], x[2:])
        return ({"first": parts[0], "rest": parts[1]} if self.as_dict else parts), y


class TwoInputs(torch.nn.Module):
    """A model of two inputs (an image and its metadata, a text and its mask): model(a, b)."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(FEATURES, CLASSES)

    def forward(self, first, rest):
        return self.linear(torch.cat([first, rest], dim=1))


@pytest.mark.parametrize("step_mode", ["compiled", "lazy"])
@pytest.mark.parametrize("as_dict", [False, True])
def test_tuple_and_dict_inputs_train_as_the_one_tensor_they_split(tmp_path, step_mode, as_dict):
    """An item ((a, b), y) calls model(a, b) and ({"first": a, "rest": b}, y) model(**x): the
    same weights, bit for bit, as the one-tensor model on the joined input (the same ops on
    the same values). Both were refused (exit 65, "not a tensor or a number")."""
    torch.manual_seed(0)
    whole = torch.nn.Linear(FEATURES, CLASSES)
    torch.manual_seed(0)
    split = TwoInputs()
    expected = train(whole, tmp_path / "whole", step_mode=step_mode)
    found = train(split, tmp_path / "split", train_set=Split(pairs(48), as_dict),
                  eval_set=Split(pairs(16, seed=1), as_dict), step_mode=step_mode)
    assert torch.equal(split.linear.weight.detach().cpu(), whole.weight.detach().cpu())
    assert found["final_accuracy"] == expected["final_accuracy"] is not None


class ModelOutput(collections.OrderedDict):
    """What a Hugging Face model returns (``transformers.utils.ModelOutput``): a dict whose
    entries are attributes too."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name)


class SequenceClassifier(torch.nn.Module):
    """A Hugging Face style classifier: forward(input_ids, attention_mask, labels=None),
    computing its own loss when given labels (cross-entropy, ignoring -100)."""

    def __init__(self, vocabulary=16, width=8):
        super().__init__()
        self.embed = torch.nn.Embedding(vocabulary, width)
        self.head = torch.nn.Linear(width, CLASSES)

    def forward(self, input_ids, attention_mask, labels=None):
        mask = attention_mask.unsqueeze(-1).float()
        pooled = (self.embed(input_ids) * mask).sum(1) / mask.sum(1).clamp(min=1)
        logits = self.head(pooled)
        output = ModelOutput(logits=logits)
        if labels is not None:
            output["loss"] = torch.nn.functional.cross_entropy(logits, labels,
                                                               ignore_index=-100)
        return output


class Rows(torch.utils.data.Dataset):
    """Hugging Face datasets' rows: dicts of token ids, a mask and a ``label`` (their name;
    its collator renames it ``labels``)."""

    def __init__(self, count, seed):
        generator = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, 16, (count, 5), generator=generator)
        self.mask = (torch.rand(count, 5, generator=generator) > 0.2).long()
        self.labels = self.ids[:, 0] % CLASSES

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, index):
        return {"input_ids": self.ids[index], "attention_mask": self.mask[index],
                "label": self.labels[index]}


@pytest.mark.parametrize("step_mode", ["compiled", "lazy"])
def test_hugging_face_rows_train_on_the_models_own_loss(tmp_path, step_mode):
    """Dict rows are passed as model(**row) and the loss is the output's, as Hugging Face's
    Trainer does; top-1 from its logits. The evaluation's last batch is padded (13 rows, batches
    of 8) with labels -100, which the model's loss ignores: the reported loss is the mean over
    the 13 rows (a float32 sum of 13 terms: within 1e-5 relative)."""
    torch.manual_seed(0)
    model = SequenceClassifier()
    evaluation = Rows(13, seed=1)
    summary = train(model, tmp_path / "job", train_set=Rows(48, seed=0), eval_set=evaluation,
                    step_mode=step_mode, lr=0.2)
    model = model.cpu().eval()
    with torch.no_grad():
        expected = model(evaluation.ids, evaluation.mask, evaluation.labels)
    assert summary["final_eval_loss"] == pytest.approx(float(expected.loss), rel=1e-5)
    hits = (expected.logits.argmax(1) == evaluation.labels).float().mean()
    assert summary["final_accuracy"] == pytest.approx(float(hits), abs=1e-6)


def test_a_row_without_labels_and_outputs_without_a_loss_are_one_line_each(tmp_path):
    class Unlabelled(Rows):
        def __getitem__(self, index):
            row = super().__getitem__(index)
            del row["label"]
            return row

    with pytest.raises(DataError, match="train_set item 0 is a dict without 'labels' \\(its "
                                        "keys: attention_mask, input_ids\\)"):
        train(SequenceClassifier(), tmp_path / "a", train_set=Unlabelled(16, 0))

    class NoLoss(SequenceClassifier):
        def forward(self, input_ids, attention_mask, labels=None):
            return super().forward(input_ids, attention_mask)

    with pytest.raises(TrainerError, match="failed on train_set's first items: ValueError: the "
                                           "model's outputs hold no loss"):
        train(NoLoss(), tmp_path / "b", train_set=Rows(16, 0), eval_set=Rows(8, 1))


# --- your own metrics --------------------------------------------------------------------------

def regression(count, seed):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(count, FEATURES, generator=generator)
    return torch.utils.data.TensorDataset(x, x[:, :1] * 2 - x[:, 1:2])


VOCABULARY, LENGTH = 6, 5


class Tokens(torch.utils.data.Dataset):
    """Next-token pairs: ids, and each id's successor mod the vocabulary as its label, the
    last position -100 (no label: what torch's cross-entropy ignores)."""

    def __init__(self, count, seed):
        self.ids = torch.randint(0, VOCABULARY, (count, LENGTH),
                                 generator=torch.Generator().manual_seed(seed))
        self.labels = (self.ids + 1) % VOCABULARY
        self.labels[:, -1] = -100

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, index):
        return self.ids[index], self.labels[index]


class TinyLanguageModel(torch.nn.Module):
    """Scores per token, ``N x T x C`` as language models return them, or ``N x C x T`` as
    torch's cross-entropy takes them."""

    def __init__(self, torch_layout=False):
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(VOCABULARY, 16)
        self.head = torch.nn.Linear(16, VOCABULARY)
        self.torch_layout = torch_layout

    def forward(self, ids):
        scores = self.head(torch.tanh(self.embed(ids)))
        return scores.transpose(1, 2) if self.torch_layout else scores


def flattened_cross_entropy(outputs, labels):
    return torch.nn.functional.cross_entropy(outputs.flatten(0, 1), labels.flatten())


@pytest.mark.parametrize("torch_layout", [False, True])
def test_a_language_model_reports_token_accuracy_over_labelled_tokens_and_its_perplexity(
        tmp_path, torch_layout):
    """Scores per token against labels N x T: token_accuracy is the share of the labelled
    tokens (not -100, not the padding of the last evaluation batch: 13 rows in batches of 8)
    predicted, counted exactly; with torch's cross-entropy the perplexity, exp of the loss,
    too (a loss of the user's may be anything: no perplexity). No top-1 of a wrong shape."""
    model = TinyLanguageModel(torch_layout)
    evaluation = Tokens(13, seed=1)
    loss_fn = torch.nn.CrossEntropyLoss() if torch_layout else flattened_cross_entropy
    summary = train(model, tmp_path / "job", loss_fn, Tokens(64, seed=0), evaluation, lr=2.0,
                    num_epochs=3)
    with torch.no_grad():
        scores = model.cpu().eval()(evaluation.ids)
    predicted = scores.argmax(1 if torch_layout else 2)
    labelled = evaluation.labels >= 0
    share = float(((predicted == evaluation.labels) & labelled).sum()) / float(labelled.sum())
    records = [json.loads(line) for line in (tmp_path / "job" / "metrics.jsonl").read_text()
               .splitlines() if '"eval"' in line]
    final = records[-1]
    assert round(final["token_accuracy"] * 52) == round(share * 52)  # 13 rows x 4 labelled
    assert summary["final_accuracy"] == final["token_accuracy"] and "top1" not in final
    if torch_layout:
        assert final["perplexity"] == pytest.approx(math.exp(final["loss"]), rel=1e-12)
    else:
        assert "perplexity" not in final


def test_a_causal_models_own_loss_gets_its_perplexity_and_no_token_accuracy(tmp_path):
    """Hugging Face rows whose model computes its own loss (a causal language model: labels
    are its inputs, shifted inside it): the perplexity of that loss; no token accuracy, whose
    positions the model's shift would make a lie."""
    class CausalRows(torch.utils.data.Dataset):
        def __init__(self, count, seed):
            self.ids = Tokens(count, seed).ids

        def __len__(self):
            return len(self.ids)

        def __getitem__(self, index):
            return {"input_ids": self.ids[index], "labels": self.ids[index]}

    class Causal(TinyLanguageModel):
        def forward(self, input_ids, labels=None):
            logits = super().forward(input_ids)
            output = ModelOutput(logits=logits)
            if labels is not None:
                output["loss"] = torch.nn.functional.cross_entropy(
                    logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100)
            return output

    summary = train(Causal(), tmp_path / "job", None, CausalRows(32, 0), CausalRows(8, 1))
    records = [json.loads(line) for line in (tmp_path / "job" / "metrics.jsonl").read_text()
               .splitlines() if '"eval"' in line]
    assert records[-1]["perplexity"] == pytest.approx(math.exp(records[-1]["loss"]))
    assert "token_accuracy" not in records[-1] and summary["final_accuracy"] is None


CE = torch.nn.CrossEntropyLoss()


@pytest.mark.parametrize("outputs, labels, loss, expected", [
    (torch.zeros(2, 4, 6), torch.zeros(2, 4).long(), flattened_cross_entropy, (2, False)),
    (torch.zeros(2, 6, 4), torch.zeros(2, 4).long(), CE, (1, True)),
    # T == C: the layout the loss takes
    (torch.zeros(2, 4, 4), torch.zeros(2, 4).long(), CE, (1, True)),
    (torch.zeros(2, 4, 4), torch.zeros(2, 4).long(), flattened_cross_entropy, (2, False)),
    (torch.zeros(2, 4, 6), torch.zeros(2, 4).long(), own_loop.output_loss, (None, True)),
    (torch.zeros(2, 6, 4), torch.zeros(2, 4).long(),
     torch.nn.CrossEntropyLoss(label_smoothing=0.1), (1, False)),  # not a likelihood
    (torch.zeros(2, 4, 6), torch.zeros(2, 4), flattened_cross_entropy, (None, False)),
    (torch.zeros(2, 4, 6), torch.zeros(2, 5).long(), flattened_cross_entropy, (None, False)),
    (torch.zeros(2, 6), torch.zeros(2).long(), CE, (None, False)),
])
def test_token_scores_are_found_on_the_dimension_the_loss_takes(outputs, labels, loss,
                                                                 expected):
    assert own_loop.token_kind(outputs, labels, loss) == expected


# --- items of varying length ---------------------------------------------------------------

class Sentences(torch.utils.data.Dataset):
    """Hugging Face style rows of varying length: ``input_ids`` of 2 to 7 tokens, and as
    ``labels`` each token's successor mod the vocabulary (next-token targets)."""

    def __init__(self, count, seed):
        generator = torch.Generator().manual_seed(seed)
        self.ids = [torch.randint(0, VOCABULARY, (int(length),), generator=generator)
                    for length in torch.randint(2, 8, (count,), generator=generator)]

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, index):
        return {"input_ids": self.ids[index], "labels": (self.ids[index] + 1) % VOCABULARY}


def pad_to_longest(rows):
    """A collate_fn as Hugging Face's collators pad: to the batch's longest item, ids with
    0, labels with -100, and an attention mask."""
    longest = max(len(row["input_ids"]) for row in rows)

    def padded(tensor, value):
        return torch.cat([tensor, tensor.new_full((longest - len(tensor),), value)])

    return {"input_ids": torch.stack([padded(row["input_ids"], 0) for row in rows]),
            "labels": torch.stack([padded(row["labels"], -100) for row in rows]),
            "attention_mask": torch.stack([padded(torch.ones_like(row["input_ids"]), 0)
                                           for row in rows])}


class TokenScorer(torch.nn.Module):
    """A Hugging Face style language model without a loss of its own: logits N x T x C."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(VOCABULARY, 16)
        self.head = torch.nn.Linear(16, VOCABULARY)

    def forward(self, input_ids, attention_mask, labels=None):
        return ModelOutput(logits=self.head(torch.tanh(self.embed(input_ids))))


def masked_token_loss(outputs, batch):
    """A loss of the whole batch (what Hugging Face's ``compute_loss`` sees): the mean
    cross-entropy over the tokens the attention mask keeps."""
    per_token = torch.nn.functional.cross_entropy(
        outputs.logits.transpose(1, 2), batch["labels"].clamp(min=0), reduction="none")
    mask = batch["attention_mask"].float()
    return (per_token * mask).sum() / mask.sum().clamp(min=1)


@pytest.mark.parametrize("step_mode", ["compiled", "lazy"])
def test_items_of_varying_length_train_through_a_collate_fn_and_a_loss_of_the_batch(
        tmp_path, step_mode, caplog):
    """collate_fn pads each batch to its longest item, so the batches' shapes vary: each new
    one compiles once and is logged. A loss_fn given for rows is called on the whole batch
    (its attention mask here)."""
    varying_length_run(tmp_path, caplog, step_mode=step_mode)


@pytest.mark.spmd
def test_on_four_devices_batches_of_varying_length_are_split_and_the_padded_one_cut(
        tmp_path, caplog):
    """The same global batches (2 rows a device) under SPMD: each shape split over the
    devices along its rows, the padded evaluation batch cut to its real rows."""
    assert varying_length_run(tmp_path, caplog, batch_size=2)["devices"] == 4


def varying_length_run(tmp_path, caplog, **flags):
    """Trains ``TokenScorer`` on ``Sentences`` through ``pad_to_longest`` and
    ``masked_token_loss`` (global batches of 8): the evaluation loss is the example-weighted
    mean over the batches as the host computes it with the trained model, 13 rows in batches
    of 8, the second cut to its 5 (float32 sums of 13 terms: within 1e-5 relative)."""
    model = TokenScorer()
    evaluation = Sentences(13, seed=1)
    with caplog.at_level(logging.INFO, logger="trainer"):
        summary = train(model, tmp_path / "job", masked_token_loss, Sentences(64, 0),
                        evaluation, lr=1.0, num_epochs=2, collate_fn=pad_to_longest, **flags)
    model = model.cpu().eval()
    with torch.no_grad():
        losses = [float(masked_token_loss(model(**batch), batch)) * len(batch["labels"])
                  for batch in (pad_to_longest([evaluation[i] for i in range(8)]),
                                pad_to_longest([evaluation[i] for i in range(8, 13)]))]
    assert summary["final_eval_loss"] == pytest.approx(sum(losses) / 13, rel=1e-5)
    assert summary["final_eval_loss"] < math.log(VOCABULARY)  # it learnt
    shapes = [record.getMessage() for record in caplog.records
              if "batch shape" in record.getMessage()]
    assert any(line.startswith("train_set: batch shape 2, ") for line in shapes)
    assert any(line.startswith("eval_set: batch shape 1, ") for line in shapes)
    return summary


class WeightedTokenLoss(torch.nn.Module):
    """A loss of the batch that is a Module holding a tensor (a weight per token id), as a
    class-weighted loss is: it moves to the device with the model."""

    def __init__(self):
        super().__init__()
        self.register_buffer("weight", torch.linspace(0.5, 1.5, VOCABULARY))

    def forward(self, outputs, batch):
        return torch.nn.functional.cross_entropy(outputs.logits.transpose(1, 2),
                                                 batch["labels"], weight=self.weight)


def test_a_loss_module_of_the_batch_moves_to_the_device_with_the_model(tmp_path):
    """The steps then run lazily (--step_mode=auto): the compiled step takes the model's
    tensors only; --step_mode=compiled asked for by name is one line."""
    summary = train(TokenScorer(), tmp_path / "job", WeightedTokenLoss(), Sentences(32, 0),
                    Sentences(8, 1), collate_fn=pad_to_longest, num_epochs=1,
                    step_mode="auto")
    assert summary["final_eval_loss"] > 0 and summary["step_path"] == "lazy"
    with pytest.raises(TrainerError, match=re.escape(
            "--step_mode=compiled: loss_fn (WeightedTokenLoss) holds tensors")) as raised:
        train(TokenScorer(), tmp_path / "compiled", WeightedTokenLoss(), Sentences(32, 0),
              Sentences(8, 1), collate_fn=pad_to_longest, step_mode="compiled")
    assert raised.value.exit_code == 64


# --- your own metrics, reported -----------------------------------------------------------------

@pytest.mark.parametrize("step_mode", ["compiled", "lazy"])
def test_your_metrics_are_example_weighted_over_the_real_rows_and_tunable_by_name(
        tmp_path, step_mode, monkeypatch):
    """metrics={"mae": fn}: each batch's mean on its real rows (13 examples in batches of 8:
    the last one padded), weighted by them: the mean absolute error over the 13, as computed
    directly (float32 sums of 13 terms: within 1e-5 relative); in the log's numbers (not a
    percentage), metrics.jsonl, summary.json, and hypertune under --hypertune_metric=mae."""
    metric_file = tmp_path / "hypertune" / "output.metrics"
    monkeypatch.setenv("CLOUD_ML_HP_METRIC_FILE", str(metric_file))
    torch.manual_seed(0)
    model = torch.nn.Linear(FEATURES, 1)
    evaluation = regression(13, seed=1)
    summary = own_loop.run_own(
        TrainConfig(data_dir=own_flags.DATA_FROM, batch_size=8, num_epochs=2, lr=0.1,
                    lr_batch=0, warmup_epochs=0, num_workers=0, log_steps=0, seed=1,
                    job_dir=str(tmp_path / "job"), step_mode=step_mode,
                    hypertune_metric="mae"),
        OutputPaths.resolve(str(tmp_path / "job"), {}), model, regression(48, 0), evaluation,
        torch.nn.MSELoss(), {"mae": lambda outputs, targets: (outputs - targets).abs().mean()})
    x, y = evaluation.tensors
    with torch.no_grad():
        expected = (model.cpu()(x) - y).abs().mean().item()
    assert summary["final_metrics"]["mae"] == pytest.approx(expected, rel=1e-5)
    records = [json.loads(line) for line in
               (tmp_path / "job" / "metrics.jsonl").read_text().splitlines()]
    assert [round(r["mae"], 6) for r in records if r["kind"] == "eval"][-1] == round(
        summary["final_metrics"]["mae"], 6)
    reported = json.loads(metric_file.read_text().splitlines()[-1])
    assert float(reported["mae"]) == pytest.approx(summary["final_metrics"]["mae"])


@pytest.mark.parametrize("metrics, text", [
    ({"loss": lambda o, t: o.mean()}, "metrics key 'loss' is not a name of its own"),
    ({"mae": "abs"}, "metrics['mae'] is a str, not callable"),
    ({"mae": lambda o, t: (o - t).abs()}, "metrics['mae'] returned a torch.float32 of shape "
                                          "(2, 1), not a scalar float tensor"),
    ({"mae": lambda o, t: o.nope}, "metrics['mae'](outputs, targets) failed on train_set's "
                                   "first items: AttributeError"),
    ([lambda o, t: o.mean()], "metrics is a list, not a dict")])
def test_a_metric_that_cannot_be_reported_is_one_line_before_training(tmp_path, metrics, text):
    with pytest.raises(TrainerError, match=re.escape(text)) as raised:
        train(torch.nn.Linear(FEATURES, 1), tmp_path / "job", loss_fn=torch.nn.MSELoss(),
              train_set=regression(16, 0), eval_set=regression(8, 1), metrics=metrics)
    assert raised.value.exit_code == 64


# --- the best model kept -------------------------------------------------------------------------

@pytest.mark.parametrize("checkpoint_epochs", [1, 0])
def test_keep_best_keeps_the_weights_and_checkpoint_of_the_best_evaluation_and_says_which(
        tmp_path, checkpoint_epochs):
    """--keep_best=mae:min (Lightning's ModelCheckpoint(monitor="mae", mode="min")): after 4
    epochs at a rate that overshoots (its best evaluation is not its last), model-best.pt
    holds the weights whose evaluation was the lowest, which best.json names; evaluated
    directly they give its mae (float32 sums of 13 terms: within 1e-5 relative). Its
    checkpoint stays beside the newest --keep_checkpoints=1, written at the evaluation where
    the epoch's end wrote none (--checkpoint_epochs=0: only the last), and holds those
    weights."""
    torch.manual_seed(0)
    job = tmp_path / "job"
    evaluation = regression(13, seed=1)
    mae = {"mae": lambda outputs, targets: (outputs - targets).abs().mean()}
    train(torch.nn.Linear(FEATURES, 1), job, loss_fn=torch.nn.MSELoss(),
          train_set=regression(48, 0), eval_set=evaluation, metrics=mae, num_epochs=4,
          lr=0.6, keep_best="mae:min", keep_checkpoints=1,
          checkpoint_epochs=checkpoint_epochs)
    evaluations = [json.loads(line) for line in (job / "metrics.jsonl").read_text().splitlines()
                   if json.loads(line)["kind"] == "eval"]
    best = min(evaluations, key=lambda record: record["mae"])
    record = json.loads((job / "best.json").read_text())
    assert (record["metric"], record["mode"], record["epoch"]) == ("mae", "min", best["epoch"])
    assert record["value"] == pytest.approx(best["mae"], rel=1e-6)
    assert record["epoch"] < 4  # not the last weights: model.pt's differ
    final = torch.load(str(job / "model.pt"), weights_only=False)
    kept = torch.load(str(job / "model-best.pt"), weights_only=False)
    assert not torch.equal(final["weight"], kept["weight"])
    model = torch.nn.Linear(FEATURES, 1)
    model.load_state_dict(kept)
    x, y = evaluation.tensors
    with torch.no_grad():
        assert (model(x) - y).abs().mean().item() == pytest.approx(record["value"], rel=1e-5)
    checkpoints = sorted(path.name for path in (job / "checkpoints").glob("ckpt-*.pt"))
    assert checkpoints == [record["checkpoint"], "ckpt-{:09d}.pt".format(4 * 6)]
    saved = CheckpointStore(LocalDirectory(str(job / "checkpoints")))._opened(
        record["checkpoint"], (job / "checkpoints" / record["checkpoint"]).read_bytes())[0]
    assert saved["step"] == record["step"] and torch.equal(saved["model"]["weight"],
                                                           kept["weight"])


@pytest.mark.parametrize("keep_best, text", [
    ("top5", "--keep_best=top5 names a figure the evaluation does not report (it reports top1, "
             "loss)"),
    ("top1:highest", "--keep_best='top1:highest' is not NAME or NAME:max or NAME:min")])
def test_a_keep_best_the_evaluation_cannot_judge_is_one_line_before_training(tmp_path,
                                                                              keep_best, text):
    with pytest.raises(TrainerError, match=re.escape(text)) as raised:
        train(torch.nn.Linear(FEATURES, CLASSES), tmp_path / "job", keep_best=keep_best)
    assert raised.value.exit_code == 64
    assert not list(tmp_path.glob("job/checkpoints/ckpt-*"))  # nothing trained
