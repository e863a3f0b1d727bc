"""trainer.data.plan: ImageNet's figures on v5e slices from an index without data
(``tests/shard_sets.py``), and the command: it reads only the index, local or on
fake-gcs-server, and bad options are one line, a hint and exit 64."""

import functools
import math
import subprocess
import sys

import pytest
import shard_sets

from conftest import REPO, clean_environ
from trainer.data import jpeg_limits, plan
from trainer.data.epoch_order import MIXING_STEPS
from trainer.data.shard_reads import RUNS_AHEAD

N = shard_sets.IMAGENET_TRAIN


@functools.lru_cache(maxsize=None)
def imagenet():
    return shard_sets.imagenet_index()


@pytest.mark.parametrize("hosts, chips, per_chip", [
    (1, 4, 128), (4, 4, 128), (16, 4, 128), (64, 4, 128), (64, 8, 256), (2, 8, 32)])
def test_imagenet_on_a_slice_trains_on_all_but_one_global_batch(hosts, chips, per_chip):
    shape = plan.shape_from_flags(hosts, chips, per_chip, 0, 32, 224)
    figures = plan.make_plan(imagenet(), shape)
    batch = hosts * chips * per_chip
    assert figures.steps_per_epoch == N // batch
    assert N - figures.covered < batch
    assert figures.eval_steps == math.ceil(50_000 / batch)
    assert figures.eval_padding == figures.eval_steps * batch - 50_000
    assert figures.read_per_epoch <= 1.05 * figures.train_size
    # Each step is cut into at most 32 work units of whole pieces, dealt to the 32 workers of
    # each host in turn: no more reads than whole steps would need.
    assert math.ceil(figures.steps_per_epoch / 32) <= figures.worker.runs
    local = batch // hosts
    assert figures.batch_bytes == local * (3 * 224 * 224 + 8)
    # A unit is at most ceil(local / 32) + 32 rows (a part of a step cut for 32 workers and
    # one piece more); 32 workers have PREFETCH_BATCHES each in flight, enough for a mixing
    # group and a step more. They decode into the step ring: the groups the device loader's
    # batches and the one handed out span (9 + 1 consecutive steps: 4 groups of 4) and the
    # 2 the workers build meanwhile, whatever the workers' number.
    assert plan.PREFETCH_BATCHES == MIXING_STEPS + 1
    assert figures.unit_bytes == min(local, -(-local // 32) + 32) * (3 * 224 * 224 + 8)
    assert plan.LOADER_HELD_BATCHES == 9 and plan.ring_slots(MIXING_STEPS) == 4 + 2
    assert plan.ring_slots(1) == 10 + 5
    assert figures.shared_memory == 6 * MIXING_STEPS * figures.batch_bytes
    assert figures.shared_memory == plan.shared_memory(plan.shape_from_flags(
        hosts, chips, per_chip, 0, 1, 224))
    assert figures.worker_ram == (RUNS_AHEAD + 1) * max(figures.worker.largest_run,
                                                        figures.largest_eval_run)
    assert figures.host_ram == 32 * figures.worker_ram + figures.shared_memory
    # Each of the 32 decoders may hold an image at the decode budget besides its process.
    assert figures.host_total == figures.host_ram + 32 * (plan.WORKER_PROCESS_BYTES
                                                          + jpeg_limits.DECODE_BUDGET)


def test_without_workers_there_is_no_shared_memory_to_ask_for():
    figures = plan.make_plan(imagenet(), plan.shape_from_flags(1, 4, 128, 0, 0, 224))
    assert figures.shared_memory == 0 and figures.worker.runs == figures.steps_per_epoch


@pytest.fixture(scope="module")
def imagenet_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("imagenet-index")
    (folder / "index.json").write_bytes(imagenet().to_json())
    return folder


def test_the_command_prints_the_plan_from_a_local_or_a_cloud_index(imagenet_dir, gcs, capsys):
    gcs.blob("imagenet/index.json").upload_from_filename(str(imagenet_dir / "index.json"))
    printed = []
    for data_dir in (str(imagenet_dir), "gs://{}/imagenet".format(gcs.name)):
        assert plan.main(["--data_dir=" + data_dir, "--hosts=16", "--devices_per_host=4",
                          "--batch_size=128"]) == 0
        printed.append(capsys.readouterr().out)
    assert printed[0] == printed[1]
    choice, *lines = printed[0].splitlines()
    # --num_workers=-1 on a host of --host_cores=112: every core but the trainer's.
    assert choice.startswith("data workers: 111 (one per core but the trainer's); ")
    assert lines[0] == ("slice: 16 hosts x 4 devices, global batch 8192 (128 per device), 111 "
                        "data workers per host")
    assert lines[1].startswith("training: 1,281,167 examples in 1,282 shards (")
    assert "; 156 steps per epoch cover 99.75% of them, each once (3,215 left out" in lines[1]
    assert lines[2] == ("evaluation: 50,000 examples in global batches of 8192: 7 steps, 7,344 "
                        "padding (in the last step)")
    assert lines[3].startswith("per data worker per epoch, at most: 25 runs (work units), 25 "
                               "ranged reads, ")
    assert lines[4].startswith("read per epoch by all hosts: ")
    assert lines[5].startswith("data memory per host: ") and "/dev/shm needs 1.8 GB" in lines[5]
    assert "a step ring of 24 local batches of 77.1 MB (6 slots of 4 steps)" in lines[5]


@pytest.mark.parametrize("args, text", [
    (["--hosts=0"], "--hosts=0 must be at least 1"),
    (["--batch_size=-8"], "--batch_size=-8 must be at least 1"),
    (["--num_workers=-2"], "--num_workers must be -1 or more"),
    (["--host_memory_gb=-1"], "--host_memory_gb 0 or more"),
    (["--hosts=64", "--devices_per_host=8", "--batch_size=4096"],
     "a global batch of 2097152 is larger than the training set (1281167 examples)"),
])
def test_bad_options_are_one_line_a_hint_and_exit_64(imagenet_dir, capsys, args, text):
    assert plan.main(["--data_dir=" + str(imagenet_dir)] + args) == 64
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and text in lines[0] and lines[1].startswith("HINT: ")


def run_plan(*args):
    return subprocess.run([sys.executable, "-m", "trainer.data.plan"] + list(args),
                          cwd=str(REPO), env=clean_environ(), capture_output=True, text=True,
                          timeout=120)


def test_the_command_refuses_a_missing_flag_or_index(tmp_path):
    usage = run_plan("--hosts=two")
    assert usage.returncode == 64 and "--hosts" in usage.stderr
    missing = run_plan("--data_dir=" + str(tmp_path))
    assert missing.returncode == 65 and "has no index.json" in missing.stderr
    assert missing.stderr.strip().splitlines()[-1].startswith("HINT: ")
    assert "Traceback" not in missing.stderr


def test_without_an_index_it_prints_the_workers_a_host_gets_and_their_memory(capsys):
    """A v6e host (180 vCPUs, 720 GB, 8 chips): 179 workers, memory far from a limit; with
    32 GB, the count memory holds, and the memory line adds up to the workers' and the
    ring's figures."""
    assert plan.main(["--host_cores=180", "--host_memory_gb=720", "--devices_per_host=8"]) == 0
    choice, slice_, memory, carry = capsys.readouterr().out.splitlines()
    assert choice.startswith("data workers: 179 (one per core but the trainer's; memory would "
                             "hold 881)")
    assert "the host: 180 cores (--host_cores), 720 GB (--host_memory_gb)" in choice
    assert slice_ == ("slice: 1 host x 8 devices, global batch 1024 (128 per device), 179 data "
                      "workers per host, an ImageNet-like shard set (110 KB an example)")
    fixed, per_worker = plan.data_memory(plan.shape_from_flags(1, 8, 128, 0, 179, 224),
                                         plan.IMAGENET_EXAMPLE_BYTES)
    assert memory.startswith("memory per host: about {:.0f} GB in all: each data worker about "
                             "808 MB (260 MB its own, up to 537 MB decoding one image, 10.9 MB "
                             "of encoded runs); the step ring "
                             "3.7 GB in /dev/shm (24 local batches of 154 MB)".format(
                                 (fixed + 179 * per_worker) / 1e9))
    assert carry == plan.carry_line(179)
    assert plan.main(["--host_cores=224", "--host_memory_gb=32", "--devices_per_host=8"]) == 0
    assert capsys.readouterr().out.startswith("data workers: 29 (memory holds only 29: ")


def test_what_the_trainer_carries_is_set_next_to_what_its_workers_supply():
    """From the measured CPU per image of each (docs/benchmarks.md): 179 workers of a v6e
    host supply about 66,000 images/s, which the trainer's side carries on one core; with no
    workers the trainer's own decoding is what bounds the host."""
    line = plan.carry_line(179)
    assert line.startswith("images/s per host: the trainer process's side of the input "
                           "carries about {:,.0f} on its core ({} ms of CPU an image".format(
                               1000 / plan.TRAINER_MS_PER_IMAGE, plan.TRAINER_MS_PER_IMAGE))
    assert "the 179 data workers supply about 66,296 (2.7 ms an image each): the decoders " \
           "bound the host" in line
    assert "its own decoding (no data workers) supplies about 370 " in plan.carry_line(0)
    # The goal of issue 56: a v6e host's 75,000 images/s within one core of the trainer.
    assert 1000 / plan.TRAINER_MS_PER_IMAGE >= 75_000
