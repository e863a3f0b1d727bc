"""A language model's speed as its trainers quote it: tokens per second per device, and the
model FLOPs utilization (MFU: the model's FLOPs per token times those tokens, over the chip's
peak, ``trainer.chips``), in the progress line, ``metrics.jsonl``, TensorBoard and
``summary.json``. Model FLOPs count what the model must compute (forward and backward, no
recomputation), so MFU compares across implementations; where the chip's peak is not known
(the CPU device) there is no MFU."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional


@dataclass(frozen=True)
class TokenRates:
    """Each example is ``tokens_per_example`` tokens, each costing ``flops_per_token``;
    ``peak_flops``: one device's, None where unknown."""

    tokens_per_example: int
    flops_per_token: float
    peak_flops: Optional[float] = None

    def figures(self, examples_per_second_per_device: float) -> Dict[str, float]:
        """``tokens_per_second_per_device`` and, where the peak is known, ``mfu``."""
        tokens = examples_per_second_per_device * self.tokens_per_example
        figures = {"tokens_per_second_per_device": tokens}
        if self.peak_flops:
            figures["mfu"] = tokens * self.flops_per_token / self.peak_flops
        return figures

    @staticmethod
    def describe(figures: Dict[str, float]) -> str:
        """``  5120 tokens/s per device  MFU 41.2%`` (no MFU where there is none)."""
        text = "  {:.0f} tokens/s per device".format(figures["tokens_per_second_per_device"])
        if "mfu" in figures:
            text += "  MFU {:.1%}".format(figures["mfu"])
        return text
