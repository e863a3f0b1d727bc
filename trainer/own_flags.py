"""Your model and data on the trainers' run, ``trainer.train(model, train_set, eval_set=None,
loss_fn=None, argv=None)`` (``trainer.own_loop``): the flags it takes.

The trainers' common flags but those about their images and data, with ``--num_workers`` of
its own. Imports neither torch nor torch_xla: ``trainer.train`` parses them before it imports
torch_xla, so that ``--help`` and a bad flag answer without loading it; ``--help`` prints the
first paragraph above."""

from __future__ import annotations

from typing import Any

from absl import flags

from trainer.config import FLAGS, TrainConfig, define_common_flags

# The trainers' flags that are about their images and data: not this loop's.
# --num_workers last: this loop defines its own (``define_flags``).
EXCLUDED_FLAGS = ("data_dir", "fake_data", "model", "model_kwargs", "image_size",
                  "label_smoothing", "max_bad_images", "num_workers")
NUM_WORKERS_HELP = (
    "data worker processes that build the batches (0, the default: the device loader's "
    "thread builds them in this process, fastest for items already in memory such as a "
    "TensorDataset; N: N processes, for a Dataset whose items take work to read or make, "
    "e.g. files or decoding; -1: one per usable host core)")
# ``TrainConfig.data_dir``: where this loop's data comes from (the config demands a source).
DATA_FROM = "trainer.train(train_set)"


def define_flags(flag_values: Any = FLAGS) -> None:
    """The common flags this loop takes, each once: a flag the script (or an earlier call)
    defined already keeps its definition."""
    taken = tuple(name for name in TrainConfig.__dataclass_fields__ if name in flag_values)
    define_common_flags(exclude=EXCLUDED_FLAGS + taken, flag_values=flag_values)
    if "num_workers" not in flag_values:
        flags.DEFINE_integer("num_workers", 0, NUM_WORKERS_HELP, flag_values=flag_values)
