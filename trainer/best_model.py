"""``--keep_best=NAME[:max|min]``: the model of the best evaluation so far, kept beside the
last (Lightning's ``ModelCheckpoint(monitor=...)``, Hugging Face's
``load_best_model_at_end``).

After each evaluation that reports ``NAME`` (``top1``, ``top5``, ``accuracy``,
``token_accuracy``, ``loss``, ``perplexity``, or a metric of ``trainer.train(metrics=...)``)
better than every one before, in this run and the runs it resumed: the weights are written to
``model-best.pt`` in the job dir (as ``model.pt`` is, through a temporary file and a rename),
the run's checkpoint of that step is kept out of the rotation of ``--keep_checkpoints``
(``fit``: written then, where the epoch's end wrote none), to resume or fine-tune from, and
``best.json`` says which evaluation it was (``{"metric", "mode", "value", "epoch", "step",
"checkpoint"}``, the last the checkpoint's file name, null without checkpoints). ``max`` is
the default but for ``loss`` and ``perplexity`` (``min``). A tie keeps the earlier. A name the
evaluation does not report is a usage error before training (exit 64).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from trainer.errors import EX_USAGE, TrainerError

log = logging.getLogger("trainer")

BEST_MODEL = "model-best.pt"
BEST_RECORD = "best.json"
MODES = ("max", "min")
LOWER_IS_BETTER = ("loss", "perplexity")


@dataclass(frozen=True)
class BestSpec:
    """Which figure is best, and which way."""

    name: str
    mode: str

    def better(self, value: float, than: Optional[float]) -> bool:
        if than is None:
            return True
        return value > than if self.mode == "max" else value < than


def parse_best(text: str) -> Optional[BestSpec]:
    """``--keep_best``: None for ""; ``NAME`` or ``NAME:max``/``NAME:min``; a usage error
    otherwise."""
    if not text:
        return None
    name, _, mode = text.partition(":")
    mode = mode or ("min" if name in LOWER_IS_BETTER else "max")
    if not name.isidentifier() or mode not in MODES:
        raise TrainerError("--keep_best={!r} is not NAME or NAME:max or NAME:min".format(text),
                           "e.g. --keep_best=top1, --keep_best=loss (lowest), or "
                           "--keep_best=mae:min for a metric of your own", EX_USAGE)
    return BestSpec(name, mode)


class BestModel:
    """The best evaluation so far and its weights (``consider``), in ``model_dir`` (a
    ``storage`` folder; None: a process that writes nothing, which still follows along)."""

    def __init__(self, spec: BestSpec, model_dir: Any, reported: Sequence[str]) -> None:
        if spec.name not in reported:
            raise TrainerError("--keep_best={} names a figure the evaluation does not report "
                               "(it reports {})".format(spec.name, ", ".join(reported) or
                                                        "nothing"),
                               "name one of them", EX_USAGE)
        self.spec, self.model_dir = spec, model_dir
        self.value: Optional[float] = None
        self.step: Optional[int] = None  # the best evaluation's step
        earlier = self._recorded()
        if earlier is not None:  # a resumed run competes with the runs before it
            self.value, self.step = earlier

    def consider(self, results: Dict[str, float], epoch: int, step: int,
                 weights: Callable[[], Dict[str, Any]],
                 checkpoint: Optional[str] = None) -> bool:
        """After an evaluation: ``weights()`` written as the best where ``results`` beat every
        evaluation before (``checkpoint``: the file name of the run's checkpoint of ``step``,
        which the caller keeps); whether they did."""
        value = results.get(self.spec.name)
        if value is None or not self.spec.better(value, self.value):
            return False
        self.value, self.step = value, step
        state = weights()  # every process: fetching the weights may take them all
        if self.model_dir is not None:
            from trainer.checkpoints import save_state, size_of

            self.model_dir.write_file(BEST_MODEL, lambda stream: save_state(state, stream),
                                      needs=size_of(state))
            record = {"metric": self.spec.name, "mode": self.spec.mode, "value": value,
                      "epoch": epoch, "step": step, "checkpoint": checkpoint}
            self.model_dir.write_bytes(BEST_RECORD, (json.dumps(record, sort_keys=True)
                                                     + "\n").encode())
        log.info("best %s so far (%s): %.6g after epoch %d: %s", self.spec.name,
                 self.spec.mode, value, epoch, BEST_MODEL)
        return True

    def _recorded(self) -> Optional[Tuple[float, Optional[int]]]:
        """(the value, the step) ``best.json`` holds for this metric and mode, if a run before
        wrote it."""
        if self.model_dir is None or not self.model_dir.exists(BEST_RECORD):
            return None
        try:
            record = json.loads(self.model_dir.read_bytes(BEST_RECORD).decode())
        except ValueError:
            return None  # unreadable: the next best evaluation writes it anew
        if (not isinstance(record, dict) or record.get("metric") != self.spec.name
                or record.get("mode") != self.spec.mode):
            return None
        value, step = record.get("value"), record.get("step")
        if not isinstance(value, (int, float)):
            return None
        return float(value), step if isinstance(step, int) else None
