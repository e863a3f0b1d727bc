"""A checkpoint of state split over the devices (``--sharding=fsdp``): written as each host's
own pieces (``trainer.parallel.pieces``) against gathered whole first, and restored from each
(run: make bench, or python bench/checkpoint_pieces.py [--repeats N] [--hosts H]).

A decoder (width 512, 8 layers, vocabulary 256: 25 M parameters) with AdamW's moments after one
step, split over 4 XLA CPU devices (``CPU_NUM_DEVICES=4``, one SPMD program) as ``trainer.lm
--sharding=fsdp`` splits it. Three ways, alternating, ``--repeats`` times each, medians:

- ``gathered``: every split tensor fetched whole through XLA (a compiled gather each), as a
  slice's processes fetched it before pieces, then one file written by one host;
- ``assembled``: one host's way (``xla.to_host``): the shards put together on the host, one file;
- ``pieces``: ``--hosts`` simulated hosts of consecutive devices, each host's regions fetched
  and written as its own file (here one process writes them one after another; on a slice the
  hosts write theirs at once, each ``1/H`` of the bytes: the largest piece is reported).

For each: the seconds the training loop waits for the state to reach host memory, the seconds
the (background) write takes, and the restore's (read, checked, put together, loaded into the
model and optimizer). Local disk (fsync included): on ``gs://`` each host's upload is its own
stream, so pieces divide the upload time by the hosts too, which one host here cannot show.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("PJRT_DEVICE", "CPU")
os.environ.setdefault("CPU_NUM_DEVICES", "4")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch_xla  # noqa: E402

from trainer import devices, xla  # noqa: E402
from trainer.checkpoints import CheckpointStore, _rebuilt, named_tensors, to_cpu  # noqa: E402
from trainer.lm.decoder import Decoder, preset  # noqa: E402
from trainer.parallel import fsdp, pieces  # noqa: E402
from trainer.storage import LocalDirectory  # noqa: E402

WAYS = ("gathered", "assembled", "pieces")


def split_state(topology: devices.Topology):
    """(model, optimizer) on the devices, split as ``--sharding=fsdp`` splits them, after one
    AdamW step."""
    dev = xla.device()
    torch.manual_seed(0)
    model = Decoder(preset("small", 256, 128, width=512, layers=8)).to(dev)
    sharding = devices.batch_sharding(topology, fsdp=topology.devices)
    plan = fsdp.ShardPlan(model.named_parameters(), topology.devices, 2)
    for name, parameter in model.named_parameters():
        if plan.dims[name] is not None:
            sharding.shard(parameter, plan.dims[name])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, 256, (topology.devices, 128)).to(dev)
    model(tokens).float().logsumexp(-1).mean().backward()
    optimizer.step()
    xla.sync()
    xla.wait()
    return model, optimizer


def gathered(tensors):
    """Every tensor fetched whole through XLA (sharded ones by compiled gathers)."""
    named = [tensor for _, tensor in named_tensors(tensors)]
    return _rebuilt(tensors, iter(torch_xla._XLAC._xla_get_cpu_tensors(named)))


def one_way(way: str, model, optimizer, folder: str, hosts: int, devices_count: int):
    """(seconds to host memory, seconds writing, seconds restoring, bytes of the largest
    file) of checkpointing ``way`` into ``folder`` and restoring from it."""
    store = CheckpointStore(LocalDirectory(folder), keep=1)
    tensors = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
    position = {"step": 1, "epoch": 0}
    started = time.perf_counter()
    if way == "pieces":
        layout = pieces.PieceLayout.simulated(hosts, devices_count)
        written = pieces.take(tensors, layout, xla.sharded, xla.local_regions, xla.to_host,
                              position)
    else:
        snapshot = gathered(tensors) if way == "gathered" else to_cpu(tensors, xla.to_host)
        snapshot.update(position)
    copied = time.perf_counter()
    if way == "pieces":
        store.hosts = hosts
        for host, piece in written.items():
            store.save_piece(1, host, piece)
    else:
        store.save(1, snapshot)
    wrote = time.perf_counter()
    largest = max(os.path.getsize(os.path.join(folder, name)) for name in os.listdir(folder))
    step, state = store.load_latest()
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    for group in optimizer.param_groups:  # as the trainer does: the moments split again
        for parameter in group["params"]:
            for value in optimizer.state[parameter].values():
                xla.shard_like(value, parameter)
    xla.sync()
    xla.wait()
    restored = time.perf_counter()
    for name in os.listdir(folder):
        os.remove(os.path.join(folder, name))
    return copied - started, wrote - copied, restored - wrote, largest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--hosts", type=int, default=4)
    args = parser.parse_args()
    topology = devices.detect("auto")
    model, optimizer = split_state(topology)
    whole = sum(t.numel() * t.element_size() for _, t in named_tensors(
        {"model": model.state_dict(), "optimizer": optimizer.state_dict()}))
    print("state: {:.0f} MB whole, split over {} devices; pieces of {} hosts".format(
        whole / 1e6, topology.devices, args.hosts))
    results = {way: [] for way in WAYS}
    with tempfile.TemporaryDirectory() as folder:
        for way in WAYS:  # a first pass unmeasured: every graph compiled, the file cache warm
            one_way(way, model, optimizer, folder, args.hosts, topology.devices)
        for _ in range(args.repeats):
            for way in WAYS:
                results[way].append(one_way(way, model, optimizer, folder, args.hosts,
                                            topology.devices))
    medians = {way: [statistics.median(run[index] for run in runs) for index in range(4)]
               for way, runs in results.items()}
    print("{:<10} {:>12} {:>10} {:>10} {:>16}".format("way", "to host s", "write s",
                                                      "restore s", "largest file MB"))
    for way, (host, write, restore, largest) in medians.items():
        print("{:<10} {:>12.3f} {:>10.3f} {:>10.3f} {:>16.1f}".format(
            way, host, write, restore, largest / 1e6))
    base = medians["gathered"]
    piece = medians["pieces"]
    print("pieces/gathered: to host {:.2f}x, write {:.2f}x, restore {:.2f}x, largest file "
          "{:.2f}x".format(piece[0] / base[0], piece[1] / base[1], piece[2] / base[2],
                           piece[3] / base[3]))


if __name__ == "__main__":
    main()
