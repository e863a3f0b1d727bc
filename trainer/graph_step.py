"""The compiled path's training step as one graph: forward, backward and the SGD update of a
batch, traced once per batch shape into a single graph of aten ops that torch_xla compiles,
then run as one device execution per step.

Why not ``torch.compile`` of the eager step: dynamo cannot trace ``loss.backward()``, and
``Optimizer.step`` breaks the graph on purpose, so that step runs as five graphs, each with
its own host cost per step, which is what bounds small batches. ``make_fx`` records what
autograd actually runs, backward included, so the whole step is one graph.

The update is the rule of ``torch.optim.SGD`` as ``optim.build_optimizer`` configures it
(weight decay added to the gradient, momentum without dampening, no Nesterov), written with
tensor ops so that the rate can be a device tensor. Its state stays where ``torch.optim.SGD``
keeps it (``optimizer.state[p]["momentum_buffer"]``), so checkpoints are the same on both
paths and a resumed run reads the restored buffers.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Sequence, Tuple

import torch

from trainer import xla

LossFunction = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class OneGraphTrainStep:
    """``step(x, y, loss_total)``: one SGD step of ``model`` on the batch ``(x, y)`` at the
    optimizer's current rate, updating the parameters, the momentum buffers and the model's
    own buffers (batch-norm statistics) in place; returns ``loss_total`` plus the batch's
    loss. Each new batch shape is traced and compiled once.

    The rate must be a device tensor in the optimizer's group (``optim.LearningRate`` with a
    device), read at every step: a number would be a constant of the traced graph."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.SGD,
                 loss_fn: LossFunction) -> None:
        self.model, self.optimizer, self.loss_fn = model, optimizer, loss_fn
        self.momentum, self.weight_decay = sgd_settings(optimizer)
        if not isinstance(optimizer.param_groups[0]["lr"], torch.Tensor):
            raise ValueError("the one-graph step needs the learning rate as a device tensor "
                             "(optim.build_optimizer with rate_device)")
        named = list(model.named_parameters())
        self._parameter_names = [name for name, _ in named]
        self._parameters = [parameter for _, parameter in named]
        named_buffers = list(model.named_buffers())
        self._buffer_names = [name for name, _ in named_buffers]
        self._buffers = [buffer for _, buffer in named_buffers]
        self._compiled: Dict[Tuple, Callable[..., torch.Tensor]] = {}

    def __call__(self, x: torch.Tensor, y: torch.Tensor,
                 loss_total: torch.Tensor) -> torch.Tensor:
        # Detached views: the graph writes the new values through them into the parameters
        # (autograd does not allow in-place writes to leaves that require grad).
        inputs = ([parameter.detach() for parameter in self._parameters], self._buffers,
                  self._momentum_buffers(), x, y, self.optimizer.param_groups[0]["lr"],
                  loss_total)
        signature = (tuple(x.shape), x.dtype, tuple(y.shape), y.dtype)
        step = self._compiled.get(signature)
        if step is None:
            step = self._compiled[signature] = self._trace(inputs)
        return step(*inputs)

    def _trace(self, inputs: Tuple) -> Callable[..., torch.Tensor]:
        from torch.fx.experimental.proxy_tensor import make_fx

        # Fake tensors: tracing computes nothing on the device and leaves the state as is.
        # (A plain function: make_fx miscounts the arguments of a bound method.)
        trace = make_fx(lambda *arguments: self._step(*arguments), tracing_mode="fake")
        return xla.compile_traced(trace(*inputs))

    def _step(self, parameters: List[torch.Tensor], buffers: List[torch.Tensor],
              momentum_buffers: List[torch.Tensor], x: torch.Tensor, y: torch.Tensor,
              rate: torch.Tensor, loss_total: torch.Tensor) -> torch.Tensor:
        """The traced function, written as eager code on the parameters it is given."""
        leaves = [parameter.detach().requires_grad_() for parameter in parameters]
        tensors = dict(zip(self._parameter_names, leaves))
        tensors.update(zip(self._buffer_names, buffers))
        loss = self.loss_fn(torch.func.functional_call(self.model, tensors, (x,)), y)
        gradients = torch.autograd.grad(loss, leaves)
        with torch.no_grad():
            sgd_update(parameters, gradients, momentum_buffers, rate, self.momentum,
                       self.weight_decay)
        return loss_total + loss.detach()

    def _momentum_buffers(self) -> List[torch.Tensor]:
        """The optimizer's momentum buffers, read afresh every step (loading a checkpoint
        replaces them); zeros where there are none yet, which with no dampening is the
        same first step as ``torch.optim.SGD``'s copy of the gradient."""
        if not self.momentum:
            return []
        buffers = []
        for parameter in self._parameters:
            state = self.optimizer.state[parameter]
            if state.get("momentum_buffer") is None:
                state["momentum_buffer"] = torch.zeros_like(parameter.detach())
            buffers.append(state["momentum_buffer"])
        return buffers


def sgd_update(parameters: Sequence[torch.Tensor], gradients: Sequence[torch.Tensor],
               momentum_buffers: Sequence[torch.Tensor], rate: torch.Tensor,
               momentum: float, weight_decay: float) -> None:
    """``torch.optim.SGD``'s update (no dampening, no Nesterov), in place; ``momentum_buffers``
    is empty when ``momentum`` is 0."""
    for index, (parameter, gradient) in enumerate(zip(parameters, gradients)):
        if weight_decay:
            gradient = gradient.add(parameter, alpha=weight_decay)
        if momentum:
            gradient = momentum_buffers[index].mul_(momentum).add_(gradient)
        parameter.sub_(gradient * rate)


def sgd_settings(optimizer: torch.optim.Optimizer) -> Tuple[float, float]:
    """(momentum, weight decay) of an SGD optimizer whose update ``sgd_update`` computes;
    ValueError for any other optimizer, so that the graph never trains with another rule than
    the lazy path's."""
    groups = optimizer.param_groups
    group = groups[0]
    if not isinstance(optimizer, torch.optim.SGD) or len(groups) != 1 or \
            group["nesterov"] or group["dampening"] or group["maximize"]:
        raise ValueError("the one-graph step computes plain SGD with one parameter group "
                         "(momentum and weight decay, no dampening, Nesterov or maximize)")
    return float(group["momentum"]), float(group["weight_decay"])
