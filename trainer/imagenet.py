"""ImageNet on every XLA device of the job (``--devices``): ``python -m trainer.imagenet``.

Any torchvision classification model, or the user's own as ``PACKAGE.MODULE:CALLABLE``
(``--model``, default resnet50; ``trainer.models``), trained with SGD + momentum +
weight decay, a linear warmup then cosine decay, label smoothing, and top-1/top-5 evaluation.
Data (``--data_dir``): shards written by ``python -m trainer.data.make_shards`` (a folder or
``gs://``, streamed), or a ``train/`` ``val/`` class-folder tree; or ``--fake_data``. Images
reach the devices as uint8 and are normalized there (``trainer.data.images``).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from trainer import cli, startup, stop_signal
from trainer.config import FLAGS, define_common_flags


def define_flags(flag_values: Any = FLAGS) -> None:
    # Goyal et al.'s rate: 0.1 per 256 examples, scaled with the global batch.
    define_common_flags(flag_values=flag_values, batch_size=128, num_epochs=90, lr=0.1,
                        lr_batch=256, momentum=0.9, weight_decay=1e-4, warmup_epochs=5.0,
                        label_smoothing=0.1, log_steps=100, num_workers=-1, model="resnet50",
                        image_size=224)


if __name__ == "__main__":
    # First of all: as PID 1 a SIGTERM during the seconds the imports below take would be lost.
    stop_signal.catch_sigterm()
    # The flags before the frameworks: --help and a bad flag answer without importing torch.
    PARSED = cli.parse_early(define_flags)

import logging

import torch

import trainer.xla  # noqa: F401  (first of ours, at a fixed point: trainer.startup)
from trainer import devices, models
from trainer.batches import DataSource, FakeSource
from trainer.config import TrainConfig, parse_model_kwargs
from trainer.fit import TrainSpec, fit
from trainer.outputs import OutputPaths

log = logging.getLogger("trainer")

if __name__ == "__main__":
    startup.freeze_imports()

NUM_CLASSES = 1000
# Fake data: the size of ImageNet-1k, so steps per epoch match a real run.
FAKE_TRAIN_EXAMPLES, FAKE_EVAL_EXAMPLES = 1281167, 50000


def build_model(config: TrainConfig, num_classes: int, global_batch: int = 2
                ) -> torch.nn.Module:
    """``--model`` for ``num_classes`` classes and ``--image_size`` (``trainer.models``); a
    size the model's constructor refuses is a usage error naming both flags."""
    model = models.build_checked(config.model, _builder(config), num_classes, global_batch,
                                 config.image_size)
    # uint8 images become normalized floats on the device, as the model's first step; a hook,
    # so the model and its saved weights stay the model's own (which take normalized floats).
    model.register_forward_pre_hook(_normalize_uint8)
    return model


def check_model(config: TrainConfig, model: torch.nn.Module, num_classes: int,
                global_batch: int) -> None:
    """Refuse, before anything compiles, a ``model`` that cannot train on the run's images
    (``trainer.models.check_input``): one line naming the flag to change, exit 64."""
    models.check_input(config.model, model, _builder(config), num_classes, global_batch,
                       config.image_size)


def _builder(config: TrainConfig) -> models.Builder:
    """What ``--model`` and ``--model_kwargs`` build."""
    return models.builder(config.model, parse_model_kwargs(config.model_kwargs))


def _normalize_uint8(module: torch.nn.Module, args: tuple) -> Optional[tuple]:
    from trainer.data.images import normalize

    if args and args[0].dtype == torch.uint8:
        return (normalize(args[0]),) + tuple(args[1:])
    return None


def build_data(config: TrainConfig, topology: devices.Topology = devices.ONE_DEVICE
               ) -> DataSource:
    """ImageNet's data for ``config`` (shards, a class-folder tree, or ``--fake_data``) in
    global batches over ``topology``'s devices, this host's part of each."""
    batch, eval_batch, host = devices.batch_layout(config.step_batch_size,
                                                   config.eval_batch_size or config.batch_size,
                                                   topology)
    if config.fake_data:
        return FakeSource((3, config.image_size, config.image_size), NUM_CLASSES, batch,
                          FAKE_TRAIN_EXAMPLES // batch, FAKE_EVAL_EXAMPLES // eval_batch,
                          seed=config.seed, host=host, dtype=torch.uint8)
    from trainer.data.plan import SliceShape
    from trainer.data.shard_source import ShardSource
    from trainer.data.sources import open_source
    from trainer.data.workers import resolve_workers, worker_choice

    shape = SliceShape(host.count, topology.devices, batch, eval_batch, 1, config.image_size)
    workers = resolve_workers(config.num_workers, shape)
    source = open_source(config.data_dir, config.image_size, batch, workers, config.seed,
                         eval_batch, host, devices=topology.devices)
    # For the input-bound advice (trainer.fit._input_setup): never more workers than memory
    # holds, whether they were chosen or given.
    source.memory_holds = worker_choice(shape).memory_holds
    source.damaged_image_policy(config.max_bad_images)
    if isinstance(source, ShardSource):
        for line in source.plan_lines():  # what python -m trainer.data.plan prints
            log.info("data plan: %s", line)
    return source


def run(config: TrainConfig, *, data_override: Optional[DataSource] = None,
        paths: Optional[OutputPaths] = None) -> Dict[str, Any]:
    """Train and evaluate; returns the summary dict (see ``trainer.fit``)."""
    topology = devices.detect(config.devices)
    global_batch = topology.global_batch(config.batch_size)
    torch.manual_seed(config.seed)
    data = data_override or build_data(config, topology)
    num_classes = getattr(data, "num_classes", NUM_CLASSES)
    try:
        model = build_model(config, num_classes, global_batch)
        check_model(config, model, num_classes, global_batch)
    except BaseException:
        data.close()  # its data workers, if any, started with it
        raise
    loss = torch.nn.CrossEntropyLoss(label_smoothing=config.label_smoothing)
    # Top-k only where it can miss: top-5 of 5 classes or fewer would count every example.
    topk = tuple(k for k in (1, 5) if k < num_classes)
    spec = TrainSpec("imagenet-" + config.model, model, data, loss, topk=topk)
    return fit(config, spec, paths or OutputPaths.resolve(config.job_dir, {}), topology)


def main(argv: Optional[List[str]] = None) -> int:
    """Parse flags (``--job-dir`` spelling accepted), train, return the exit code."""
    return cli.run_main(define_flags, run, argv)


if __name__ == "__main__":
    cli.exit_process(cli.run_parsed(run, PARSED))
