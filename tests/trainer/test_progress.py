"""trainer.progress: each progress line says where the time went (step time, input wait,
examples/s per device, graphs); an input-starved run says ``input-bound`` with the fix that
applies, a --fake_data run never does; summary.json carries input_wait and the seconds spent
evaluating, checkpointing and compiling.

The starved run is real: the ImageNet trainer with one data worker decoding 3,000 x 2,250 px
JPEGs of noise (about 60 ms each here: a decoder cannot skip the entropy decoding of a large
file, whatever size it scales to) for tests/tiny_model.py at 16 px, batch 4, whose steps take
milliseconds."""

import json
import logging
import re
import subprocess
import sys

import pytest
import torch

from conftest import REPO, clean_environ
from trainer.progress import InputSetup, input_bound_advice


@pytest.mark.parametrize("setup, fix", [
    (InputSetup(False, 0, 8),
     "--num_workers=-1 (one per core but the trainer's; this host has 8 cores)"),
    (InputSetup(False, 2, 8), "--num_workers=7 (now 2; this host has 8 cores; they share one "
                              "ring of step buffers in /dev/shm"),
    # Smaller images are made where the images come from: the shards, or shards of the class
    # folders (it said "before make_shards" to a run with no shards).
    (InputSetup(False, 7, 8), "all 8 cores of this host decode already (7 data workers): a host "
                              "with more cores, or smaller images, as decoding time grows with "
                              "the pixels (make shards of these folders with python -m "
                              "trainer.data.make_shards --max_shorter_side=N, e.g. 320 for "
                              "--image_size=224)"),
    (InputSetup(False, 7, 8, from_shards=True), "or smaller images, as decoding time grows "
                                                "with the pixels (make the shards again with "
                                                "--max_shorter_side=N, e.g. 320"),
    # Memory held only 3 of the 7 workers the cores would run (trainer.data.workers): no
    # --num_workers past that; what frees memory, or more of it.
    (InputSetup(False, 3, 8, memory_holds=3),
     "the host's memory holds only 3 data workers (now 3; this host has 8 cores; the start-up "
     "line \"data workers:\" says what each takes): a smaller --batch_size (the step ring and "
     "the runs in flight shrink with it) leaves room for more, or a host or container with more "
     "memory"),
    (InputSetup(False, 2, 8, memory_holds=5), "more data workers: --num_workers=5 (now 2; this "
                                              "host has 8 cores; its memory holds no more;"),
    # MNIST on an accelerator: arrays in memory, no workers; no advice about decoding or
    # make_shards.
    (InputSetup(False, 1, 2, decodes_images=False),
     "the batches are cut from memory (nothing to decode), so the wait is their copy to the "
     "devices: a larger --batch_size per device"),
])
def test_the_advice_names_the_fix_that_applies_on_this_host(setup, fix):
    line = input_bound_advice(0.345, 20, setup)
    assert line.startswith("input-bound: the loop waited 34% of the last 20 steps for the "
                           "next batch; ")
    assert fix in line
    if setup.memory_holds is not None:
        assert "--num_workers={}".format(setup.cores - 1) not in line
    if not setup.decodes_images:
        assert not re.search(r"decode already|make_shards|--num_workers", line), line


def test_a_window_that_compiled_is_not_called_input_bound(caplog):
    # The first window compiles the step while the data workers start: its wait is their
    # start-up, which more workers would not shorten. The next window's wait is supply.
    from trainer.loop import LoopState
    from trainer.progress import ProgressLog

    state, graphs = LoopState(), [0]
    progress = ProgressLog(state, 4, 1, 100, lambda kind, values, step: None,
                           lambda: graphs[0], InputSetup(False, 1, 8))
    graphs[0] = 2
    state.clock.seconds, state.clock.waited = 10.0, 3.0  # 30 % waited, compiling
    with caplog.at_level(logging.INFO, logger="trainer"):
        progress(2, torch.tensor(2.0))
        assert "input-bound" not in caplog.text
        state.clock.seconds, state.clock.waited = 11.0, 3.3  # 30 % of this window too
        progress(4, torch.tensor(4.0))
    assert caplog.text.count("input-bound: the loop waited 30% of the last 2 steps") == 1


@pytest.mark.parametrize("setup, starves", [
    (InputSetup(True, 0, 8), False),  # --fake_data
    (InputSetup(False, 0, 2, decodes_images=False, host_device=True), False),  # make run
    (InputSetup(False, 0, 2, decodes_images=False), True),  # the same batches onto a TPU
    (InputSetup(False, 1, 2, host_device=True), True),  # decoding on the host: it can
])
def test_only_an_input_that_can_fall_behind_is_called_input_bound(caplog, setup, starves):
    """MNIST's batches cut from memory onto the XLA CPU device waited 12 % of a window (the
    copy thread waiting for a core): that is the steps' compute, not a slow input."""
    from trainer.loop import LoopState
    from trainer.progress import ProgressLog

    state = LoopState()
    progress = ProgressLog(state, 4, 1, 100, lambda kind, values, step: None, lambda: 1,
                           setup)
    state.clock.seconds, state.clock.waited = 1.0, 0.3
    with caplog.at_level(logging.INFO, logger="trainer"):
        progress(10, torch.tensor(10.0))
    assert ("input-bound: the loop waited 30% of the last 10 steps" in caplog.text) == starves


@pytest.fixture(scope="module")
def large_image_shards(tmp_path_factory):
    """2 classes x 8 training and 2 validation JPEGs of noise, 3,000 x 2,250 px, as shards."""
    import photos
    from trainer.data.make_shards import convert

    root = photos.build_noise(tmp_path_factory.mktemp("large-images"))
    dest = tmp_path_factory.mktemp("large-image-shards")
    convert(str(root), str(dest), shard_size=8, workers=0)
    return dest


def run_trainer(module, *args):
    result = subprocess.run([sys.executable, "-m", module] + list(args), cwd=str(REPO),
                            env=clean_environ(PJRT_DEVICE="CPU",
                                              PYTHONPATH=str(REPO / "tests")),
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    return result.stdout


PROGRESS = re.compile(r"step (\d+)/(\d+)  loss \S+  ([\d.]+) ms/step  input wait (\d+)%  "
                      r"([\d.]+) examples/s \(([\d.]+) per device\)  (\d+) graphs  ETA ")


def summary_in_range(job):
    summary = json.loads((job / "summary.json").read_text())
    assert 0.0 <= summary["input_wait"] <= 1.0
    assert 0 < summary["training_seconds"] <= summary["wall_time_seconds"]
    for name in ("evaluation_seconds", "checkpoint_seconds", "compile_seconds"):
        assert 0 < summary[name] < summary["wall_time_seconds"], name
    return summary


def test_a_starved_run_says_input_bound_with_its_fix(large_image_shards, tmp_path):
    # Starved whatever the machine: one worker decodes a 6 MB noise JPEG in 60-70 ms here,
    # so at batch 4 it supplies a step in about a quarter of a second, where a step of
    # tests/tiny_model.py takes milliseconds (ResNet-18's, 75-110 ms here, starved it less,
    # and its compile was most of this test's 64 CPU seconds).
    # The run must also outlast what the worker builds ahead, much of it while the first step
    # compiles: the step ring's ring_batches() local batches (24: 4.8 epochs of 4 training
    # steps and 1 evaluation step). At 3 epochs of batch 2, the ring covered the whole run.
    from trainer.data.plan import ring_batches
    epochs = ring_batches() // 5 + 3
    job = tmp_path / "job"
    out = run_trainer("trainer.imagenet", "--data_dir=" + str(large_image_shards),
                      "--num_workers=1", "--model=tiny_model:build", "--image_size=16",
                      "--batch_size=4", "--num_epochs={}".format(epochs), "--warmup_epochs=0",
                      "--log_steps=2", "--job_dir=" + str(job))
    output = out.splitlines()
    [at] = [number for number, line in enumerate(output) if "input-bound" in line]  # once
    advice = output[at]
    assert re.search(r"input-bound: the loop waited \d+% of the last 2 steps for the next "
                     r"batch; ", advice), advice
    assert "--num_workers=" in advice or "cores of this host decode already" in advice
    lines = [PROGRESS.search(line) for line in output if " ms/step " in line]
    assert lines and all(lines), out
    # The summary's wait covers at least the window the advice was about (the progress line
    # just before it): 2 steps of its ms/step, its share waited; less the lines' rounding
    # (0.05 ms, half a percent). How much a starved run waits in all depends on the machine.
    window = PROGRESS.search(output[at - 1])
    waited_in_window = 2 * (float(window.group(3)) - 0.05) / 1e3 * (
        int(window.group(4)) - 0.5) / 100
    summary = summary_in_range(job)
    assert summary["input_wait"] * summary["training_seconds"] >= waited_in_window > 0
    records = [json.loads(line) for line in (job / "metrics.jsonl").read_text().splitlines()]
    train = [record for record in records if record["kind"] == "train"]
    assert {"step_seconds", "input_wait", "examples_per_second_per_device",
            "graphs_compiled"} <= set(train[0])


def test_a_fake_data_run_is_never_input_bound(tmp_path):
    job = tmp_path / "job"
    out = run_trainer("trainer.mnist", "--fake_data", "--num_epochs=2", "--num_steps=20",
                      "--log_steps=1", "--job_dir=" + str(job))
    assert "input-bound" not in out
    progress = [PROGRESS.search(line) for line in out.splitlines() if " ms/step " in line]
    assert len(progress) == 40 and all(progress)
    summary = summary_in_range(job)
    assert int(progress[-1].group(7)) == summary["compile_count"]
    # A sanity bound, not the guard of the one-copy rule (test_fit counts the transfers):
    # the fake batch is on the device before the first step, so the loop waits for one
    # generator step, microseconds, against steps of milliseconds on any CPU.
    assert summary["input_wait"] < 0.05, summary["input_wait"]


def test_the_run_takes_the_advice_of_its_data_mnists_arrays_or_decoded_images(photo_shards):
    from trainer.batches import TensorSource
    from trainer.config import TrainConfig
    from trainer.data.shard_source import ShardSource
    from trainer.fit import _input_setup

    digits = TensorSource(torch.zeros(4, 1, 2, 2), torch.zeros(4, dtype=torch.int64),
                          torch.zeros(4, 1, 2, 2), torch.zeros(4, dtype=torch.int64), 2)
    shards = ShardSource(str(photo_shards), 16, 8, 0, 1)
    config = TrainConfig(data_dir="unused")
    assert not _input_setup(config, digits).decodes_images
    assert _input_setup(config, shards).decodes_images
    assert _input_setup(config, shards).memory_holds is None
    shards.memory_holds = 2  # as trainer.imagenet.build_data sets it where memory is the limit
    assert _input_setup(config, shards).memory_holds == 2
