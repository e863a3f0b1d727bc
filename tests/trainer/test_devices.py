"""trainer.devices' decisions, each with injected runtime facts (device counts, this
process's place on a slice of hosts): what --devices means, who writes outputs, and how each
host's part of a global batch is cut. The SPMD runs themselves are in test_spmd.py."""

import os

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

os.environ.setdefault("PJRT_DEVICE", "CPU")

from conftest import examples  # noqa: E402
from trainer import devices  # noqa: E402
from trainer.batches import FakeSource, HostPart, TensorSource  # noqa: E402
from trainer.config import TrainConfig  # noqa: E402
from trainer.errors import EX_USAGE, TrainerError  # noqa: E402


@pytest.mark.parametrize("text", ["0", "-1", "two", "", "1.5", "auto4", "\u0663"])
def test_a_devices_value_that_is_not_auto_or_a_count_is_a_usage_error(text):
    with pytest.raises(TrainerError) as raised:
        TrainConfig(fake_data=True, devices=text)
    assert raised.value.exit_code == EX_USAGE
    assert raised.value.message.startswith("--devices must be auto or a positive number")


def test_auto_takes_every_device_the_runtime_sees():
    assert devices.choose(None, 8, 8, (0, 1), True) == devices.Topology(8, 8, 8, 0, 1)
    assert devices.choose(None, 1, 1, (0, 1), True) == devices.Topology(1, 1, 1, 0, 1)
    assert devices.choose(4, 4, 4, (0, 1), True).devices == 4


def test_one_device_is_the_single_device_mode():
    topology = devices.choose(1, 8, 8, (0, 1), True)
    assert (topology.devices, topology.local_devices, topology.spmd) == (1, 1, False)
    assert topology.describe() == "1 of 8 devices"


def test_without_spmd_auto_uses_one_device_and_says_how_many_stay_idle(caplog):
    # torch_xla 1.x (the XRT image) on a TPU node's 8 cores.
    assert devices.choose(None, 8, 8, (0, 1), False).devices == 1
    assert "training on 1 of 8 devices, 7 idle" in caplog.text


@pytest.mark.parametrize("requested, found, place, spmd, words", [
    (8, 4, (0, 1), True, "--devices=8 but the runtime sees 4 devices"),
    (2, 4, (0, 1), True, "--devices=2: a torch_xla mesh spans all 4 devices"),
    (4, 8, (0, 1), False, "--devices=4 needs SPMD"),
    (1, 16, (1, 4), True, "--devices=1 on a slice of 4 hosts"),
])
def test_a_count_the_runtime_cannot_give_is_a_usage_error_naming_the_flag(
        requested, found, place, spmd, words):
    with pytest.raises(TrainerError) as raised:
        devices.choose(requested, found, found // place[1], place, spmd)
    assert raised.value.exit_code == EX_USAGE and raised.value.message.startswith(words)
    assert "--devices" in raised.value.hint or "image" in raised.value.hint


def test_on_a_slice_every_host_trains_on_all_devices_and_only_the_first_writes():
    hosts = [devices.choose(None, 16, 4, (index, 4), True) for index in range(4)]
    assert {(host.devices, host.local_devices, host.process_count) for host in hosts} == {
        (16, 4, 4)}
    assert [host.writes_outputs for host in hosts] == [True, False, False, False]
    assert hosts[2].describe() == "16 of 16 devices (SPMD, a 16-device data mesh), host 3 of 4"
    assert hosts[0].global_batch(32) == 512


@given(per_device=st.integers(1, 64), local=st.integers(1, 8), hosts=st.integers(1, 8))
@example(per_device=1, local=1, hosts=8)
@settings(max_examples=examples(50))
def test_host_parts_cut_each_global_batch_into_disjoint_pieces_that_cover_it(
        per_device, local, hosts):
    topology = [devices.Topology(local * hosts, local * hosts, local, index, hosts)
                for index in range(hosts)]
    batch = topology[0].global_batch(per_device)
    covered = []
    for host in topology:
        piece = HostPart(*host.host_part()).of(batch)
        assert piece.stop - piece.start == per_device * local  # this host's devices' share
        covered.extend(range(batch)[piece])
    assert covered == list(range(batch))


def digits(count, seed):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(count, 1, 4, 4, generator=generator), torch.arange(count) % 10


@pytest.mark.parametrize("hosts", [2, 3])
def test_hosts_load_their_parts_of_the_same_training_and_evaluation_batches(hosts):
    (train_x, train_y), (eval_x, eval_y) = digits(60, 1), digits(23, 2)

    def source(part):
        return TensorSource(train_x, train_y, eval_x, eval_y, batch_size=12, seed=5,
                            eval_batch_size=6, host=part)

    whole = source(HostPart())
    parts = [source(HostPart(index, hosts)) for index in range(hosts)]
    for epoch, start in ((0, 0), (1, 2)):  # a later epoch, resumed part-way
        joined = zip(*(part.train_batches(epoch, start) for part in parts))
        for (x, y), pieces in zip(whole.train_batches(epoch, start), joined):
            assert torch.equal(torch.cat([piece[0] for piece in pieces]), x)
            assert torch.equal(torch.cat([piece[1] for piece in pieces]), y)
    eval_labels = [torch.cat([piece[1] for piece in pieces])
                   for pieces in zip(*(part.eval_batches() for part in parts))]
    assert [len(labels) for labels in eval_labels] == [6] * 4
    # Every evaluation example exactly once over the hosts; the padding is never counted.
    counted = torch.cat(eval_labels)
    assert torch.equal(counted[counted >= 0], eval_y)


def test_fake_data_hosts_hold_their_parts_of_one_batch():
    whole = FakeSource((1, 4, 4), 10, 8, steps_per_epoch=2, eval_steps=1)
    parts = [FakeSource((1, 4, 4), 10, 8, 2, 1, host=HostPart(index, 2)) for index in (0, 1)]
    x, _ = next(whole.train_batches(0))
    assert torch.equal(torch.cat([next(part.train_batches(0))[0] for part in parts]), x)


@settings(max_examples=examples(60), deadline=None)
@given(st.sampled_from([(hosts, chips) for hosts in (1, 2, 4, 16, 64) for chips in (4, 8)]),
       st.data())
@example((64, 8), None)
def test_the_vote_tells_stops_and_due_checkpoints_apart_on_every_slice_size(size, data):
    """Every host sums ``stop + (devices + 1) * due`` per device in float32: the counts come
    back exactly up to the largest slice (64 hosts of 8 chips: 512 devices)."""
    hosts, chips = size
    total = hosts * chips
    stops, dues = ((total, total) if data is None else
                   (data.draw(st.integers(0, total)), data.draw(st.integers(0, total))))
    vote = devices.BoundaryVote(devices.Topology(total, total, chips, 0, hosts),
                                lambda: False, None, torch.device("cpu"))
    summed = torch.tensor(float(stops + (total + 1) * dues), dtype=torch.float32)
    assert vote._read(summed) == devices.Agreed(stops > 0, dues > 0)


def test_a_stop_during_an_input_wait_ends_it_at_once_alone_and_after_the_grace_on_a_slice(
        monkeypatch):
    # One process stops at the step reached (the loop checkpoints it); a slice's host waits
    # SLICE_INPUT_GRACE_S for the step its hosts could agree on, then stops without one.
    import os
    import signal
    import time

    from trainer import stop_signal
    from trainer.errors import Preempted

    monkeypatch.setattr(stop_signal, "_received", None)
    monkeypatch.setattr(devices, "SLICE_INPUT_GRACE_S", 0.5)

    def vote(processes):
        topology = devices.Topology(4 * processes, 4 * processes, 4, 0, processes)
        return devices.BoundaryVote(topology, stop_signal.received, None, None)

    with stop_signal.caught():
        with pytest.raises(stop_signal.Stopped):
            with vote(1).input_wait():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
        started = time.monotonic()
        with pytest.raises(Preempted) as raised:
            with vote(2).input_wait():
                time.sleep(5)  # a read that stalls past the grace
        assert time.monotonic() - started < 4
    assert raised.value.exit_code == 143
    assert raised.value.message.startswith("stopped by SIGTERM after waiting 0.5 s more for "
                                           "the next batch: no checkpoint at this step")
    assert "the platform restarts the job" in raised.value.hint  # resume None: on a platform


def test_a_local_slice_given_up_on_a_stalled_read_says_what_resumes_it(monkeypatch):
    # Run outside a platform (e.g. a multi-process run on one machine): nothing restarts it,
    # so the hint is the command that resumes it, never "the platform restarts".
    import signal
    import time

    from trainer import stop_signal
    from trainer.errors import Preempted

    monkeypatch.setattr(stop_signal, "_received", None)
    monkeypatch.setattr(devices, "SLICE_INPUT_GRACE_S", 0.2)
    resume = "make run RUN_ARGS='--job-dir=/tmp/run'"
    vote = devices.BoundaryVote(devices.Topology(8, 8, 4, 0, 2), stop_signal.received, None,
                                None, resume=resume)
    with stop_signal.caught():
        with pytest.raises(Preempted) as raised:
            with vote.input_wait():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)  # a read that stalls past the grace
    assert raised.value.hint == ("the data reads stalled (see the input lines above); "
                                 "nothing restarts a local run: " + resume +
                                 " resumes it from the checkpoint")
