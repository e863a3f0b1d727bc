"""The compiled path's steps, each one graph: the training step (forward, backward and the SGD
update of a batch) and the evaluation step are traced with ``make_fx`` into graphs of aten ops
once per batch shape, compiled by torch_xla, and then run as one device execution per step.

Why not ``torch.compile`` of the eager steps: dynamo cannot trace ``loss.backward()``, and
``Optimizer.step`` breaks the graph on purpose, so a training step runs as five graphs, each
with its own host cost per step, which is what bounds small batches; and dynamo's capture
retraces Python bytecode, a second first-step cost on top of the trace. ``make_fx`` records
what autograd actually runs, backward included, so the whole step is one graph.

The update is the rule of ``torch.optim.SGD`` as ``optim.build_optimizer`` configures it
(weight decay added to the gradient, momentum without dampening, no Nesterov), or of
``torch.optim.AdamW`` (``--optimizer=adamw``: decoupled weight decay per parameter group, no
amsgrad), written with tensor ops so that the rate can be a tensor the graph computes. Its
state stays where the torch optimizer keeps it (``optimizer.state[p]["momentum_buffer"]``;
``"step"``, ``"exp_avg"``, ``"exp_avg_sq"``), so checkpoints are the same on both paths and a
resumed run reads the restored state.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch

from trainer import xla
from trainer.batch_tree import arguments, flatten, loss_of, micro_batch, unflatten
from trainer.param_groups import lr_scale
from trainer.weight_average import WeightAverage

LossFunction = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
Tensors = Sequence[torch.Tensor]


class TracedPerShape:
    """``function(*state, *batch)`` (tensors in, a tuple of tensors out) traced and compiled
    once for each shape of ``batch`` and mode of ``model`` (training or evaluation; the trace
    records the one it ran in). ``state`` is what never changes shape: parameters, buffers.

    The trace runs on fake tensors: it computes nothing and leaves the state as it is.
    ``function`` must not write to its inputs: the compiled graph would write them back one
    copy at a time, a host cost per step that returning new values and rebinding them
    (``rebind``) does not have."""

    def __init__(self, model: torch.nn.Module,
                 function: Callable[..., Tuple[torch.Tensor, ...]]) -> None:
        self.model, self.function = model, function
        self._compiled: Dict[Tuple, Callable[..., Sequence[torch.Tensor]]] = {}

    def __call__(self, state: Tensors, batch: Tensors, structure: Any = None
                 ) -> Sequence[torch.Tensor]:
        """``structure``: what else tells batches apart (the input's ``batch_tree``
        structure), part of the signature."""
        inputs = list(state) + list(batch)
        signature = (self.model.training, str(structure)) + tuple(
            (tuple(t.shape), t.dtype) for t in batch)
        compiled = self._compiled.get(signature)
        if compiled is None:
            from torch.fx.experimental.proxy_tensor import make_fx

            # A plain function: make_fx miscounts the arguments of a bound method.
            trace = make_fx(lambda *tensors: self.function(*tensors), tracing_mode="fake")
            # Compiling advances the device's random state (torch_xla cuts a graph on the
            # way): put it back, so that the first call draws from the state it was given, as
            # every later call does (``steps.Steps.train`` seeds each step: a resumed run's
            # first step, which compiles, then draws as the same step of an uninterrupted run).
            device = inputs[0].device
            seed = xla.rng_state(device)
            compiled = self._compiled[signature] = xla.compile_traced(trace(*inputs), inputs)
            xla.set_rng_state(seed, device)
        return compiled(*inputs)


class ModelTensors:
    """``model``'s parameters and buffers as flat lists, and calls of ``model`` on other
    tensors in their places (how a traced function sees the model: as its inputs, not as
    constants)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        named = list(model.named_parameters())
        self.parameter_names = [name for name, _ in named]
        self.parameters = [parameter for _, parameter in named]
        named_buffers = list(model.named_buffers())
        self.buffer_names = [name for name, _ in named_buffers]
        self.buffers = [buffer for _, buffer in named_buffers]

    def state(self) -> List[torch.Tensor]:
        """Parameters then buffers."""
        return self.parameters + self.buffers

    def call(self, parameters: Tensors, buffers: Tensors, x: Any) -> Any:
        """The model on input ``x`` (a tensor, or a tuple, list or dict of them:
        ``batch_tree.arguments``) with these tensors in its parameters' and buffers' places."""
        tensors = dict(zip(self.parameter_names, parameters))
        tensors.update(zip(self.buffer_names, buffers))
        args, kwargs = arguments(self.model, x)
        return torch.func.functional_call(self.model, tensors, args, kwargs)


class OneGraphTrainStep:
    """``step(number, x, y, loss_total)``: SGD step ``number`` (0-based, over the run) of
    ``model`` on the batch ``(x, y)``; the parameters, the momentum buffers and the model's own
    buffers (batch-norm statistics) then hold the new values. Returns ``loss_total`` plus the
    batch's loss.

    Only the parameters that require a gradient train, as ``torch.optim`` treats them: a
    frozen one (``requires_grad=False``, a frozen backbone) is an input of the graph and never
    an output, gets no gradient, no optimizer state and no weight decay. Which parameters are
    frozen is read when the step is made (``Steps``, once per run).

    With ``clip_norm``, ``grad_norm`` holds the step's global gradient norm before clipping
    (a device scalar, float32), as ``clip_grad_norm_`` returns it.

    The rate is ``rate_at(number)`` (``optim.LearningRate.rate_at``), computed inside the graph
    from a step counter that the graph also advances, so consecutive steps upload nothing but
    their batch; the counter is uploaded only when ``number`` is not the one after the last
    (the first step, a resumed run). The optimizer's own rate is not read.

    ``accumulate`` micro-batches (``Steps``; ``groups``: the devices the batch's rows are
    blocks of) run forward and backward one after the other in the graph, their gradients
    summed before the one update."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.SGD,
                 loss_fn: LossFunction, rate_at: Callable[[torch.Tensor], torch.Tensor],
                 autocast: Callable[[], Any] = contextlib.nullcontext,
                 clip_norm: float = 0.0, accumulate: int = 1, groups: int = 1,
                 average: Optional[WeightAverage] = None) -> None:
        self.optimizer, self.loss_fn, self.rate_at = optimizer, loss_fn, rate_at
        self.autocast, self.clip_norm = autocast, clip_norm
        self.accumulate, self.groups = accumulate, groups
        self.average = average  # --ema_decay's averages, updated in the graph
        self.tensors = ModelTensors(model)
        # The parameters that train, then the frozen ones: the graph's inputs in that order.
        every = self.tensors.parameters
        self._order = sorted(range(len(every)), key=lambda index: not every[index].requires_grad)
        self.trained = [every[index] for index in self._order if every[index].requires_grad]
        self.frozen = [every[index] for index in self._order if not every[index].requires_grad]
        self.rule = update_rule(optimizer, self.trained)
        # Trained and frozen parameters, buffers, optimizer state and the weights' averages:
        # how many of each, in and out of the graph.
        self._sizes = (len(self.trained), len(self.frozen), len(self.tensors.buffers),
                       len(self.trained) * self.rule.slots,
                       len(self.trained) if average is not None else 0)
        self._graph = TracedPerShape(model, self._step)
        self._counter: Optional[torch.Tensor] = None  # on the device: the next step's number
        self._next_number: Optional[int] = None
        self._structure: Any = None  # the input's, while a step is traced
        # With clipping: the last step's gradient norm before it, on the device.
        self.grad_norm: Optional[torch.Tensor] = None
        # Under FSDP (some tensor of the state split): ``xla.split_as``, through which the
        # traced step returns the state, so that the next step gets it in the same layout.
        self._split_as: Optional[Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = None
        self._layout_known = False

    def __call__(self, number: int, x: Any, y: torch.Tensor,
                 loss_total: torch.Tensor) -> torch.Tensor:
        if number != self._next_number:
            self._counter = xla.device_number(number, y.device, torch.int32)
        state = (self.trained + self.frozen + self.tensors.buffers
                 + self.rule.read(self.optimizer, self.trained)
                 + (self.average.of(self.trained) if self.average is not None else []))
        leaves, self._structure = flatten(x)
        if not self._layout_known:  # once: the optimizer state is made at the first step
            self._layout_known = True
            if any(xla.sharded(tensor) for tensor in state):
                self._split_as = xla.split_as()  # FSDP: each new value split as its old one
        outputs = self._graph(state, tuple(leaves) + (y, self._counter, loss_total),
                              self._structure)
        (new_parameters, new_buffers, new_slots, new_averages,
         (loss_total, self._counter, *norm)) = _split(
            outputs, self._sizes[0], self._sizes[2], self._sizes[3], self._sizes[4])
        self.grad_norm = norm[0] if norm else None
        self._next_number = number + 1
        rebind(self.trained, new_parameters)
        rebind(self.tensors.buffers, new_buffers)
        self.rule.write(self.optimizer, self.trained, new_slots, number + 1)
        if self.average is not None:
            self.average.rebind(self.trained, new_averages)
        return loss_total

    def _step(self, *inputs: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        """The traced function: eager code on the tensors it is given, which it leaves as
        they are; returns the new parameters, buffers, optimizer state and averages, then the
        loss total, the next step's counter and (with clipping) the gradients' norm."""
        parameters, frozen, old_buffers, slots, averages, batch = _split(inputs, *self._sizes)
        x = unflatten(batch[:-3], self._structure)
        y, counter, loss_total = batch[-3:]
        leaves = [parameter.detach().requires_grad_() for parameter in parameters]
        # The model's parameters in its own order (``ModelTensors``), frozen ones as given.
        ordered: List[torch.Tensor] = [torch.empty(0)] * len(self._order)
        for index, tensor in zip(self._order, leaves + list(frozen)):
            ordered[index] = tensor
        # The forward updates batch-norm statistics in place: on copies, which it returns.
        buffers = [buffer.clone() for buffer in old_buffers]
        if self.accumulate == 1:
            with self.autocast():
                loss = loss_of(self.loss_fn, self.tensors.call(ordered, buffers, x), x, y)
            gradients = torch.autograd.grad(loss, leaves)
        else:
            loss, gradients = self._accumulated(ordered, buffers, x, y, leaves)
        with torch.no_grad():
            norm: Tuple[torch.Tensor, ...] = ()
            if self.clip_norm:
                gradients, found = clipped(gradients, self.clip_norm)
                norm = (found.float(),)
            rate = self.rate_at(counter.to(torch.float32))[0]
            new_parameters, new_slots = self.rule.update(parameters, gradients, slots, rate,
                                                         counter)
            new_averages = (self.average.updated(averages, new_parameters)
                            if self.average is not None else [])
        state = list(new_parameters) + list(buffers) + list(new_slots) + list(new_averages)
        if self._split_as is not None:
            state = [self._split_as(new, old) for new, old in zip(
                state, list(parameters) + list(old_buffers) + list(slots) + list(averages))]
        return tuple(state) + (loss_total + loss.detach(), counter + 1) + norm

    def _accumulated(self, ordered: Tensors, buffers: Tensors, x: Any, y: torch.Tensor,
                     leaves: Tensors) -> Tuple[torch.Tensor, List[torch.Tensor]]:
        """(the micro-batches' mean loss, the sum of their gradients of loss / accumulate)."""
        losses: List[torch.Tensor] = []
        gradients: List[torch.Tensor] = []
        for part in range(self.accumulate):
            x_part, y_part = micro_batch((x, y), part, self.accumulate, self.groups)
            with self.autocast():
                loss = loss_of(self.loss_fn, self.tensors.call(ordered, buffers, x_part),
                               x_part, y_part)
            found = torch.autograd.grad(loss / self.accumulate, leaves)
            gradients = list(found) if not gradients else [
                total + more for total, more in zip(gradients, found)]
            losses.append(loss.detach())
        return torch.stack(losses).mean(), gradients


class OneGraphEvalStep:
    """``step(x, y, totals)``: ``count(model(x), x, y, totals)`` as one graph, where
    ``totals`` is a flat list of device tensors and ``count`` returns their new values."""

    def __init__(self, model: torch.nn.Module,
                 count: Callable[[Any, Any, torch.Tensor, Tensors], Tensors],
                 autocast: Callable[[], Any] = contextlib.nullcontext) -> None:
        self.count, self.autocast = count, autocast
        self.tensors = ModelTensors(model)
        self._graph = TracedPerShape(model, self._step)
        self._structure: Any = None  # the input's, while a step is traced
        self._leaves = 1  # its tensors

    def __call__(self, x: Any, y: torch.Tensor, totals: Tensors) -> Sequence[torch.Tensor]:
        leaves, self._structure = flatten(x)
        self._leaves = len(leaves)
        return self._graph(self.tensors.state(), list(leaves) + [y] + list(totals),
                           self._structure)

    def _step(self, *inputs: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        parameters, buffers, leaves, (y,), totals = _split(
            inputs, len(self.tensors.parameters), len(self.tensors.buffers), self._leaves, 1)
        x = unflatten(leaves, self._structure)
        with torch.no_grad():
            with self.autocast():
                scores = self.tensors.call(parameters, buffers, x)
            return tuple(self.count(scores, x, y, totals))


def clipped(gradients: Tensors, max_norm: float) -> Tuple[List[torch.Tensor], torch.Tensor]:
    """(``gradients`` scaled as ``torch.nn.utils.clip_grad_norm_(..., max_norm)`` scales them:
    by ``max_norm / (norm + 1e-6)`` where that is below 1, the norm before: what
    ``clip_grad_norm_`` returns), ``norm`` being the L2 norm of all of them together (under
    SPMD each gradient is the whole tensor: the norm is global)."""
    norm = torch.linalg.vector_norm(
        torch.stack([torch.linalg.vector_norm(g) for g in gradients]))
    scale = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    return [gradient * scale.to(gradient.dtype) for gradient in gradients], norm


def _split(tensors: Tensors, *sizes: int) -> List[Tensors]:
    """Consecutive slices of ``tensors`` of the given sizes, then the rest."""
    parts, start = [], 0
    for size in sizes:
        parts.append(tensors[start:start + size])
        start += size
    return parts + [tensors[start:]]


def sgd_step(parameters: Tensors, gradients: Tensors, momentum_buffers: Tensors,
             rate: torch.Tensor, momentum: float, weight_decay: Union[float, Sequence[float]],
             scales: Optional[Sequence[float]] = None
             ) -> Tuple[List[torch.Tensor], List[torch.Tensor]]:
    """``torch.optim.SGD``'s update (no dampening, no Nesterov) as new tensors: (parameters,
    momentum buffers); no momentum buffers in or out when ``momentum`` is 0.
    ``weight_decay``: one for all, or each parameter's; ``scales``: each parameter's rate as a
    multiple of ``rate`` (its group's ``lr_scale``; None: 1 for all)."""
    decays = _each(weight_decay, len(parameters))
    new_parameters, new_momentum = [], []
    for index, (parameter, gradient) in enumerate(zip(parameters, gradients)):
        if decays[index]:
            gradient = gradient.add(parameter, alpha=decays[index])
        if momentum:
            gradient = momentum_buffers[index] * momentum + gradient
            new_momentum.append(gradient)
        new_parameters.append(parameter - gradient * _scaled(rate, scales, index))
    return new_parameters, new_momentum


def _each(value: Union[float, Sequence[float]], count: int) -> Sequence[float]:
    return [float(value)] * count if isinstance(value, (int, float)) else value


def _scaled(rate: torch.Tensor, scales: Optional[Sequence[float]], index: int) -> torch.Tensor:
    """``rate`` times parameter ``index``'s scale: no op in the graph for a scale of 1 (every
    parameter without groups of the user's)."""
    if scales is None or scales[index] == 1.0:
        return rate
    return rate * scales[index]


def adamw_step(parameters: Tensors, gradients: Tensors, exp_avgs: Tensors, exp_avg_sqs: Tensors,
               step: torch.Tensor, rate: torch.Tensor, betas: Tuple[float, float], eps: float,
               weight_decays: Sequence[float], scales: Optional[Sequence[float]] = None
               ) -> Tuple[List[torch.Tensor], List[torch.Tensor], List[torch.Tensor]]:
    """``torch.optim.AdamW``'s update (no amsgrad, not maximize) as new tensors: (parameters,
    first moments, second moments); ``step`` is the update's 1-based number (a float tensor),
    ``weight_decays`` each parameter's, ``scales`` each parameter's rate as a multiple of
    ``rate`` (None: 1 for all)."""
    beta1, beta2 = betas
    # 1 - beta^step as -expm1(step log beta): exact to the dtype's precision, where 1 - 0.999^4
    # in float32 keeps only 2 of its digits.
    correction1 = -torch.expm1(step * math.log(beta1))
    correction2_sqrt = torch.sqrt(-torch.expm1(step * math.log(beta2)))
    new_parameters, new_avgs, new_sqs = [], [], []
    for index, (parameter, gradient, avg, sq, decay) in enumerate(zip(
            parameters, gradients, exp_avgs, exp_avg_sqs, weight_decays)):
        own_rate = _scaled(rate, scales, index)
        step_size = own_rate / correction1
        if decay:
            parameter = parameter * (1.0 - own_rate * decay)
        avg = avg + (gradient - avg) * (1.0 - beta1)  # torch: exp_avg.lerp_(grad, 1 - beta1)
        sq = sq * beta2 + gradient * gradient * (1.0 - beta2)
        denominator = sq.sqrt() / correction2_sqrt + eps
        new_parameters.append(parameter - step_size * avg / denominator)
        new_avgs.append(avg)
        new_sqs.append(sq)
    return new_parameters, new_avgs, new_sqs


class SgdRule:
    """SGD in the graph: one slot per parameter (its momentum buffer) where there is
    momentum."""

    def __init__(self, optimizer: torch.optim.Optimizer, parameters: Tensors) -> None:
        self.momentum = sgd_settings(optimizer)
        self.slots = 1 if self.momentum else 0
        self.weight_decays = group_values(optimizer, parameters, "weight_decay")
        self.scales = group_scales(optimizer, parameters)

    def read(self, optimizer: torch.optim.Optimizer, parameters: Tensors) -> List[torch.Tensor]:
        """The optimizer's momentum buffers, read afresh every step (loading a checkpoint
        replaces them); zeros where there are none yet, which with no dampening is the
        same first step as ``torch.optim.SGD``'s copy of the gradient."""
        if not self.momentum:
            return []
        return [_slot(optimizer, parameter, "momentum_buffer") for parameter in parameters]

    def update(self, parameters: Tensors, gradients: Tensors, slots: Tensors,
               rate: torch.Tensor, counter: torch.Tensor
               ) -> Tuple[List[torch.Tensor], List[torch.Tensor]]:
        return sgd_step(parameters, gradients, slots, rate, self.momentum, self.weight_decays,
                        self.scales)

    def write(self, optimizer: torch.optim.Optimizer, parameters: Tensors, slots: Tensors,
              steps_taken: int) -> None:
        for parameter, buffer in zip(parameters, slots):
            optimizer.state[parameter]["momentum_buffer"] = buffer


class AdamWRule:
    """AdamW in the graph: two slots per parameter (``exp_avg`` then ``exp_avg_sq``); the
    update's number is the step counter's plus one, and ``state["step"]`` is written back as
    ``torch.optim.AdamW`` keeps it (a float32 host tensor), so either path resumes the other's
    checkpoint."""

    slots = 2

    def __init__(self, optimizer: torch.optim.Optimizer, parameters: Tensors) -> None:
        groups = optimizer.param_groups
        settings = {(tuple(g["betas"]), g["eps"], g["amsgrad"], g["maximize"]) for g in groups}
        if not isinstance(optimizer, torch.optim.AdamW) or len(settings) != 1 or \
                groups[0]["amsgrad"] or groups[0]["maximize"]:
            raise ValueError("the one-graph step computes AdamW without amsgrad or maximize, "
                             "with the same betas and eps in every parameter group")
        self.betas = tuple(float(beta) for beta in groups[0]["betas"])
        self.eps = float(groups[0]["eps"])
        self.weight_decays = group_values(optimizer, parameters, "weight_decay")
        self.scales = group_scales(optimizer, parameters)

    def read(self, optimizer: torch.optim.Optimizer, parameters: Tensors) -> List[torch.Tensor]:
        return ([_slot(optimizer, parameter, "exp_avg") for parameter in parameters]
                + [_slot(optimizer, parameter, "exp_avg_sq") for parameter in parameters])

    def update(self, parameters: Tensors, gradients: Tensors, slots: Tensors,
               rate: torch.Tensor, counter: torch.Tensor
               ) -> Tuple[List[torch.Tensor], List[torch.Tensor]]:
        count = len(parameters)
        new_parameters, avgs, sqs = adamw_step(
            parameters, gradients, slots[:count], slots[count:],
            counter.to(parameters[0].dtype)[0] + 1.0, rate, self.betas, self.eps,
            self.weight_decays, self.scales)
        return new_parameters, avgs + sqs

    def write(self, optimizer: torch.optim.Optimizer, parameters: Tensors, slots: Tensors,
              steps_taken: int) -> None:
        count = len(parameters)
        for index, parameter in enumerate(parameters):
            state = optimizer.state[parameter]
            state["step"] = torch.tensor(float(steps_taken))
            state["exp_avg"], state["exp_avg_sq"] = slots[index], slots[count + index]


def update_rule(optimizer: torch.optim.Optimizer, parameters: Tensors) -> Any:
    """The graph's rule for ``optimizer``: ``AdamWRule`` or ``SgdRule`` (ValueError for any
    other optimizer, so that the graph never trains with another rule than the lazy path's)."""
    if isinstance(optimizer, torch.optim.AdamW):
        return AdamWRule(optimizer, parameters)
    return SgdRule(optimizer, parameters)


def group_values(optimizer: torch.optim.Optimizer, parameters: Tensors, key: str
                 ) -> List[float]:
    """Each parameter's ``key`` (``weight_decay``) from its group, read when the step is made:
    a resumed run's groups are the checkpoint's, loaded before (``RunCheckpoints.resume``)."""
    found = {id(p): float(g[key]) for g in optimizer.param_groups for p in g["params"]}
    if not all(id(parameter) in found for parameter in parameters):
        raise ValueError("the optimizer does not hold every parameter that trains (made "
                         "before the model moved to its device?)")
    return [found[id(parameter)] for parameter in parameters]


def group_scales(optimizer: torch.optim.Optimizer, parameters: Tensors
                 ) -> Optional[List[float]]:
    """Each parameter's rate as a multiple of the run's (its group's ``lr_scale``), or None
    where all are 1 (no groups of the user's: the graph is as before groups)."""
    found = {id(p): lr_scale(g) for g in optimizer.param_groups for p in g["params"]}
    scales = [found[id(parameter)] for parameter in parameters]
    return None if all(scale == 1.0 for scale in scales) else scales


def _slot(optimizer: torch.optim.Optimizer, parameter: torch.Tensor, key: str) -> torch.Tensor:
    """``optimizer.state[parameter][key]``, zeros first where there is none yet (uploaded:
    zeros made on the device would be one more graph to compile)."""
    state = optimizer.state[parameter]
    if state.get(key) is None:  # split as the parameter is (FSDP): no second compile for it
        state[key] = xla.shard_like(
            torch.zeros(parameter.shape, dtype=parameter.dtype).to(parameter.device), parameter)
    return state[key]


def rebind(tensors: Tensors, values: Tensors) -> None:
    """Make each tensor hold the matching value (same object, new data): how new parameters
    reach the model without a device copy each."""
    for tensor, value in zip(tensors, values):
        tensor.data = value


def sgd_settings(optimizer: torch.optim.Optimizer) -> float:
    """The momentum of an SGD optimizer whose update ``sgd_step`` computes (the same in every
    group; each group's weight decay and rate scale are its own); ValueError for any other
    optimizer, so that the graph never trains with another rule than the lazy path's."""
    groups = optimizer.param_groups
    if not isinstance(optimizer, torch.optim.SGD) or any(
            group["nesterov"] or group["dampening"] or group["maximize"] for group in groups):
        raise ValueError("the one-graph step computes plain SGD (momentum and weight decay, "
                         "no dampening, Nesterov or maximize)")
    if len({float(group["momentum"]) for group in groups}) != 1:
        raise ValueError("the one-graph step computes plain SGD with one momentum in every "
                         "parameter group")
    return float(groups[0]["momentum"])
