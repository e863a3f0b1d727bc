"""Damaged images cost one image, not the run (docs/data.md, "Damaged images").

A data worker that cannot decode an example (``images.DamagedImage``: bad bytes, libjpeg's
warnings, a file over a worker's limits) leaves its row masked, as an evaluation's padding is
(a zero image labelled ``IGNORE_LABEL``), and names it in what it hands over. The trainer's
side of the stream then:

- in training, puts another example of the same local batch in its place (``stand_in``),
  drawn by (seed, epoch, step, row): the same one whatever the worker count, so a resumed run
  trains what an uninterrupted one does; that example is seen twice in the epoch, the damaged
  one not at all; every other example once, as always;
- in evaluation, leaves the row masked: accuracy is over the images that decode;
- logs the first ``LINES_PER_EPOCH`` files of each epoch and evaluation by name and why, then
  how many more; counts them (``DamageLedger.count``: the per-epoch figures of metrics.jsonl,
  TensorBoard and summary.json);
- stops the run with exit 65 past ``--max_bad_images`` in one epoch or evaluation on this
  host (``BadImagePolicy``): a bucket that is mostly damage is not a data set.
"""

from __future__ import annotations

import logging
import random
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

from trainer.errors import DataError, TrainerError

if TYPE_CHECKING:  # the flags' check (trainer.config) imports this module before torch
    import torch

log = logging.getLogger("trainer")

LINES_PER_EPOCH = 5
DEFAULT_MAX_BAD_IMAGES = "0.1%"
# The least a percentage allows on a host, so that a small data set is not stopped by its
# first damaged file.
LEAST_ALLOWED = 10
# What a worker reports of each damaged example of its unit: (file, why).
Damaged = Tuple[str, str]


@dataclass(frozen=True)
class BadImagePolicy:
    """``--max_bad_images``: damaged images one host may skip in one epoch (or evaluation)
    before the run stops: a count, or a share of the examples it reads then (at least
    ``LEAST_ALLOWED``)."""

    count: Optional[int] = None
    share: float = 0.001

    def allowed(self, examples: int) -> int:
        if self.count is not None:
            return self.count
        return max(LEAST_ALLOWED, int(self.share * examples))

    def describe(self) -> str:
        if self.count is not None:
            return "--max_bad_images={}".format(self.count)
        return "--max_bad_images={:g}%".format(self.share * 100)


def parse_policy(text: str) -> BadImagePolicy:
    """``N`` (a count) or ``P%`` (a share of an epoch's examples); a usage error otherwise."""
    value = text.strip()
    try:
        if value.endswith("%"):
            share = float(value[:-1]) / 100
            if 0 <= share <= 1:
                return BadImagePolicy(share=share)
        elif value.isdigit():
            return BadImagePolicy(count=int(value))
    except ValueError:
        pass
    raise TrainerError("--max_bad_images={!r} is neither a count nor a percentage".format(text),
                       "e.g. --max_bad_images=50 (per epoch and host) or "
                       "--max_bad_images=0.1% (the default); 0 stops at the first")


def stand_in(x: torch.Tensor, y: torch.Tensor, seed: int, epoch: int, step: int) -> int:
    """Each masked row (label below 0: a damaged example) of training batch ``(x, y)`` replaced
    in place by a copy of another row of the batch, drawn by (seed, epoch, step, row); the
    number replaced. A batch with no example left is a data error."""
    masked = (y < 0).nonzero().flatten().tolist()
    if not masked:
        return 0
    wrong = set(masked)
    whole = [row for row in range(len(y)) if row not in wrong]
    if not whole:
        raise DataError("every example of training step {} of epoch {} on this host failed to "
                        "decode".format(step + 1, epoch + 1),
                        "check the data: the lines above name the files and why")
    for row in masked:
        draw = random.Random(zlib.crc32("{}/{}/{}/{}".format(seed, epoch, step, row).encode()))
        source = whole[draw.randrange(len(whole))]
        x[row].copy_(x[source])
        y[row] = y[source]
    return len(masked)


class DamageLedger:
    """The trainer's side's account of damaged examples: lines, counts per (kind, epoch),
    and the stop past the policy. ``examples(kind)``: what this host reads in one."""

    def __init__(self, policy: BadImagePolicy = BadImagePolicy()) -> None:
        self.policy = policy
        self.counts: Dict[Tuple[str, Optional[int]], int] = {}
        self.first: Dict[Tuple[str, Optional[int]], List[str]] = {}
        self.last_evaluation: Optional[Tuple[str, Optional[int]]] = None

    def evaluating(self, epoch: Optional[int]) -> None:
        """An evaluation (after 0-based epoch ``epoch - 1``; None: on its own) begins: its
        count starts again."""
        self.last_evaluation = ("eval", epoch)
        self.counts.pop(self.last_evaluation, None)
        self.first.pop(self.last_evaluation, None)

    def named(self, kind: str, epoch: Optional[int], damaged: Sequence[Damaged]) -> None:
        """Log the files a worker reported (up to ``LINES_PER_EPOCH`` per epoch)."""
        key = (kind, epoch)
        names = self.first.setdefault(key, [])
        for name, reason in damaged:
            if len(names) < LINES_PER_EPOCH:
                log.warning("skipped a damaged image (%s): %s: %s", _segment(kind, epoch),
                            name, reason)
            elif len(names) == LINES_PER_EPOCH:
                log.warning("more damaged images in %s: counted, not named (metrics.jsonl "
                            "has the count)", _segment(kind, epoch))
            names.append(name)

    def counted(self, kind: str, epoch: Optional[int], number: int, examples: int) -> None:
        """Add ``number`` damaged examples to (kind, epoch), of ``examples`` this host reads
        there; past the policy, a data error naming the first files."""
        if not number:
            return
        key = (kind, epoch)
        total = self.counts[key] = self.counts.get(key, 0) + number
        allowed = self.policy.allowed(examples)
        if total > allowed:
            first = self.first.get(key, [])[:3]
            raise DataError("{} damaged images in {} on this host, more than {} allows ({} "
                            "of {}){}".format(total, _segment(kind, epoch),
                                              self.policy.describe(), allowed, examples,
                                              ": first " + ", ".join(first) if first else ""),
                            "check the data where the lines above point; raise "
                            "--max_bad_images if the rest is good")

    def count(self, kind: str, epoch: Optional[int]) -> int:
        """Damaged examples counted in (kind, epoch) by this process."""
        return self.counts.get((kind, epoch), 0)

    def figures(self, epoch: Optional[int] = None) -> Dict[str, int]:
        """What metrics.jsonl records after training 0-based epoch ``epoch`` and evaluating:
        ``train_damaged_images`` (stood in for in that epoch's steps this process trained)
        and ``eval_damaged_images`` (masked in the last evaluation); ``epoch`` None: the
        run's training total instead (summary.json)."""
        if epoch is None:
            train = sum(count for (kind, _), count in self.counts.items() if kind == "train")
        else:
            train = self.count("train", epoch)
        masked = self.counts.get(self.last_evaluation, 0) if self.last_evaluation else 0
        return {"train_damaged_images": train, "eval_damaged_images": masked}


def _segment(kind: str, epoch: Optional[int]) -> str:
    if kind == "train":
        return "epoch {}".format(epoch + 1 if epoch is not None else "?")
    return "the evaluation" + ("" if epoch is None else " after epoch {}".format(epoch))
