"""Flags shared by the trainers (absl, named like pytorch/xla's reference scripts) and the
frozen ``TrainConfig`` they become. ``run()`` takes a ``TrainConfig``, never global flags, so
tests build one directly."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from absl import flags

from trainer.errors import EX_USAGE, TrainerError

FLAGS = flags.FLAGS
# --step_mode values; ``trainer.xla`` (which imports torch_xla) decides what "auto" means.
STEP_MODES = ("auto", "compiled", "lazy")
# --precision: float32 throughout, or bfloat16 autocast of the forward pass (``trainer.xla``).
PRECISIONS = ("fp32", "bf16")
# --optimizer values, and AdamW's defaults where the flags are not given: DeiT's recipe
# (Touvron et al. 2021): 5e-4 per 512 examples of global batch, weight decay 0.05.
OPTIMIZERS = ("sgd", "adamw")
ADAMW_DEFAULTS = {"lr": 5e-4, "lr_batch": 512, "weight_decay": 0.05}
# --remat: none, or block (``trainer.parallel.remat``; checked here, before torch loads).
REMAT_CHOICES = ("none", "block")
# --devices: every device the runtime sees, or a count (``trainer.devices`` decides).
AUTO_DEVICES = "auto"
# Seeds feed torch generators as ``seed * 1_000_003 + epoch``, which must stay within 64 bits.
MAX_SEED = 2 ** 32 - 1
# --hypertune_metric's default: the top-1 accuracy's tag. A run without top-1 (trainer.train on
# outputs that are no class scores) reports its loss as LOSS_HYPERTUNE_METRIC instead.
DEFAULT_HYPERTUNE_METRIC = "accuracy"
LOSS_HYPERTUNE_METRIC = "loss"
MAX_COUNT = 2 ** 31 - 1  # the compiled step's counter is int32
# No SGD rate comes near it; below it, the peak scaled to any global batch (lr x global batch /
# lr_batch, at most MAX_COUNT x devices) stays finite (make fuzz: --lr=1e308 became inf).
MAX_LR = 1e6


@dataclass(frozen=True)
class TrainConfig:
    """Everything a run needs. Defaults here are MNIST's; each trainer sets its own flags."""

    batch_size: int = 16
    num_epochs: int = 5
    lr: float = 0.05
    lr_batch: int = 64
    momentum: float = 0.9
    weight_decay: float = 5e-4
    warmup_epochs: float = 0.0
    label_smoothing: float = 0.0
    log_steps: int = 20
    num_workers: int = -1
    num_steps: int = 0
    max_steps: int = 0
    smoke: bool = False
    data_dir: Optional[str] = None
    fake_data: bool = False
    seed: int = 1
    job_dir: Optional[str] = None
    checkpoint_steps: int = 0
    checkpoint_minutes: float = 0.0
    checkpoint_epochs: int = 1
    eval_every_epochs: int = 1
    profile_steps: str = ""
    keep_checkpoints: int = 3
    hypertune_metric: str = DEFAULT_HYPERTUNE_METRIC
    model: str = "resnet50"
    model_kwargs: str = ""
    image_size: int = 224
    eval_batch_size: int = 0
    step_mode: str = "auto"
    compile_cache: str = ""
    devices: str = AUTO_DEVICES
    precision: str = "fp32"
    optimizer: str = "sgd"
    clip_grad_norm: float = 0.0
    grad_accum_steps: int = 1
    ema_decay: float = 0.0
    max_bad_images: str = "0.1%"
    keep_best: str = ""
    sharding: str = "dp"
    mesh: str = ""
    remat: str = "none"

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise TrainerError("--{} must be a finite number, got {}".format(
                    field.name, value), "e.g. --{}={}".format(field.name, field.default))
            # A count that does not fit the compiled step's int32 counter (make fuzz found
            # one beyond 64 bits that overflowed torch).
            if (isinstance(value, int) and not isinstance(value, bool) and value > MAX_COUNT
                    and field.name != "seed"):  # the seed has its own range, below
                raise TrainerError("--{} is too large, got {}".format(field.name, value),
                                   "use at most {}".format(MAX_COUNT))
        positive = ("batch_size", "num_epochs", "keep_checkpoints", "image_size",
                    "grad_accum_steps")
        for name in positive:
            if getattr(self, name) <= 0:
                raise TrainerError("--{} must be positive, got {}".format(
                    name, getattr(self, name)), "e.g. --{}={}".format(
                    name, getattr(TrainConfig, name)))
        non_negative = ("lr", "lr_batch", "momentum", "weight_decay", "warmup_epochs", "log_steps",
                        "num_steps", "max_steps", "checkpoint_steps", "checkpoint_minutes",
                        "checkpoint_epochs", "eval_batch_size", "clip_grad_norm")
        for name in non_negative:
            if getattr(self, name) < 0:
                raise TrainerError("--{} must not be negative, got {}".format(
                    name, getattr(self, name)), "use 0 or a positive value")
        if not 0.0 <= self.ema_decay < 1.0:
            raise TrainerError("--ema_decay must be in [0, 1), got {}".format(self.ema_decay),
                               "e.g. --ema_decay=0.9998 (timm's --model-ema-decay); 0: no "
                               "average")
        if self.lr > MAX_LR:
            raise TrainerError("--lr must be at most 1e6, got {}".format(self.lr),
                               "e.g. --lr={} (the peak for a global batch of --lr_batch)"
                               .format(TrainConfig.lr))
        if self.num_workers < -1:
            raise TrainerError("--num_workers must be -1 (one per host core), 0 (none) or a "
                               "count, got {}".format(self.num_workers), "e.g. --num_workers=-1")
        if self.warmup_epochs > self.num_epochs:
            raise TrainerError("--warmup_epochs={} is longer than the run (--num_epochs={})"
                               .format(self.warmup_epochs, self.num_epochs),
                               "use a warmup of at most --num_epochs, usually a few epochs")
        if not 0 <= self.seed <= MAX_SEED:
            raise TrainerError("--seed must be in [0, {}], got {}".format(MAX_SEED, self.seed),
                               "e.g. --seed=1")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise TrainerError("--label_smoothing must be in [0, 1), got {}".format(
                self.label_smoothing), "e.g. --label_smoothing=0.1")
        if self.step_mode not in STEP_MODES:
            raise TrainerError("--step_mode={!r} is not one of {}".format(
                self.step_mode, ", ".join(STEP_MODES)),
                "auto compiles the steps where torch_xla >= 2.1 can, else runs them lazily")
        if self.optimizer not in OPTIMIZERS:
            raise TrainerError("--optimizer={!r} is not one of {}".format(
                self.optimizer, ", ".join(OPTIMIZERS)),
                "sgd: SGD with momentum; adamw: AdamW (DeiT's defaults: --lr=0.0005 "
                "--lr_batch=512 --weight_decay=0.05)")
        if self.precision not in PRECISIONS:
            raise TrainerError("--precision={!r} is not one of {}".format(
                self.precision, ", ".join(PRECISIONS)),
                "bf16 runs the forward pass in bfloat16 (fast on TPUs); fp32 runs all in "
                "float32")
        parse_devices(self.devices)
        if self.smoke and self.max_steps > 1:
            raise TrainerError("--smoke trains one step; --max_steps={} asks for more".format(
                self.max_steps), "drop one of them: --max_steps=N alone trains N steps")
        parse_profile_steps(self.profile_steps)
        parse_model_kwargs(self.model_kwargs)
        from trainer.data.damage import parse_policy

        parse_policy(self.max_bad_images)
        from trainer.best_model import parse_best

        parse_best(self.keep_best)
        from trainer.parallel.mesh import check_flags

        check_flags(self.sharding, self.mesh)
        if self.remat not in REMAT_CHOICES:
            raise TrainerError("--remat={!r} is not one of {}".format(
                self.remat, ", ".join(REMAT_CHOICES)), "--remat=block recomputes each block's "
                "activations in the backward pass; none keeps them")
        if self.eval_every_epochs <= 0:
            raise TrainerError("--eval_every_epochs must be positive, got {}".format(
                self.eval_every_epochs), "e.g. --eval_every_epochs=1 (the last epoch is "
                "always evaluated)")
        if not self.fake_data and not self.data_dir:
            raise TrainerError("no input data: --data_dir is not set",
                               "pass --data_dir=PATH_OR_GS_URI, or --fake_data for a smoke run")


    @property
    def step_batch_size(self) -> int:
        """Examples per optimizer step and device: ``--batch_size`` (each micro-batch's) times
        ``--grad_accum_steps``. The data comes in batches of this; the global batch, the
        learning rate's scaling and every step count are of optimizer steps."""
        return self.batch_size * self.grad_accum_steps

    def train_steps(self, steps_per_epoch: int) -> int:
        """The steps the run trains in all: ``--num_epochs`` epochs of ``steps_per_epoch``,
        cut at ``--max_steps`` (``--smoke``: 1)."""
        total = self.num_epochs * steps_per_epoch
        cap = 1 if self.smoke else self.max_steps
        return min(total, cap) if cap else total

    def epochs(self, steps_per_epoch: int) -> int:
        """The epochs the run trains (its last cut short where ``--max_steps`` ends it)."""
        return -(-self.train_steps(steps_per_epoch) // max(1, steps_per_epoch))

    def eval_steps(self, split_steps: int) -> int:
        """The steps of each evaluation: all of the split's, or ``--num_steps`` (``--smoke``:
        one batch)."""
        return 1 if self.smoke else min(split_steps, self.num_steps or split_steps)


def parse_devices(text: str) -> Optional[int]:
    """The ``--devices`` value: None for ``auto``, else a positive count; anything else is a
    usage error naming the flag."""
    value = str(text).strip().lower()
    if value == AUTO_DEVICES:
        return None
    if value.isdigit() and value.isascii() and int(value) > 0:
        return int(value)
    raise TrainerError("--devices must be auto or a positive number of devices, got {!r}"
                       .format(text), "--devices=auto uses every device the runtime sees; "
                       "--devices=1 trains on one", EX_USAGE)


def parse_profile_steps(text: str) -> Optional[Tuple[int, int]]:
    """The ``--profile_steps`` value: None when empty, else (first step, step count), both
    positive; anything else is a usage error naming the flag."""
    if not str(text).strip():
        return None
    parts = str(text).replace(" ", "").split(",")
    if (len(parts) == 2 and all(part.isdigit() and part.isascii() for part in parts)
            and all(0 < int(part) <= MAX_COUNT for part in parts)):
        return int(parts[0]), int(parts[1])
    raise TrainerError("--profile_steps must be FIRST,COUNT (two positive step numbers), got "
                       "{!r}".format(text), "e.g. --profile_steps=10,5 captures steps 10 to 14 "
                       "(after compilation)", EX_USAGE)


def parse_model_kwargs(text: str) -> Dict[str, Any]:
    """The ``--model_kwargs`` value: keyword arguments for ``--model``'s constructor, a JSON
    object (empty: none); anything else is a usage error naming the flag."""
    if not str(text).strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError as error:
        value = error
    if not isinstance(value, dict):
        raise TrainerError("--model_kwargs must be a JSON object of keyword arguments, got "
                           "{!r}".format(text), "e.g. --model_kwargs='{\"drop_path_rate\": "
                           "0.1}'", EX_USAGE)
    return value


def define_common_flags(exclude: Tuple[str, ...] = (), flag_values: Any = FLAGS,
                        **defaults: Any) -> None:
    """Define the shared flags in ``flag_values``, except ``exclude``; ``defaults`` override
    ``TrainConfig``'s."""
    values = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    values.update(defaults)
    helps = {
        "batch_size": "examples per training step and device (the global batch is this x "
                      "--devices x --grad_accum_steps)",
        "ema_decay": "keep an exponential moving average of the weights with this decay "
                     "(e.g. 0.9998), evaluated beside them (ema_top1, ema_loss ...), "
                     "checkpointed and written as model-ema.pt; 0: none",
        "grad_accum_steps": "micro-batches of --batch_size per optimizer step: the update of "
                            "a batch this many times larger, one micro-batch's activations "
                            "on the device at a time; step counts and --lr_batch scaling are "
                            "of optimizer steps and their whole batch",
        "num_epochs": "passes over the training data",
        "lr": "peak learning rate (SGD) of a global batch of --lr_batch examples",
        "lr_batch": "the global batch --lr is for: the run's peak rate is lr x global batch / "
                    "lr_batch (linear scaling); 0: --lr as given",
        "momentum": "SGD momentum",
        "optimizer": "sgd (with --momentum), or adamw: betas 0.9 and 0.999, no weight decay on "
                     "biases and normalization weights, and DeiT's defaults where --lr, "
                     "--lr_batch, --weight_decay are not given: 0.0005 per 512 examples, 0.05",
        "weight_decay": "L2 weight decay",
        "clip_grad_norm": "clip the gradients to this global L2 norm before each update, as "
                          "torch.nn.utils.clip_grad_norm_ does over every trained parameter on "
                          "every device (0: no clipping)",
        "warmup_epochs": "linear learning-rate warmup, in epochs (then cosine decay)",
        "label_smoothing": "label smoothing of the cross-entropy loss",
        "log_steps": "log a progress line every N steps (0: only per epoch)",
        "num_workers": "host processes decoding images (-1: one per usable core but the "
                       "trainer's, as memory allows; 0: decode in the training process)",
        "num_steps": "cut each epoch, and each evaluation, to its first N steps (0: all); "
                     "--max_steps caps the whole run",
        "max_steps": "stop the run after N training steps in all, evaluating and "
                     "checkpointing there (0: --num_epochs decides)",
        "smoke": "train one step and evaluate one batch, through every output: a quick check "
                 "of the data, the model and the job dir",
        "data_dir": "folder or gs://bucket/prefix with the data set",
        "fake_data": "train on a fixed random batch (smoke runs, benchmarks)",
        "seed": "random seed (model init, data order)",
        "job_dir": "folder or gs:// URI for checkpoints, metrics, TensorBoard, model; "
                   "default: Vertex AI's AIP_* directories",
        "checkpoint_steps": "also checkpoint every N steps (0: at epoch ends only)",
        "checkpoint_minutes": "also checkpoint once M minutes have passed since the last "
                              "checkpoint (0: never); every host checkpoints at the same step",
        "checkpoint_epochs": "checkpoint at the end of every N-th epoch and the last (0: only "
                             "the last); written in the background",
        "eval_every_epochs": "evaluate after every N-th epoch and the last",
        "profile_steps": "FIRST,COUNT: capture a profile of training steps FIRST to "
                         "FIRST+COUNT-1 into JOB_DIR/tensorboard/plugins/profile/ (torch_xla "
                         "2.x); empty: none",
        "keep_checkpoints": "how many newest checkpoints to keep",
        "keep_best": "NAME[:max|min]: also keep the model of the best evaluation so far as "
                     "model-best.pt and its checkpoint beside the newest --keep_checkpoints "
                     "(best.json says which), by a figure the evaluation reports "
                     "(top1, top5, accuracy, loss or a metric of trainer.train's metrics=); "
                     "max, but min for loss; empty: none",
        "hypertune_metric": "the tag hyperparameter tuning reads: where it names a figure the "
                            "evaluation reports (loss, top5, or one of trainer.train's "
                            "metrics=), that figure; else the accuracy (top-1, or a binary "
                            "classifier's), or the loss where there is none",
        "model": "a torchvision classification model (resnet50, vit_b_16, convnext_tiny, ...) "
                 "or your own as PACKAGE.MODULE:CALLABLE (docs/trainers.md)",
        "model_kwargs": "keyword arguments for --model's constructor or callable, as a JSON "
                        "object (e.g. '{\"drop_path_rate\": 0.1}'; timm's --model-kwargs)",
        "image_size": "training image size in pixels",
        "max_bad_images": "damaged images (they do not decode) one host may skip in an epoch "
                          "or an evaluation before the run stops (exit 65): a count, or a "
                          "percentage of the examples it reads there (at least 10); each "
                          "skipped one is named (the first 5) and counted",
        "eval_batch_size": "evaluation batch size (0: same as --batch_size)",
        "step_mode": "how steps run: auto (compiled where torch_xla >= 2.1 can, else lazy), "
                     "compiled (each step one traced graph), or lazy (traced every step)",
        "devices": "XLA devices to train on: auto (every device the runtime sees, one SPMD "
                   "program over all of them; --batch_size is per device) or a count",
        "precision": "fp32, or bf16: the forward pass and loss under bfloat16 autocast "
                     "(TPUs multiply bf16 at full speed; weights and updates stay fp32; "
                     "torch_xla 2.x)",
        "compile_cache": "folder or gs:// URI of the persistent compilation cache, shared by "
                         "trials; default: compile-cache/ in the job dir; none: off",
        "sharding": "how the devices hold the model: dp (each whole), fsdp (parameters, "
                    "gradients and optimizer state split over the devices) or auto (fsdp "
                    "where the replicated state would take over half a chip's memory)",
        "mesh": "with --sharding=fsdp: data:D,fsdp:F, the devices as D groups of F that each "
                "split the model (default: fsdp over every device)",
        "remat": "activation checkpointing: block (each block of the model, e.g. each "
                 "transformer layer, computed again in the backward pass instead of keeping "
                 "its activations: less memory, about a third more compute) or none",
    }
    for name, help_text in helps.items():
        if name in exclude:
            continue
        value = values[name]
        if isinstance(value, bool):
            define = flags.DEFINE_bool
        elif isinstance(value, int):
            define = flags.DEFINE_integer
        elif isinstance(value, float):
            define = flags.DEFINE_float
        else:
            define = flags.DEFINE_string
        define(name, value, help_text, flag_values=flag_values)


def config_from_flags(flag_values: Any = FLAGS, **fixed: Any) -> TrainConfig:
    """Build the config from parsed absl flags (unknown config fields keep their default,
    or take ``fixed``'s value: what a trainer sets that is no flag of it). A
    trainer's default warmup (ImageNet's 5 epochs) is shortened to a run of fewer epochs
    rather than refused: only a warmup the user asked for is held to the run's length."""
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    values = {name: getattr(flag_values, name) for name in fields if name in flag_values}
    values.update(fixed)
    if ("warmup_epochs" in flag_values and not flag_values["warmup_epochs"].present
            and "num_epochs" in values):
        values["warmup_epochs"] = min(values["warmup_epochs"], values["num_epochs"])
    # A trainer's SGD defaults do not suit AdamW asked for instead; a trainer whose own
    # default is AdamW (trainer.lm) has defaults for it, given or not.
    if (values.get("optimizer") == "adamw" and "optimizer" in flag_values
            and flag_values["optimizer"].default != "adamw"):
        for name, value in ADAMW_DEFAULTS.items():
            if name in flag_values and not flag_values[name].present:
                values[name] = value
    return TrainConfig(**values)


def normalize_argv(argv: List[str], known: Optional[Dict[str, Any]] = None) -> List[str]:
    """Accept ``--name-with-dashes`` for ``--name_with_dashes`` (the platform passes
    ``--job-dir``), leaving everything else as it is."""
    known = known if known is not None else FLAGS
    result = [argv[0]] if argv else []
    for arg in argv[1:]:
        if arg.startswith("--") and "-" in arg[2:].split("=", 1)[0]:
            name, sep, value = arg[2:].partition("=")
            candidate = name.replace("-", "_")
            if candidate in known:
                arg = "--" + candidate + sep + value
        result.append(arg)
    return result
