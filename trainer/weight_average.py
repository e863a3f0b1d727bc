"""``--ema_decay=D``: an exponential moving average of the weights (timm's ``--model-ema``,
Polyak averaging), kept beside them through training, evaluated beside them, checkpointed and
exported as ``model-ema.pt``.

After every optimizer step each trained parameter's average becomes
``average + (parameter - average) * (1 - D)`` (``torch.lerp``'s, timm's ``ModelEmaV3`` rule
without warmup), on the device: inside the compiled step's graph, or after the lazy step's
update. The averages start as the weights of step 0 (a fresh run) or as a checkpoint's. A
frozen parameter has none: its average is itself. Buffers (batch-norm statistics) are not
averaged: the averaged model uses the model's own, as it is when evaluated or exported.

Evaluation runs each batch through the model twice, once with the averages in the
parameters' places (``swapped``, lazily on either step path: ``steps.Steps.evaluate`` says
why), and reports their figures as ``ema_`` + name (``ema_top1``, ``ema_loss``) beside the
weights'. A resume is
exact: the checkpoints hold the averages (``state_dict``), so a stopped and resumed run ends
on the averages an uninterrupted one reaches.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Dict, Iterator, List, Sequence

import torch

log = logging.getLogger("trainer")

PREFIX = "ema_"  # the averaged model's evaluation figures: ema_top1, ema_loss ...
AVERAGED_MODEL = "model-ema.pt"  # the averaged weights at the end, beside model.pt


class WeightAverage:
    """The averages of ``model``'s trained parameters (``requires_grad``), on their device."""

    def __init__(self, model: torch.nn.Module, decay: float) -> None:
        self.decay = decay
        named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
        self.names = [name for name, _ in named]
        self.parameters = [parameter for _, parameter in named]
        self.averages = [parameter.detach().clone() for parameter in self.parameters]

    def update(self) -> None:
        """One step's averaging, in place (the lazy path, after the optimizer's step)."""
        with torch.no_grad():
            for average, parameter in zip(self.averages, self.parameters):
                average.lerp_(parameter.detach(), 1.0 - self.decay)

    def updated(self, averages: Sequence[torch.Tensor], parameters: Sequence[torch.Tensor]
                ) -> List[torch.Tensor]:
        """``update``'s rule as new tensors (the compiled step's graph: it writes no input)."""
        return [torch.lerp(average, parameter, 1.0 - self.decay)
                for average, parameter in zip(averages, parameters)]

    def of(self, parameters: Sequence[torch.Tensor]) -> List[torch.Tensor]:
        """The averages of ``parameters`` (trained ones of the model), in that order."""
        index = {id(parameter): at for at, parameter in enumerate(self.parameters)}
        return [self.averages[index[id(parameter)]] for parameter in parameters]

    def rebind(self, parameters: Sequence[torch.Tensor], values: Sequence[torch.Tensor]
               ) -> None:
        """The averages of ``parameters`` now hold ``values`` (the compiled step's outputs)."""
        for average, value in zip(self.of(parameters), values):
            average.data = value

    @contextlib.contextmanager
    def swapped(self) -> Iterator[None]:
        """The model's parameters hold the averages meanwhile (their data swapped, not
        copied), and their own values again after."""
        own = [parameter.data for parameter in self.parameters]
        for parameter, average in zip(self.parameters, self.averages):
            parameter.data = average
        try:
            yield
        finally:
            for parameter, data in zip(self.parameters, own):
                parameter.data = data

    def state_dict(self) -> Dict[str, torch.Tensor]:
        """The averages by parameter name (as the device holds them: ``to_cpu`` them)."""
        return dict(zip(self.names, self.averages))

    def load_state_dict(self, saved: Dict[str, torch.Tensor]) -> None:
        """The averages of a checkpoint (by name; one not saved, a parameter unfrozen since,
        starts from its weights)."""
        for at, name in enumerate(self.names):
            if name in saved:
                self.averages[at] = saved[name].to(self.parameters[at].device,
                                                   self.parameters[at].dtype)
            else:
                self.averages[at] = self.parameters[at].detach().clone()
