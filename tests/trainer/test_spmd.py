"""Training over several XLA devices in one process (SPMD) on the real XLA CPU device with
``CPU_NUM_DEVICES=4``, as pytorch/xla's own CI runs its SPMD tests. SPMD cannot be switched
off in a process once on, so these tests run in their own pytest session (``make test``:
marker ``spmd``); runs on one device for comparison are separate processes.

What holds, and why it can fail: four devices train as one device does on the same global
batch (float64, within ``agreement``'s bound; a summed instead of averaged gradient lands far
outside it); the batch is split, not copied, over the devices; evaluation counts each example
once; every step is one device execution and nothing compiles after the first epoch;
checkpoints move between device counts; SIGTERM stops all devices with a checkpoint.
"""

import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.spmd
DEVICES = 4
if os.environ.get("CPU_NUM_DEVICES") != str(DEVICES):
    pytest.skip("needs CPU_NUM_DEVICES={} (make test runs it so)".format(DEVICES),
                allow_module_level=True)
os.environ.setdefault("PJRT_DEVICE", "CPU")

import one_program  # noqa: E402
import torch_xla  # noqa: E402
from mnist_files import write_mnist  # noqa: E402
from test_trainer_process import finish, sigterm_at_step_10, trainer  # noqa: E402

from agreement import assert_same_training, assert_training_differs  # noqa: E402
from conftest import MNIST_SUBSET, REPO, TESTS, clean_environ, needs_mnist  # noqa: E402
from trainer import devices, imagenet, mnist, xla  # noqa: E402
from trainer.config import TrainConfig  # noqa: E402
from trainer.errors import EX_USAGE, TrainerError  # noqa: E402
from trainer.optim import LearningRate  # noqa: E402
from trainer.outputs import OutputPaths  # noqa: E402
from trainer.steps import Steps  # noqa: E402

TOPOLOGY = devices.detect("auto")  # every test here runs on the 4-device mesh
SHARDING = devices.batch_sharding(TOPOLOGY)


def test_auto_finds_the_four_devices_and_a_count_it_cannot_use_is_a_usage_error():
    assert (TOPOLOGY.devices, TOPOLOGY.found, TOPOLOGY.spmd) == (DEVICES, DEVICES, True)
    assert devices.detect(str(DEVICES)) == TOPOLOGY
    for value, words in (("8", "--devices=8 but the runtime sees 4 devices"),
                         ("2", "--devices=2: a torch_xla mesh spans all 4 devices")):
        with pytest.raises(TrainerError) as raised:
            devices.detect(value)
        assert raised.value.exit_code == EX_USAGE and raised.value.message.startswith(words)


@pytest.fixture(scope="module")
def one_device(tmp_path_factory):
    """``one_program``'s training on one XLA device in its own process, as trained (scale 1)
    and with the loss of each of 4 devices summed (scale 4)."""
    runs = {}
    for scale in (1, DEVICES):
        out = tmp_path_factory.mktemp("one-device") / "state.pt"
        result = subprocess.run(
            [sys.executable, str(TESTS / "trainer" / "one_program.py"), str(out), str(scale)],
            cwd=str(REPO), env=clean_environ(
                PJRT_DEVICE="CPU", CPU_NUM_DEVICES="1", PYTHONPATH=os.pathsep.join(
                [str(REPO), str(TESTS), str(TESTS / "trainer")])),
            capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr
        runs[scale] = torch.load(str(out), weights_only=False)
    return runs


@pytest.mark.numeric
@pytest.mark.parametrize("path", [xla.LAZY, xla.COMPILED])
def test_four_devices_train_as_one_device_does_on_the_same_global_batch(path, one_device):
    """Float64, so the partitioned reductions' other summation order stays within
    ``agreement.RELATIVE`` on any CPU. A gradient summed over the devices instead of averaged
    (what a wrong partition would give) lands far outside that bound."""
    reference, start = one_device[1]["trained"], one_device[1]["start"]
    assert_same_training(one_program.train(path, SHARDING), reference, start)
    assert_training_differs(one_device[DEVICES]["trained"], reference, start, "fc2.weight")


@pytest.mark.parametrize("fixed", [False, True], ids=["copied", "resident"])
def test_each_batch_is_split_over_the_devices_along_its_first_dimension(fixed):
    # resident: --fake_data's one batch, copied once (xla.resident_batches), split the same.
    batches = list(one_program.batches(1, 8))
    [(x, y)] = list(xla.resident_batches(batches, batches[0], xla.device(), xla.COMPILED,
                                         SHARDING) if fixed else
                    xla.device_loader(batches, xla.device(), xla.COMPILED, SHARDING))
    for tensor in (x, y):
        spec = torch_xla._XLAC._get_xla_sharding_spec(tensor)
        assert spec.startswith("{devices=[4") and "0,1,2,3}" in spec, spec
    assert tuple(x.shape) == (8, 1, 28, 28)  # the global batch, one quarter per device


@pytest.mark.parametrize("path", [xla.LAZY, xla.COMPILED])
def test_evaluation_counts_every_example_once(path):
    from trainer.batches import TensorSource

    generator = torch.Generator().manual_seed(3)
    eval_x = torch.randn(23, 1, 28, 28, generator=generator)
    eval_y = torch.randint(0, 10, (23,), generator=generator)
    source = TensorSource(eval_x[:8], eval_y[:8], eval_x, eval_y, batch_size=8,
                          eval_batch_size=8)
    torch.manual_seed(0)
    model = mnist.MnistNet().eval()
    with torch.no_grad():
        expected = int((model(eval_x).argmax(1) == eval_y).sum())
    model = model.to(xla.device())  # first: the optimizer holds the parameters that train
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    steps = Steps(model, optimizer, LearningRate(optimizer, 0.1, 0, 1), F.nll_loss, (1,), path)
    from trainer.loop import evaluate

    accuracy = evaluate(steps, xla.device_loader(source.eval_batches(), steps.device, path,
                                                 SHARDING))
    # The 23 real examples (3 batches of 8: one place is padding); hits in whole examples.
    assert accuracy["top1"] * 23 == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("step_mode", ["compiled", "lazy"])
def test_every_step_is_one_execution_on_all_devices_and_nothing_compiles_after_epoch_1(
        step_mode, tmp_path):
    summary = mnist.run(TrainConfig(fake_data=True, num_epochs=3, num_steps=5, batch_size=8,
                                    log_steps=2, step_mode=step_mode),
                        paths=OutputPaths.resolve(str(tmp_path), {}))
    assert (summary["devices"], summary["global_batch"], summary["step_path"]) == (
        DEVICES, 8 * DEVICES, step_mode)
    # The rate of the global batch: 0.05 per 64 examples, so 0.025 for 8 x 4.
    assert summary["learning_rate"] == pytest.approx(0.025)
    # 5 training and 5 evaluation steps per epoch, each one execution on all four devices.
    assert summary["executions_per_epoch"] == [10, 10, 10]
    first = summary["compiles_after_each_epoch"][0]
    assert summary["compiles_after_each_epoch"] == [first] * 3
    assert json.loads((tmp_path / "summary.json").read_text())["devices"] == DEVICES


def test_the_lockstep_wait_for_the_steps_is_compute_not_input(tmp_path, caplog):
    """On the XLA CPU device each batch waits until the steps before it have finished
    (``xla.collectives_need_lockstep``): that wait is their compute. Counted as waiting for
    input, the sample's batches from memory waited 86-88 % of every window and were called
    input-bound. What is left is taking an in-memory batch the loader copied during the step
    before it: under half of a window's time, however loaded the machine (it was all the
    step's compute before)."""
    import logging

    with caplog.at_level(logging.INFO, logger="trainer"):
        mnist.run(TrainConfig(data_dir=str(REPO / "data" / "mnist-sample"), num_epochs=1,
                              num_steps=20, log_steps=5),
                  paths=OutputPaths.resolve(str(tmp_path), {}))
    assert "input-bound" not in caplog.text
    train = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()
             if '"train"' in line]
    # The first window compiles the step; the others are the steady lockstep.
    assert len(train) == 4 and all(record["input_wait"] < 0.5 for record in train[1:]), train


@pytest.mark.parametrize("step_mode, sharding", [("compiled", "dp"), ("lazy", "dp"),
                                                  ("compiled", "fsdp")])
def test_imagenet_trains_on_the_four_devices(step_mode, sharding):
    """--sharding=fsdp too: ResNet-18's convolutions split on their output channels, the
    batch-norm statistics (buffers) whole; a step is still one execution."""
    summary = imagenet.run(TrainConfig(fake_data=True, model="resnet18", image_size=32,
                                       num_epochs=1, num_steps=2, batch_size=2, log_steps=1,
                                       step_mode=step_mode, sharding=sharding),
                           paths=OutputPaths())
    assert (summary["devices"], summary["global_batch"], summary["global_step"]) == (
        DEVICES, 2 * DEVICES, 2)
    assert summary["executions_per_epoch"] == [4] and summary["sharding"] == sharding
    assert 0.0 <= summary["final_top5"] <= 1.0


@needs_mnist
@pytest.mark.numeric
def test_the_mnist_defaults_reach_99_percent_in_5_epochs_on_four_devices():
    summary = mnist.run(TrainConfig(data_dir=str(MNIST_SUBSET), log_steps=0),
                        paths=OutputPaths())
    assert (summary["epochs"], summary["devices"]) == (5, DEVICES)
    assert summary["final_accuracy"] >= 0.99


def test_a_vote_sums_the_stop_flags_of_every_device():
    # One entry per device: as if the host owning devices 2 and 3 had received SIGTERM.
    votes = devices.BoundaryVote(TOPOLOGY, lambda: False, SHARDING, xla.device())
    assert float(votes.tally(torch.tensor([0.0, 0.0, 1.0, 1.0]))) == 2.0
    assert float(votes.tally(torch.zeros(DEVICES))) == 0.0


def on_a_slice(stop_flags, due_flags):
    """The vote of this process as host 2 of 2 hosts (injected), its flags given in turn."""
    stops, dues = iter(stop_flags), iter(due_flags)
    return devices.BoundaryVote(devices.Topology(DEVICES, DEVICES, DEVICES, 1, 2),
                                lambda: next(stops), xla.BatchSharding(DEVICES, host_part=True),
                                xla.device(), lambda: next(dues))


def test_on_a_slice_the_vote_of_one_boundary_stops_every_host_at_the_next():
    # Its own SIGTERM flag goes up after step 1.
    vote = on_a_slice([False, True, True, True], [False] * 4)
    assert [vote.should_stop() for _ in range(3)] == [False, False, True]
    assert vote.settle() is True


def test_a_hosts_counts_are_summed_over_the_mesh_once_each():
    """Damaged images over the job's hosts (``BoundaryVote.job_sum``): each host's count on
    one of its devices, zeros on the others, summed by the mesh; this process is the only
    real host, so the sum is its own counts (put on every device it would read 4 times as
    many), exact in float32 to 2^24."""
    vote = on_a_slice([], [])
    assert vote.job_sum([3, 0, 1281, 2 ** 24]) == [3, 0, 1281, 2 ** 24]
    # One process: its counts are the job's, no device execution.
    assert devices.BoundaryVote(TOPOLOGY, lambda: False, SHARDING, xla.device()).job_sum(
        [5, 7]) == [5, 7]


def test_on_a_slice_a_due_checkpoint_and_a_stop_are_told_apart_one_boundary_later():
    # Its clock says a checkpoint is due at boundaries 1 and 2; SIGTERM arrives at 2.
    vote = on_a_slice([False, False, True, True], [False, True, True, False])
    Agreed = devices.Agreed
    assert [vote.decide() for _ in range(4)] == [
        Agreed(False, False), Agreed(False, False), Agreed(False, True), Agreed(True, True)]


def run_mnist(data, job, devices_used, batch_size, *extra):
    process = trainer("trainer.mnist", "--data_dir=" + str(data), "--job_dir=" + str(job),
                      "--batch_size={}".format(batch_size), "--log_steps=1", *extra,
                      environ={"CPU_NUM_DEVICES": str(devices_used)})
    return finish(process)


@pytest.mark.parametrize("first, then", [(DEVICES, 1), (1, DEVICES)])
def test_a_checkpoint_resumes_on_another_device_count_at_the_same_step(tmp_path, first, then):
    data, job = write_mnist(tmp_path / "mnist", 96, 10), tmp_path / "job"
    global_batch = 16
    code, _, err = run_mnist(data, job, first, global_batch // first, "--num_epochs=1")
    assert code == 0, err
    code, out, err = run_mnist(data, job, then, global_batch // then, "--num_epochs=2")
    assert code == 0, err
    assert "resumed from {}: epoch 2, step 6".format(job / "checkpoints" / "ckpt-000000006.pt") \
        in out
    summary = json.loads((job / "summary.json").read_text())
    assert (summary["devices"], summary["global_step"], summary["global_batch"]) == (
        then, 12, global_batch)
    steps = [json.loads(line)["step"] for line in (job / "metrics.jsonl").read_text()
             .splitlines() if '"train"' in line]
    assert steps == list(range(1, 13))
    # The same global batch, so the same rate: the resumed run's schedule is the one begun.
    state = torch.load(str(job / "checkpoints" / "ckpt-000000012.pt"), weights_only=False)
    assert state["global_batch"] == global_batch and state["step_in_epoch"] == 0


def test_many_steps_in_flight_never_deadlock_the_cpu_collectives(tmp_path):
    """Without waiting for each step (``xla.collectives_need_lockstep``), about every other
    epoch of this run aborted in XLA's CPU all-reduce ("Expected 4 threads to join the
    rendezvous"): 125 compiled steps with nothing between them that waits."""
    data = write_mnist(tmp_path / "mnist", 8000, 10)
    code, _, err = run_mnist(data, tmp_path / "job", DEVICES, 16, "--num_epochs=3",
                             "--log_steps=0")
    assert code == 0, err[-3000:]
    assert "rendezvous" not in err


def test_resuming_with_another_global_batch_is_refused_with_the_batch_that_fits(tmp_path):
    data, job = write_mnist(tmp_path / "mnist", 96, 10), tmp_path / "job"
    code, _, err = run_mnist(data, job, DEVICES, 4, "--num_epochs=1")
    assert code == 0, err
    code, _, err = run_mnist(data, job, 1, 4, "--num_epochs=2")
    assert code == EX_USAGE, err
    assert "was written with a global batch of 16; this run's is 4" in err
    assert "--batch_size=16 resumes it on 1 device" in err and "Traceback" not in err


def test_sigterm_on_four_devices_checkpoints_and_exits_143(tmp_path):
    state = sigterm_at_step_10(tmp_path, "--batch_size=8",
                               environ={"CPU_NUM_DEVICES": str(DEVICES)})
    assert state["global_batch"] == 8 * DEVICES
