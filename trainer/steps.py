"""The two step functions of a run, training and evaluation, on the path ``xla.step_path``
chose: called once per batch on either path. On the compiled path each is traced once into
one graph (``graph_step``; for training: forward, backward and update), and after that each
call just runs that graph. On the lazy path every call is traced again and the device
loader's sync cuts and runs the graph.

Both keep everything on the device: the running loss total and the evaluation counts are
tensors passed in and returned, so no step reads a value back to the host.
"""

from __future__ import annotations

from typing import Callable, List, Sequence, Tuple

import torch

from trainer import xla
from trainer.graph_step import OneGraphEvalStep, OneGraphTrainStep
from trainer.optim import LearningRate

Counts = Tuple[List[torch.Tensor], torch.Tensor]


class Steps:
    """``train(x, y, loss_total)`` and ``evaluate(x, y, counts)`` for one model; ``path``
    says which way they run (``xla.LAZY`` or ``xla.COMPILED``)."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 learning_rate: LearningRate, loss_fn: Callable, topk: Sequence[int],
                 path: str, precision: str = xla.FP32) -> None:
        self.model, self.optimizer, self.learning_rate = model, optimizer, learning_rate
        self.loss_fn, self.topk, self.path = loss_fn, tuple(topk), path
        self.device = next(model.parameters()).device
        # The forward passes and the loss run in this context (``xla.mixed_precision``).
        self.autocast = xla.mixed_precision(precision)
        if path == xla.COMPILED:
            self._train = OneGraphTrainStep(model, optimizer, loss_fn, learning_rate.rate_at,
                                            self.autocast)
            self._count_batch = OneGraphEvalStep(model, self._count, self.autocast)
        else:
            self._train = self._lazy_train_step
            self._count_batch = self._lazy_count_batch

    def train(self, step: int, x: torch.Tensor, y: torch.Tensor,
              loss_total: torch.Tensor) -> torch.Tensor:
        """Optimisation step number ``step`` (0-based, over the run); returns the new running
        loss total."""
        return self._train(step, x, y, loss_total)

    def evaluate(self, x: torch.Tensor, y: torch.Tensor, counts: Counts) -> Counts:
        """Add the batch's top-k hits and its real (not padding) examples to ``counts``."""
        correct, seen = counts
        totals = self._count_batch(x, y, list(correct) + [seen])
        return list(totals[:-1]), totals[-1]

    def _lazy_train_step(self, step: int, x: torch.Tensor, y: torch.Tensor,
                         loss_total: torch.Tensor) -> torch.Tensor:
        self.learning_rate.set(step)
        self.optimizer.zero_grad(set_to_none=True)
        with self.autocast():
            loss = self.loss_fn(self.model(x), y)
        loss.backward()
        self.optimizer.step()
        return loss_total + loss.detach()

    def _lazy_count_batch(self, x: torch.Tensor, y: torch.Tensor,
                          totals: List[torch.Tensor]) -> List[torch.Tensor]:
        with torch.no_grad():
            with self.autocast():
                scores = self.model(x)
            return self._count(scores, y, totals)

    def _count(self, scores: torch.Tensor, y: torch.Tensor,
               totals: Sequence[torch.Tensor]) -> List[torch.Tensor]:
        """``totals`` (hits for each k, then examples seen) plus this batch's."""
        # With fewer than k classes, top-k counts every prediction as a hit.
        predictions = scores.topk(min(max(self.topk), scores.shape[1]), dim=1).indices
        hits = predictions.eq(y.view(-1, 1))  # padding labels (-1) never match
        correct = [total + hits[:, :k].any(dim=1).sum() for total, k in zip(totals,
                                                                              self.topk)]
        return correct + [totals[-1] + (y >= 0).sum()]

    def zero_counts(self) -> Counts:
        """Evaluation counts at zero, as device data (``xla.device_number``)."""
        return ([xla.device_number(0, self.device, torch.int64) for _ in self.topk],
                xla.device_number(0, self.device, torch.int64))
