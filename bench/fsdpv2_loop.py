"""The plain torch_xla FSDPv2 loop that bench/lm.py compares ``trainer.lm --sharding=fsdp``
with: the same decoder (``trainer.lm.decoder``, a preset), the same fake tokens and AdamW, as
torch_xla's FSDPv2 documentation writes the loop (SPMD on, a one-axis ``fsdp`` mesh over every
device, ``SpmdFullyShardedDataParallel`` wrapping each transformer block and then the model,
the batch marked ``("fsdp", None)``, ``loss.backward()``, ``optimizer.step()``,
``xm.mark_step()``).

python bench/fsdpv2_loop.py --preset=small --seq_len=128 --batch_size=4 --steps=30: prints one
JSON line, ``{"tokens_per_second_per_device": ..., "steps": ...}``, timed as the trainer's
summary times it (the steps after the first two, which compile, to the last one's result).
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import torch_xla  # noqa: E402
import torch_xla.core.xla_model as xm  # noqa: E402
import torch_xla.distributed.spmd as xs  # noqa: E402
import torch_xla.runtime as xr  # noqa: E402
from torch_xla.distributed.fsdp.wrap import transformer_auto_wrap_policy  # noqa: E402
from torch_xla.experimental.spmd_fully_sharded_data_parallel import (  # noqa: E402
    SpmdFullyShardedDataParallel as FSDPv2,
)

from trainer.lm.decoder import Block, Decoder, preset  # noqa: E402

VOCABULARY = 257  # the raw-bytes vocabulary of trainer.lm --fake_data
WARM_STEPS = 2  # compiled: left out of the rate, as the trainer's steady rate leaves them


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--seq_len", type=int, default=128)
    parser.add_argument("--batch_size", type=int, default=4, help="windows a device")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--lr", type=float, default=3e-4)
    args = parser.parse_args()

    xr.use_spmd()
    devices = xr.global_runtime_device_count()
    mesh = xs.Mesh(numpy.arange(devices), (devices, 1), ("fsdp", "model"))
    xs.set_global_mesh(mesh)
    torch.manual_seed(1)
    model = Decoder(preset(args.preset, VOCABULARY, args.seq_len)).to(torch_xla.device())
    policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={Block})
    model = FSDPv2(model, auto_wrap_policy=policy)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    generator = numpy.random.default_rng(1)
    rows = args.batch_size * devices
    started = None
    for step in range(args.steps):
        if step == WARM_STEPS:
            xm.wait_device_ops()
            started = time.perf_counter()
        tokens = torch.from_numpy(generator.integers(
            0, VOCABULARY, (rows, args.seq_len + 1)).astype(numpy.int64))
        inputs, labels = tokens[:, :-1].to(torch_xla.device()), tokens[:, 1:].to(
            torch_xla.device())
        xs.mark_sharding(inputs, mesh, ("fsdp", None))
        xs.mark_sharding(labels, mesh, ("fsdp", None))
        optimizer.zero_grad()
        logits = model(inputs)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())
        loss.backward()
        optimizer.step()
        xm.mark_step()
    xm.wait_device_ops()
    seconds = time.perf_counter() - started
    timed = args.steps - WARM_STEPS
    print(json.dumps({"tokens_per_second_per_device":
                      timed * rows * args.seq_len / seconds / devices, "steps": args.steps,
                      "devices": devices, "final_loss": loss.item()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
