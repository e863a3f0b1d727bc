"""The two step functions of a run, training and evaluation, on the path ``xla.step_path``
chose: called once per batch on either path. On the compiled path each is traced once into
one graph (``graph_step``; for training: forward, backward and update), and after that each
call just runs that graph. On the lazy path every call is traced again and the device
loader's sync cuts and runs the graph.

Both keep everything on the device: the running loss total and the evaluation counts are
tensors passed in and returned, so no step reads a value back to the host.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import math
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from trainer import xla
from trainer.batch_tree import call_model, logits_of, loss_of, micro_batch
from trainer.graph_step import OneGraphEvalStep, OneGraphTrainStep
from trainer.optim import LearningRate
from trainer.weight_average import PREFIX as AVERAGED
from trainer.weight_average import WeightAverage

log = logging.getLogger("trainer")
Counts = Tuple[List[torch.Tensor], torch.Tensor]
# Training steps' device seeds: --seed times this, plus the step (runs of different seeds
# never share one: a run has fewer steps than this).
_SEED_STRIDE = 2 ** 31


# ``Steps.results``' name for a binary classifier's accuracy (``binary``), a language model's
# share of tokens predicted (``tokens``) and the exp of its loss (``perplexity``).
BINARY_ACCURACY = "accuracy"
TOKEN_ACCURACY = "token_accuracy"
PERPLEXITY = "perplexity"


def headline_accuracy(results: Dict[str, float]) -> Optional[float]:
    """The run's accuracy in ``Steps.results``: top-1 of class scores, a binary classifier's
    accuracy or the share of tokens predicted; None where the outputs are none of them (only
    a loss)."""
    for name in ("top1", BINARY_ACCURACY, TOKEN_ACCURACY):
        if name in results:
            return results[name]
    return None


@dataclasses.dataclass(frozen=True)
class Scoring:
    """What evaluation counts and reports beyond top-k (``Steps`` says what each means)."""

    eval_rows: Optional[Callable[[int], int]] = None
    binary: bool = False
    metrics: Optional[Dict[str, Callable]] = None
    token_scores: Optional[int] = None
    perplexity: bool = False


@dataclasses.dataclass(frozen=True)
class StepOptions:
    """How training steps run beyond the optimizer and the path: ``seed`` (the steps' device
    draws), ``clip_norm`` (``--clip_grad_norm``, 0: none), ``accumulate``
    (``--grad_accum_steps``), ``groups`` (the devices, each with its own rows of a batch),
    ``ema_decay`` (``--ema_decay``, 0: no averages)."""

    seed: int = 0
    clip_norm: float = 0.0
    accumulate: int = 1
    groups: int = 1
    ema_decay: float = 0.0


class Steps:
    """``train(x, y, loss_total)`` and ``evaluate(x, y, counts)`` for one model; ``path``
    says which way they run (``xla.LAZY`` or ``xla.COMPILED``); ``scoring`` (``Scoring``) and
    ``options`` (``StepOptions``) the rest.

    ``eval_rows``: None, and evaluation counts top-k hits over the rows whose label is not
    negative (padding is labelled ``batches.IGNORE_LABEL``); or ``eval_rows(i)``, how many
    rows of evaluation batch ``i`` (counted from ``zero_counts``) are examples, a prefix, and
    evaluation cuts every batch to them, counts top-k there (``topk`` may be empty: outputs
    that are no class scores) and sums the loss too: ``loss_fn`` of the cut batch times its
    rows, so ``results`` reports the example-weighted mean of ``loss_fn`` over the batches
    (exact for losses that are means over examples). A batch cut short runs lazily, one more
    graph.

    ``binary``: the outputs are one logit per example against targets 0 and 1, and evaluation
    counts ``accuracy``, the share of examples whose logit is on their target's side of 0,
    instead of top-k (empty then).

    ``token_scores``: the outputs are scores per token against labels ``N x T``, on that
    dimension (1: ``N x C x T``, 2: ``N x T x C``), and evaluation counts ``token_accuracy``,
    over the tokens whose label is not negative (-100, what torch's cross-entropy ignores),
    instead of top-k. ``perplexity`` (with ``eval_rows``):
    ``results`` adds the exp of the loss (a cross-entropy: ``own_loop.token_kind``).

    ``metrics`` (with ``eval_rows``): the user's {name: fn(outputs, targets)}, each batch's
    mean on its real rows, summed times those rows and reported over all examples, as the
    loss is.

    ``accumulate`` (``--grad_accum_steps``): each training batch is that many micro-batches
    (``batch_tree.micro_batch``, each device's rows its own: ``groups`` devices), run forward
    and backward one after the other inside the one step; their gradients are summed, each
    micro-batch's loss divided by ``accumulate`` (the gradient of the whole batch's mean for a
    loss that is a mean over equal micro-batches), then one update. Batch statistics
    (BatchNorm) are per micro-batch, as timm and Lightning accumulate."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 learning_rate: LearningRate, loss_fn: Callable, topk: Sequence[int],
                 path: str, precision: str = xla.FP32, *, scoring: Scoring = Scoring(),
                 options: StepOptions = StepOptions()) -> None:
        eval_rows, binary, metrics = scoring.eval_rows, scoring.binary, scoring.metrics
        token_scores, perplexity = scoring.token_scores, scoring.perplexity
        seed, clip_norm, ema_decay = options.seed, options.clip_norm, options.ema_decay
        accumulate, groups = options.accumulate, options.groups
        self.model, self.optimizer, self.learning_rate = model, optimizer, learning_rate
        self.loss_fn, self.topk, self.path = loss_fn, tuple(topk), path
        self.binary = binary
        self.clip_norm = clip_norm  # --clip_grad_norm (0: none)
        self.accumulate, self.groups = accumulate, groups  # --grad_accum_steps, devices
        self._lazy_norm: Optional[torch.Tensor] = None  # the lazy path's ``grad_norm``
        self._trained = [p for group in (optimizer.param_groups if optimizer else ())
                         for p in group["params"]]
        # What each hit count is reported as (``results``), in the order of the counts.
        self.token_scores = None if binary else token_scores
        self.tokens = self.token_scores is not None
        self.metric_names = ([BINARY_ACCURACY] if binary else [TOKEN_ACCURACY] if self.tokens
                             else ["top{}".format(k) for k in topk])
        # The hit counts, and in token mode the tokens counted (the share's denominator).
        self._counters = len(self.metric_names) + int(self.tokens)
        self.perplexity = perplexity and eval_rows is not None
        self.eval_rows = eval_rows
        self.metrics = dict(metrics or {}) if eval_rows is not None else {}
        self._seeds = seed * _SEED_STRIDE  # training step n's device draws: from this + n
        self._eval_batch = 0  # the next evaluation batch's number (``eval_rows``)
        self._rows: Optional[int] = None  # the rows of the batch being counted
        self.device = next(model.parameters()).device
        # --ema_decay: the weights' averages (``weight_average``), made where the model is.
        self.average = WeightAverage(model, ema_decay) if ema_decay else None
        # The forward passes and the loss run in this context (``xla.mixed_precision``).
        self.autocast = xla.mixed_precision(precision)
        if path == xla.COMPILED:
            self._train = OneGraphTrainStep(model, optimizer, loss_fn, learning_rate.rate_at,
                                            self.autocast, clip_norm, accumulate, groups,
                                            self.average)
            self._count_batch = OneGraphEvalStep(model, self._count, self.autocast)
        else:
            self._train = self._lazy_train_step
            self._count_batch = self._lazy_count_batch

    def train(self, step: int, x: torch.Tensor, y: torch.Tensor,
              loss_total: torch.Tensor) -> torch.Tensor:
        """Optimisation step number ``step`` (0-based, over the run); returns the new running
        loss total. Its random draws on the device (dropout) come from a seed of the run's
        ``seed`` and ``step`` alone: the device's own state advances at every graph cut
        (torch_xla), so it would depend on how often the run logged and checkpointed, and a
        resumed run would draw other masks than an uninterrupted one."""
        xla.set_rng_state(self._seeds + step, self.device)
        return self._train(step, x, y, loss_total)

    @property
    def grad_norm(self) -> Optional[torch.Tensor]:
        """With ``--clip_grad_norm``: the last step's global gradient norm before clipping, a
        device scalar (read it in a step closure); None without clipping."""
        if not self.clip_norm:
            return None
        if self.path == xla.COMPILED:
            return self._train.grad_norm
        return self._lazy_norm

    def evaluate(self, x: torch.Tensor, y: torch.Tensor, counts: Counts) -> Counts:
        """Add the batch's top-k hits and its real (not padding) examples to ``counts``; with
        ``--ema_decay`` the averaged weights' too, the batch run again with them (lazily)."""
        correct, seen = counts
        count = self._count_batch
        if self.eval_rows is not None:
            self._rows = self.eval_rows(self._eval_batch)
            self._eval_batch += 1
            if self._rows == 0:  # nothing of it counts (``DatasetSource.real_rows``)
                return counts
            if self._rows != len(y) and self.path == xla.COMPILED:
                # The one batch cut short runs lazily: its own compiled graph, under SPMD,
                # went on reading the parameters of the evaluation it was compiled in
                # (torch_xla 2.9's graph bridge; test_own_loop's two-device test found it).
                count = self._lazy_count_batch
        width = len(correct) // (1 if self.average is None else 2)
        totals = count(x, y, list(correct[:width]) + [seen])
        new = list(totals[:-1])
        if self.average is not None:
            # The averages in the parameters' data, lazily on either path: a compiled graph
            # given other tensors in its parameters' places (swapped in, or as inputs of a
            # graph of their own) counted wrong under SPMD, and the weights' graph after it too
            # (torch_xla 2.9, 2 CPU devices: test_own_loop's two-device test).
            with self.average.swapped():
                new += list(self._lazy_count_batch(x, y, list(correct[width:]) + [seen]))[:-1]
            xla.sync()  # one graph a batch, the same each time
        if count is not self._count_batch:
            xla.sync()
        return new, totals[-1]

    def results(self, counts: Counts) -> Dict[str, float]:
        """``top1`` ... (the share of examples counted) and, with ``eval_rows``, ``loss``,
        read in one transfer; with ``--ema_decay`` the averaged weights' as ``ema_top1``,
        ``ema_loss`` ... When no example was counted (an eval_set smaller than one global
        batch on a slice of several hosts: ``DatasetSource.real_rows``) there is nothing to
        report: no entry at all (a top-1 of 0 would read as a model that learnt nothing), and
        a warning says so."""
        correct, seen = counts
        # One transfer for every count: ``.item()`` on each would wait for a round trip each.
        fetched = [float(t.item()) for t in xla.to_host([seen] + list(correct))]
        count = int(fetched[0])
        if not count:
            log.warning("evaluation counted no example: no top-1 and no loss to report")
            return {}
        width = len(correct) // (1 if self.average is None else 2)
        results = self._figures(fetched[1:1 + width], count)
        if self.average is not None:
            results.update((AVERAGED + name, value) for name, value in
                           self._figures(fetched[1 + width:], count).items())
        return results

    def _figures(self, sums: List[float], count: int) -> Dict[str, float]:
        """One model's figures from its sums (``zero_counts``' order) over ``count``
        examples."""
        hits = self._counters
        if self.tokens:  # hits over the tokens counted, not the examples
            results = {TOKEN_ACCURACY: sums[0] / max(1.0, sums[1])}
        else:
            results = {name: total / count
                       for total, name in zip(sums[:hits], self.metric_names)}
        if self.eval_rows is not None:
            results["loss"] = sums[hits] / count
            if self.perplexity:  # exp of a cross-entropy in nats (inf past float's range)
                results[PERPLEXITY] = math.exp(min(results["loss"], 709.0))
            results.update((name, total / count) for name, total in
                           zip(self.metrics, sums[hits + 1:]))
        return results

    def _lazy_train_step(self, step: int, x: torch.Tensor, y: torch.Tensor,
                         loss_total: torch.Tensor) -> torch.Tensor:
        self.learning_rate.set(step)
        self.optimizer.zero_grad(set_to_none=True)
        if self.accumulate == 1:
            with self.autocast():
                loss = loss_of(self.loss_fn, call_model(self.model, x), x, y)
            loss.backward()
        else:  # the micro-batches' gradients summed into .grad, as eager accumulation does
            losses = []
            for part in range(self.accumulate):
                x_part, y_part = micro_batch((x, y), part, self.accumulate, self.groups)
                with self.autocast():
                    loss = loss_of(self.loss_fn, call_model(self.model, x_part), x_part, y_part)
                (loss / self.accumulate).backward()
                losses.append(loss.detach())
            loss = torch.stack(losses).mean()
        if self.clip_norm:  # over what the optimizer trains (never a frozen parameter)
            self._lazy_norm = torch.nn.utils.clip_grad_norm_(self._trained,
                                                             self.clip_norm).detach()
        self.optimizer.step()
        if self.average is not None:
            self.average.update()
        return loss_total + loss.detach()

    def _lazy_count_batch(self, x: torch.Tensor, y: torch.Tensor,
                          totals: List[torch.Tensor]) -> List[torch.Tensor]:
        with torch.no_grad():
            with self.autocast():
                outputs = call_model(self.model, x)
            return self._count(outputs, x, y, totals)

    def _count(self, outputs: Any, x: Any, y: torch.Tensor,
               totals: Sequence[torch.Tensor]) -> List[torch.Tensor]:
        """``totals`` (hits for each k, [the loss sum,] then examples seen) plus this
        batch's, from the model's ``outputs`` (their scores: ``batch_tree.logits_of``) on
        inputs ``x``."""
        if self.eval_rows is not None and self._rows != len(y):
            outputs, x, y = cut_rows((outputs, x, y), len(y), self._rows)
        scores = logits_of(outputs)
        correct: List[torch.Tensor] = []
        if self.binary:
            logits = scores.reshape(len(y), -1)[:, 0]
            targets = y.reshape(len(y), -1)[:, 0]
            # Padding labels (-1) never match.
            hits = (logits > 0).eq(targets > 0.5) & (targets >= 0)
            correct = [totals[0] + hits.sum()]
        elif self.tokens:
            counted = y >= 0  # -100 (and padding rows' labels) never count
            hits = scores.argmax(dim=self.token_scores).eq(y) & counted
            correct = [totals[0] + hits.sum(), totals[1] + counted.sum()]
        elif self.topk:
            # With fewer than k classes, top-k counts every prediction as a hit.
            predictions = scores.topk(min(max(self.topk), scores.shape[1]), dim=1).indices
            hits = predictions.eq(y.view(-1, 1))  # padding labels (-1) never match
            correct = [total + hits[:, :k].any(dim=1).sum()
                       for total, k in zip(totals, self.topk)]
        if self.eval_rows is None:
            return correct + [totals[-1] + (y >= 0).sum()]
        with self.autocast():
            loss = loss_of(self.loss_fn, outputs, x, y)
        sums = totals[len(correct):-1]  # the loss's, then each metric's
        means = [loss] + [function(outputs, y) for function in self.metrics.values()]
        return correct + [total + mean.float() * len(y) for total, mean in zip(sums, means)] + [
            totals[-1] + len(y)]

    def zero_counts(self) -> Counts:
        """Evaluation counts at zero, as device data (``xla.device_number``): the top-k
        hits [and the loss sum], then the examples seen."""
        self._eval_batch = 0
        sums = [xla.device_number(0, self.device, torch.int64) for _ in range(self._counters)]
        if self.eval_rows is not None:  # the loss's sum, then each metric's
            sums.extend(xla.device_number(0, self.device, torch.float32)
                        for _ in range(1 + len(self.metrics)))
        if self.average is not None:  # the averaged weights' alike
            sums += [xla.device_number(0, self.device, t.dtype) for t in sums]
        return sums, xla.device_number(0, self.device, torch.int64)


def cut_rows(outputs: Any, batch: int, rows: int) -> Any:
    """``outputs`` (a tensor, or tuples, lists and dicts of them: whatever the model returns,
    a Hugging Face ``ModelOutput`` included) with every tensor whose first dimension is the
    batch (``batch`` rows) cut to its first ``rows``; anything else as it is. A dict is copied
    and its entries replaced (a ``ModelOutput``'s attributes follow its entries), a tuple or
    list rebuilt as its own type."""
    if isinstance(outputs, torch.Tensor):
        return outputs[:rows] if outputs.dim() > 0 and outputs.shape[0] == batch else outputs
    if isinstance(outputs, dict):
        cut = copy.copy(outputs)
        for key, value in outputs.items():
            cut[key] = cut_rows(value, batch, rows)
        return cut
    if isinstance(outputs, (tuple, list)):
        parts = [cut_rows(value, batch, rows) for value in outputs]
        if isinstance(outputs, tuple) and hasattr(outputs, "_fields"):  # a namedtuple
            return type(outputs)(*parts)
        return type(outputs)(parts)
    return outputs
