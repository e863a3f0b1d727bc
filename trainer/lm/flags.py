"""A decoder-only language model, trained next-token on token shards, on every XLA device of
the job: ``python -m trainer.lm --data_dir=SHARDS [--flags]``.

The model is ``trainer.lm.decoder``'s (RMSNorm, rotary positions, grouped-query attention,
SwiGLU, tied embeddings, attention within each document), sized by ``--preset`` and the size
flags, or yours: ``--model=PACKAGE.MODULE:CALLABLE``, called as
``CALLABLE(vocab_size=V, seq_len=L)`` (and ``--model_kwargs``' keywords), returning a module
that maps tokens ``N x L`` to logits ``N x L x V``. The data: shards of ``python -m
trainer.data.make_token_shards`` (a folder or ``gs://``), or ``--fake_data``. Each example is
a window of ``--seq_len`` tokens; ``--batch_size`` counts windows per device. Evaluation
reports the loss (per token), its perplexity and the token accuracy; the progress line and
``summary.json`` the tokens per second per device and, on a TPU, the MFU. AdamW at
``--lr=0.0003`` as given (``--lr_batch=0``), weight decay 0.1, by default."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

from absl import flags

from trainer.config import FLAGS, define_common_flags
from trainer.errors import EX_USAGE, TrainerError

# How a split's shards are read (``trainer.lm.run.token_data``).
TOKEN_READS = ("auto", "download", "stream")


@dataclass(frozen=True)
class LmOptions:
    """The language model's own flags: the window, the preset and the sizes that override
    it (0: the preset's)."""

    seq_len: int = 256
    preset: str = "small"
    width: int = 0
    layers: int = 0
    heads: int = 0
    kv_heads: int = 0
    hidden: int = 0
    tie_embeddings: bool = True
    token_reads: str = "auto"

    def __post_init__(self) -> None:
        if self.token_reads not in TOKEN_READS:
            raise TrainerError("--token_reads={!r} is not one of {}".format(
                self.token_reads, ", ".join(TOKEN_READS)), "auto downloads a gs:// folder's "
                "shards where they take at most half the local disk's free space, else "
                "streams them", EX_USAGE)
        if self.seq_len <= 0:
            raise TrainerError("--seq_len must be positive, got {}".format(self.seq_len),
                               "e.g. --seq_len=1024", EX_USAGE)
        for name in ("width", "layers", "heads", "kv_heads", "hidden"):
            if getattr(self, name) < 0:
                raise TrainerError("--{} must not be negative, got {}".format(
                    name, getattr(self, name)), "0 keeps the preset's", EX_USAGE)


def define_flags(flag_values: Any = FLAGS) -> None:
    define_common_flags(exclude=("image_size", "label_smoothing", "max_bad_images"),
                        flag_values=flag_values, batch_size=8, num_epochs=1,
                        optimizer="adamw", lr=3e-4, lr_batch=0, weight_decay=0.1,
                        warmup_epochs=0.0, log_steps=20, num_workers=0, model="")
    defaults = LmOptions()
    flags.DEFINE_integer("seq_len", defaults.seq_len, "tokens per example (window)",
                         flag_values=flag_values)
    flags.DEFINE_string("preset", defaults.preset, "the decoder's size: tiny, small, 125m, "
                        "350m, 1b or 7b (trainer.lm.decoder.PRESETS)", flag_values=flag_values)
    for name, what in (("width", "the model width"), ("layers", "transformer blocks"),
                       ("heads", "query heads"), ("kv_heads", "key and value heads"),
                       ("hidden", "the SwiGLU hidden width")):
        flags.DEFINE_integer(name, 0, what + " (0: the preset's)", flag_values=flag_values)
    flags.DEFINE_bool("tie_embeddings", defaults.tie_embeddings, "share the token embedding "
                      "with the output projection", flag_values=flag_values)
    flags.DEFINE_string("token_reads", defaults.token_reads, "how --data_dir's shards are "
                        "read: download (a gs:// folder's to local disk; then each shard "
                        "mapped), stream (each window read where it is: no download, no digest "
                        "check), or auto (a local folder's mapped where they are; a gs:// "
                        "one's downloaded where all the shards take at most half the local "
                        "disk's free space, else all streamed)", flag_values=flag_values)


def options_from_flags(flag_values: Any = FLAGS) -> Union[LmOptions, int]:
    """The parsed flags as ``LmOptions``, or a usage error's exit code after its one line."""
    from trainer.console import report

    try:
        return LmOptions(**{name: getattr(flag_values, name)
                            for name in LmOptions.__dataclass_fields__})
    except TrainerError as error:
        return report(error)
