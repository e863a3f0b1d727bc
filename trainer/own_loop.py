"""Your model and data on the trainers' run: ``trainer.train(model, train_set, eval_set=None,
loss_fn=None, argv=None, metrics=None, param_groups=None, collate_fn=None)``, called once per
process as a script's main.

The run is ``fit``'s, as ``python -m trainer.mnist`` runs it: SPMD over every local device,
``--step_mode``, ``--optimizer``, checkpoints and resume at the exact example, SIGTERM and
Ctrl-C, the nan guard, metrics, TensorBoard, summary.json, model.pt and profiles in --job_dir.

- ``model``: a ``torch.nn.Module`` with parameters, taking a batch of inputs (``N x ...``).
- ``train_set``, ``eval_set`` (None: no evaluation): map-style Datasets of ``(input, target)``
  items, tensors, numbers or numpy arrays, the input also a tuple, list or dict of them
  (``model(*x)``, ``model(**x)``); or of dicts, Hugging Face rows (``model(**row)``, their
  ``labels`` the target: ``trainer.dataset_source``). Every item of one structure, shapes and
  dtypes.
  ``trainer.dataset_source`` batches them: every example once per epoch over the job's hosts,
  the order from ``--seed``, ``--num_workers`` data workers.
- ``loss_fn(outputs, targets)``: a scalar tensor; default cross-entropy, or for rows the loss
  the model returns (``outputs.loss``, ``batch_tree.output_loss``). For rows a ``loss_fn``
  is called on the whole batch, ``loss_fn(outputs, batch)`` (``batch_tree.BatchLoss``), as
  Hugging Face's ``compute_loss`` sees it.
- ``collate_fn``: a function of a list of items returning one batch, for items of varying
  length (``DatasetSource``); each new batch shape compiles the steps once and is logged.
- ``metrics``: {name: fn(outputs, targets)}, each a batch's mean, reported over the
  evaluation set (``Steps``).
- ``param_groups``: [{"params": ..., "lr_scale": ..., "weight_decay": ...}, ...], a rate
  scale and a weight decay of their own for some parameters (``trainer.param_groups``).
- ``argv``: the flags, without the program's name (default ``sys.argv[1:]``): the trainers'
  common flags but the image and data ones (``trainer.own_flags``); ``--help`` lists them.
  They are parsed and checked before torch_xla is imported: a typo costs no framework
  load. Flags the script defined with absl before the call are parsed with them (read them
  from ``absl.flags.FLAGS`` after the call). To read them before the call, parse with
  ``FLAGS(sys.argv, known_only=True)``: a plain ``FLAGS(sys.argv)`` stops at ``--job_dir``
  and the trainers' other flags, which are defined only inside ``train``.

Returns the summary (``summary.json``'s dict) when the run completes. A stop (SIGTERM: 143;
Ctrl-C: 130, after a checkpoint) or an error (one line and a ``HINT:``; exit 64 for a usage
error: flags, a model or loss that cannot train, an IterableDataset; 65 for data: an empty
set, an item that is no pair of numbers, items of differing shapes, a ``__getitem__`` that
raises, an eval_set the model or loss does not take; 78: too small a /dev/shm for the data
workers) ends the process, with the trainers' exit codes.

Evaluation reports ``loss``, the example-weighted mean of ``loss_fn`` over the evaluation
batches (each batch's loss times its examples, over all examples: exact for a loss that is a
mean over examples, as the defaults of torch's losses are); the last batch's padding is cut
off before the loss, whatever the targets' shape or dtype. Where the outputs are class
scores (``N x C``, ``C >= 2``) and the targets class numbers (integers of shape ``N``), it
reports ``top1`` too (and ``top5`` above 5 classes); where they are one logit per example
against targets 0 and 1, ``accuracy`` (the logit's sign against the target:
``accuracy_kind``); where they are scores per token against labels ``N x T``,
``token_accuracy`` and, for a cross-entropy, ``perplexity`` (``token_kind``).
``summary["final_eval_loss"]`` and ``["final_accuracy"]`` hold the last.

A resumed run ends on the weights an uninterrupted run reaches, dropout included: each
training step's device draws are seeded from ``--seed`` and the step's number
(``steps.Steps.train``).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

import torch

import trainer.xla  # noqa: F401  (first of ours, at a fixed point: trainer.startup)
from trainer import devices
from trainer import param_groups as trainer_param_groups
from trainer.batch_tree import (
    BatchLoss,
    call_model,
    describe,
    logits_of,
    loss_of,
    output_loss,
    to_device,
)
from trainer.cli import exit_process, run_parsed
from trainer.config import TrainConfig
from trainer.dataset_source import DatasetSource
from trainer.errors import EX_DATAERR, EX_USAGE, TrainerError
from trainer.fit import TrainSpec, fit
from trainer.outputs import OutputPaths


def train(config: TrainConfig, model: Any, train_set: Any, eval_set: Any = None,
          loss_fn: Optional[Callable] = None, metrics: Optional[Dict[str, Callable]] = None,
          param_groups: Any = None, collate_fn: Optional[Callable] = None) -> Dict[str, Any]:
    """``trainer.train`` once its flags are parsed into ``config`` (``trainer.own_flags``):
    the run's summary, or the process ends with the trainers' exit code and one line."""
    summary: Dict[str, Any] = {}

    def run(config: TrainConfig, *, paths: OutputPaths) -> Dict[str, Any]:
        summary.update(run_own(config, paths, model, train_set, eval_set, loss_fn, metrics,
                               param_groups, collate_fn))
        return summary

    code = run_parsed(run, config)
    if code or not summary:  # stopped or failed
        exit_process(code)
    return summary


def run_own(config: TrainConfig, paths: OutputPaths, model: Any, train_set: Any,
            eval_set: Any, loss_fn: Optional[Callable],
            metrics: Optional[Dict[str, Callable]] = None,
            param_groups: Any = None, collate_fn: Optional[Callable] = None) -> Dict[str, Any]:
    """Check the arguments, then ``fit`` them as ``config`` says; returns the summary."""
    check_model(model)
    groups = trainer_param_groups.check(model, param_groups)
    check_loss(loss_fn)
    check_callable(collate_fn, "collate_fn", "a function of a list of items returning one "
                   "batch, e.g. one that pads each item's tokens to the batch's longest")
    metrics = check_metrics(metrics)
    topology = devices.detect(config.devices)
    torch.manual_seed(config.seed)
    batch, eval_batch, host = devices.batch_layout(config.step_batch_size,
                                                   config.eval_batch_size or config.batch_size,
                                                   topology)
    from trainer.data.workers import resolve_workers

    source = DatasetSource(train_set, eval_set, batch, eval_batch, config.seed, host,
                           resolve_workers(config.num_workers), topology.devices, collate_fn)
    loss_fn = check_loss(loss_fn, source.train_shape.rows)
    reports = first_step_check(model, loss_fn, source.sample, metrics=metrics)
    if source.eval_sample is not None:  # other shapes or dtypes: a data error, before training
        first_step_check(model, loss_fn, source.eval_sample, "eval_set", EX_DATAERR, metrics)
    spec = TrainSpec("own-" + type(model).__name__, model, source, loss_fn,
                     topk=reports.topk, binary=reports.binary,
                     token_scores=reports.token_scores,
                     perplexity=reports.perplexity, eval_rows=source.real_rows, metrics=metrics,
                     param_groups=groups)
    return fit(config, spec, paths, topology)


def check_model(model: Any) -> None:
    if not isinstance(model, torch.nn.Module):
        raise TrainerError("model is a {}, not a torch.nn.Module".format(
            type(model).__name__), "pass the network itself, e.g. trainer.train(Net(), ...)",
            EX_USAGE)
    if not any(parameter.requires_grad for parameter in model.parameters()):
        raise TrainerError("model {} has no parameter to train".format(type(model).__name__),
                           "give it parameters (nn.Linear, nn.Conv2d, ...) that require "
                           "gradients", EX_USAGE)


def check_callable(value: Any, name: str, hint: str) -> None:
    """A usage error unless ``value`` is None or callable."""
    if value is not None and not callable(value):
        raise TrainerError("{} is a {}, not callable".format(name, type(value).__name__),
                           "pass " + hint, EX_USAGE)


def check_loss(loss_fn: Optional[Callable], rows: bool = False) -> Callable:
    """``loss_fn``, called on (outputs, targets); where the items are dicts (Hugging Face
    rows, with their ``labels``) on (outputs, the batch of rows) (``batch_tree.BatchLoss``).
    For None: for rows the loss the model returns (``batch_tree.output_loss``), else
    cross-entropy. Anything not callable is a usage error."""
    if loss_fn is None:
        return output_loss if rows else torch.nn.CrossEntropyLoss()
    check_callable(loss_fn, "loss_fn", "a function of (outputs, targets) returning a scalar "
                   "tensor, e.g. torch.nn.MSELoss(), or None for cross-entropy")
    return BatchLoss(loss_fn) if rows else loss_fn


# What evaluation reports already: a metric of the user's may not take one of these names.
RESERVED_METRICS = ("loss", "top1", "top5", "accuracy", "token_accuracy", "perplexity", "epoch",
                    "train_damaged_images", "eval_damaged_images")


def check_metrics(metrics: Any) -> Dict[str, Callable]:
    """``metrics``: {name: fn(outputs, targets) -> a scalar tensor, the batch's mean}, or None;
    anything else is a usage error naming the entry."""
    if metrics is None:
        return {}
    if not isinstance(metrics, dict):
        raise TrainerError("metrics is a {}, not a dict of names and functions".format(
            type(metrics).__name__), "e.g. metrics={\"mae\": lambda outputs, targets: "
            "(outputs - targets).abs().mean()}", EX_USAGE)
    for name, function in metrics.items():
        if not isinstance(name, str) or not name.isidentifier() or name in RESERVED_METRICS:
            raise TrainerError("metrics key {!r} is not a name of its own".format(name),
                               "name each metric by an identifier other than {}".format(
                                   ", ".join(RESERVED_METRICS)), EX_USAGE)
        check_callable(function, "metrics[{!r}]".format(name), "a function of (outputs, "
                       "targets) returning the batch's mean as a scalar tensor")
    return dict(metrics)


def first_step_check(model: torch.nn.Module, loss_fn: Callable, sample: Any,
                     name: str = "train_set", exit_code: int = EX_USAGE,
                     metrics: Optional[Dict[str, Callable]] = None) -> "Reports":
    """Run ``model`` and ``loss_fn`` once on ``sample`` (the first items of set ``name``)
    where the model is, in evaluation mode (no dropout draws, no batch-norm statistics
    change), so that a model that does not take the inputs, or a loss that is not a scalar,
    stops the run with one line (``exit_code``) before anything compiles. Returns what
    evaluation reports (``accuracy_kind``, ``token_kind``)."""
    x, y = sample
    fix = ("" if name == "train_set" else
           "; {}'s items must be what train_set's are: inputs and targets of the same shapes "
           "and dtypes".format(name))
    where = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            try:
                outputs = call_model(model, to_device(x, where))
            except Exception as error:
                raise TrainerError(
                    "model({}) failed on {}'s first items: {}: {}".format(
                        describe(x), name, type(error).__name__, _first_line(error)),
                    "the model takes a batch of the items' inputs (N x item shape)" + fix,
                    exit_code)
            try:
                loss = loss_of(loss_fn, outputs, to_device(x, where), y.to(where))
            except Exception as error:
                given = ("the batch of rows {}".format(describe(x))
                         if isinstance(loss_fn, BatchLoss) else
                         "targets of {} {}".format(y.dtype, tuple(y.shape)))
                raise TrainerError(
                    "loss_fn(outputs, {}) failed on {}'s first items: {}: {}".format(
                        given, name, type(error).__name__, _first_line(error)),
                    "loss_fn takes the model's outputs and a batch of the items' {}".format(
                        "rows" if isinstance(loss_fn, BatchLoss) else "targets") + fix,
                    exit_code)
            _scalar(loss, "loss_fn", name, "reduction='mean'", fix, exit_code)
            for metric, function in (metrics or {}).items():
                try:
                    value = function(outputs, y.to(where))
                except Exception as error:
                    raise TrainerError("metrics[{!r}](outputs, targets) failed on {}'s first "
                                       "items: {}: {}".format(metric, name,
                                                              type(error).__name__,
                                                              _first_line(error)),
                                       "a metric takes the model's outputs and a batch of the "
                                       "items' targets" + fix, exit_code)
                _scalar(value, "metrics[{!r}]".format(metric), name, "a mean", fix, exit_code)
    finally:
        model.train(was_training)
    return Reports(*accuracy_kind(outputs, y, loss_fn), *token_kind(outputs, y, loss_fn))


def _scalar(value: Any, what: str, name: str, example: str, fix: str, exit_code: int) -> None:
    """A usage error unless ``value`` (what ``what`` returned) is a scalar float tensor."""
    if (not isinstance(value, torch.Tensor) or value.dim() != 0
            or not value.dtype.is_floating_point):
        shown = ("a {} of shape {}".format(value.dtype, tuple(value.shape))
                 if isinstance(value, torch.Tensor) else "a {}".format(type(value).__name__))
        raise TrainerError("{} returned {}, not a scalar float tensor, on {}'s first "
                           "items".format(what, shown, name),
                           "reduce it to one number per batch, e.g. " + example + fix,
                           exit_code)


def accuracy_kind(outputs: Any, y: torch.Tensor, loss_fn: Callable) -> Tuple[List[int], bool]:
    """(the top-k to report, whether to report binary accuracy) for a model's ``outputs`` on
    targets ``y``, so that an accuracy means what its name says:

    - class scores ``N x C`` with ``C >= 2`` against class numbers (integers of shape N):
      top-1, and top-5 where there are more than 5 classes;
    - one logit per example (``N`` or ``N x 1``) against targets 0 and 1, integers (or
      booleans), or floats under a binary cross-entropy with logits: binary accuracy;
    - anything else: none (the loss alone)."""
    outputs = logits_of(outputs)
    if not isinstance(outputs, torch.Tensor) or not outputs.dtype.is_floating_point:
        return [], False
    rows = len(y) if y.dim() else 0
    integers = not y.dtype.is_floating_point
    if (outputs.dim() == 2 and outputs.shape[1] >= 2 and y.dim() == 1 and integers
            and y.dtype != torch.bool):
        return [k for k in (1, 5) if k < outputs.shape[1]], False
    one_logit = outputs.numel() == rows and outputs.dim() in (1, 2) and rows > 0
    zero_one = y.numel() == rows and bool(((y == 0) | (y == 1)).all())
    bce = isinstance(loss_fn, torch.nn.BCEWithLogitsLoss) or \
        loss_fn is torch.nn.functional.binary_cross_entropy_with_logits
    return [], bool(one_logit and zero_one and (integers or bce))


class Reports(NamedTuple):
    """What evaluation reports besides the loss (``steps.Steps``)."""

    topk: List[int]
    binary: bool
    token_scores: Optional[int]  # token_accuracy: the outputs' dimension of scores
    perplexity: bool


def token_kind(outputs: Any, y: torch.Tensor, loss_fn: Callable) -> Tuple[Optional[int], bool]:
    """(the dimension of the scores for ``token_accuracy``, or None; whether to report
    ``perplexity``) for a model's ``outputs`` on targets ``y``, where the outputs are scores
    per token against token numbers ``N x T`` (a language model's logits and labels):
    ``N x C x T`` as torch's cross-entropy takes them (dimension 1), or ``N x T x C`` (2, a
    language model's own layout, which a loss flattens), ``C >= 2``:

    - ``token_accuracy``, the share of the tokens whose label is not negative (-100 is the
      index torch's cross-entropy ignores) whose highest score is their label, where
      ``loss_fn`` is the user's or torch's: the targets are then aligned with the outputs as
      the loss takes them. Not for rows (Hugging Face's), whose loss is the model's own or
      one of the whole batch: a causal language model's labels are its inputs, shifted
      inside the model or the loss, so position t's scores predict label t + 1 there, and a
      masked one's do not;
    - ``perplexity``, ``exp`` of the evaluation loss, where that loss is a cross-entropy:
      torch's (``CrossEntropyLoss`` without label smoothing, ``cross_entropy``) or a model's
      own (Hugging Face's language models compute one)."""
    scores = logits_of(outputs)
    if not (isinstance(scores, torch.Tensor) and scores.dtype.is_floating_point
            and scores.dim() == 3 and y.dim() == 2 and not y.dtype.is_floating_point
            and y.dtype != torch.bool):
        return None, False
    torch_ce = (loss_fn is torch.nn.functional.cross_entropy
                or (isinstance(loss_fn, torch.nn.CrossEntropyLoss)
                    and not loss_fn.label_smoothing))
    # Where both layouts fit (T == C), the one the loss takes.
    layouts = [1, 2] if torch_ce else [2, 1]
    shape = tuple(scores.shape)
    fitting = [dim for dim in layouts if shape[dim] >= 2 and tuple(
        size for at, size in enumerate(shape) if at != dim) == tuple(y.shape)]
    if not fitting:
        return None, False
    # Rows (the model's own loss, or one of the batch): how labels meet the scores is the
    # model's or the loss's business (a causal LM shifts them), not knowable here.
    rows = loss_fn is output_loss or isinstance(loss_fn, BatchLoss)
    return (None if rows else fitting[0]), torch_ce or loss_fn is output_loss


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else repr(error)
