"""A run whose training loss is no longer finite stops, before it checkpoints the weights.

Once a step's loss is nan or inf, the weights it updates are too, and every later step,
checkpoint and evaluation carries them on: the newest checkpoints would be replaced by ones a
resume cannot recover from, while the slice keeps computing nothing. The loop's running loss
(``LoopState.loss_total``, a sum on the device) stays non-finite once any step's loss was, so
the run needs no read of its own: the progress closure and each checkpoint read that sum
already, and both check it here (``check_loss``). Every process of a slice reads the same
replicated loss at the same step, so all of them stop together, with the same line and exit
code 65 (the platforms do not retry it: a resume from the last checkpoint would diverge at the
same step again with the same flags and data).

A step whose loss is still finite can leave non-finite weights (its gradient overflowed), so
the checkpoint writer also looks at the state it is handed (``check_state``), in its own
thread, off the loop's path: such a checkpoint is not written, and the run stops within a
step (``checkpoint_writer``), the next step's loss being nan.

A buffer the model was given holding nan or inf on purpose (an additive causal mask of
``-inf``) is no divergence: the buffers that hold such values before training
(``given_non_finite``) are not judged, in checkpoints, on resume or in ``model.pt``; every
other buffer is (batch-norm statistics that overflow stop the run as weights do)."""

from __future__ import annotations

import math
from typing import Any, Collection, FrozenSet

import torch

from trainer.checkpoints import non_finite
from trainer.errors import DataError
from trainer.loop import LoopState


def check_loss(state: LoopState, total: float, step: int) -> None:
    """Raise the run's ``DataError`` if ``total``, the running training loss read at
    ``step``, is nan or inf; else record ``step`` as the last one seen finite
    (``state.loss_finite_at``)."""
    if math.isfinite(total):
        state.loss_finite_at = max(state.loss_finite_at, step)
        return
    finite_until = state.loss_finite_at
    steps = ("step {}".format(step) if step - finite_until <= 1
             else "steps {}-{}".format(finite_until + 1, step))
    raise DataError(
        "the training loss is {} in {} (finite up to step {}): the weights are no longer "
        "numbers, so the run stops without checkpointing them".format(
            "nan" if math.isnan(total) else "inf", steps, finite_until), _HINT)


def given_non_finite(model: torch.nn.Module) -> FrozenSet[str]:
    """The names of ``model``'s floating-point buffers that hold nan or inf before it trains
    (its state-dict names: ``mask``, ``blocks.0.attn.mask``)."""
    return frozenset(name for name, buffer in model.named_buffers()
                     if buffer.is_floating_point()
                     and not math.isfinite(float(buffer.sum(dtype=torch.float64))))


def check_state(snapshot: Any, step: int, allowed: Collection[str] = ()) -> None:
    """Raise the run's ``DataError`` if a floating-point tensor of ``snapshot`` (a
    checkpoint's state on the host, nested dicts and lists) but those named in ``allowed``
    holds nan or inf."""
    name = non_finite(snapshot, allowed)
    if name is not None:
        raise DataError(
            "the checkpoint of step {} is not written: {} holds nan or inf, though the "
            "training loss was finite so far (a gradient overflowed)".format(step, name),
            _HINT)


def check_model(state_dict: Any, step: int, allowed: Collection[str] = ()) -> None:
    """Raise the run's ``DataError`` if a weight of the trained model (its state on the host)
    holds nan or inf (but the buffers named in ``allowed``, ``given_non_finite``'s):
    ``model.pt`` and the summary are written only from numbers."""
    name = non_finite(state_dict, allowed)
    if name is not None:
        raise DataError("the model trained to step {} holds nan or inf in {}: model.pt and "
                        "summary.json are not written".format(step, name), _HINT)


_HINT = ("lower --lr or raise --warmup_epochs, or check those steps' examples; then start "
         "over in a new --job_dir, or resume this one from a checkpoint of an earlier step "
         "(the newest may be on its way out already; a resume trusts a checkpoint only if "
         "its values are finite and its bytes match the digest written with it, or, written "
         "before digests were, only the former)")
