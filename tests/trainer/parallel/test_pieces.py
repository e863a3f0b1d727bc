"""trainer.parallel.pieces and the store's pieces (``CheckpointStore.save_piece``): a slice's
checkpoint as each host's own file. Put together whole, equal to the state; a step with a
host's piece missing is no checkpoint (the one before is restored), a damaged piece refuses
its step; each host rotates only its own files and never below ``keep`` complete steps,
whatever order the hosts finish in. On 4 XLA CPU devices (SPMD session): the regions each
simulated host writes from a model split by fsdp, on a 1-D and a 2-D mesh."""

import logging

import pytest
import torch

from trainer import consolidate
from trainer.checkpoints import CheckpointStore, checkpoint_name
from trainer.errors import DataError, TrainerError
from trainer.outputs import checkpoint_directory
from trainer.parallel import pieces
from trainer.parallel.pieces import PieceLayout
from trainer.storage import LocalDirectory

DEVICES = 4


def state_on_devices(step):
    """A state as the run holds it: a split weight (8 x 3: 2 rows a device), its optimizer
    moment, a whole bias and the run's position."""
    weight = torch.arange(24, dtype=torch.float32).reshape(8, 3) + step
    return {"model": {"w": weight, "b": torch.full((3,), float(step))},
            "optimizer": {"state": {0: {"exp_avg": weight * 2}}, "param_groups": [
                {"lr": 0.1, "params": [0, 1]}]}}


def quarters(tensors):
    """``xla.local_regions`` for 4 devices each holding a quarter of the rows: device d rows
    [2d, 2d + 2)."""
    found = []
    for tensor in tensors:
        rows = tensor.shape[0] // DEVICES
        found.append([(d, ((d * rows, (d + 1) * rows), (0, tensor.shape[1])),
                       tensor[d * rows:(d + 1) * rows].clone()) for d in range(DEVICES)])
    return found


def host_pieces(step, hosts=2):
    return pieces.take(state_on_devices(step), PieceLayout.simulated(hosts, DEVICES),
                       lambda tensor: tensor.dim() == 2, quarters,
                       lambda tensors: [t.clone() for t in tensors], {"step": step, "epoch": 0})


def write(store, step, hosts=2, only=None):
    store.hosts = hosts
    for host, piece in host_pieces(step, hosts).items():
        if only is None or host in only:
            store.save_piece(step, host, piece)


def assert_whole(loaded, step):
    expected = state_on_devices(step)
    assert torch.equal(loaded["model"]["w"], expected["model"]["w"])
    assert torch.equal(loaded["model"]["b"], expected["model"]["b"])
    assert torch.equal(loaded["optimizer"]["state"][0]["exp_avg"],
                       expected["optimizer"]["state"][0]["exp_avg"])
    assert loaded["optimizer"]["param_groups"] == expected["optimizer"]["param_groups"]
    assert (loaded["step"], loaded["epoch"]) == (step, 0)


def test_each_host_holds_its_own_regions_and_host_0_the_rest():
    written = host_pieces(7)
    assert sorted(written) == [0, 1]
    assert written[1].keys() == {"host", "hosts", "regions"}  # no state, no whole tensors
    for host, piece in written.items():
        bounds = [region for region, _ in piece["regions"]["model.w"]["parts"]]
        assert bounds == [((4 * host, 4 * host + 2), (0, 3)), ((4 * host + 2, 4 * host + 4),
                                                                (0, 3))]
    assert written[0]["state"]["model"]["w"] == pieces.SPLIT
    assert torch.equal(written[0]["state"]["model"]["b"], torch.full((3,), 7.0))


@pytest.mark.parametrize("hosts", [2, 4])
def test_the_pieces_of_every_host_load_as_the_whole_state(tmp_path, hosts):
    store = CheckpointStore(LocalDirectory(str(tmp_path)), keep=2)
    write(store, 5, hosts)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        pieces.piece_name(5, host, hosts) for host in range(hosts)]
    step, loaded = store.load_latest()
    assert step == 5 and store.source.endswith(pieces.pieces_pattern(5, hosts))
    assert_whole(loaded, 5)
    assert_whole(store.load(5), 5)


def test_a_step_missing_a_hosts_piece_is_no_checkpoint_and_the_one_before_is_restored(
        tmp_path, caplog):
    store = CheckpointStore(LocalDirectory(str(tmp_path)), keep=3)
    write(store, 10)
    write(store, 20, only={0})  # host 1 stopped while writing its piece
    with caplog.at_level(logging.WARNING):
        step, loaded = store.load_latest()
    assert step == 10
    assert_whole(loaded, 10)
    assert "skipping step 20" in caplog.text and "1 of 2 hosts' pieces" in caplog.text
    with pytest.raises(DataError, match="incomplete"):
        store.load(20)


def test_only_incomplete_pieces_is_a_fresh_start_not_a_damaged_job(tmp_path):
    store = CheckpointStore(LocalDirectory(str(tmp_path)), keep=3)
    write(store, 10, only={1})
    assert store.load_latest() is None


def test_a_damaged_piece_refuses_its_step_naming_the_piece(tmp_path, caplog):
    store = CheckpointStore(LocalDirectory(str(tmp_path)), keep=3)
    write(store, 10)
    write(store, 20)
    damaged = tmp_path / pieces.piece_name(20, 1, 2)
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING):
        assert store.load_latest()[0] == 10
    assert pieces.piece_name(20, 1, 2) + ": its bytes differ" in caplog.text
    (tmp_path / pieces.piece_name(10, 0, 2)).write_bytes(b"garbage")
    with pytest.raises(DataError, match="every checkpoint .* is damaged"):
        store.load_latest()


def test_pieces_that_do_not_cover_a_split_tensor_are_refused():
    assembly = pieces.Assembly()
    written = host_pieces(3)
    assert assembly.add(written[0]) is None
    state, problem = assembly.result()
    assert state is None and "do not cover 2 split tensors (e.g. model.w)" in problem
    outside = host_pieces(3)[1]
    outside["regions"]["model.w"]["parts"][0] = (((6, 10), (0, 3)), torch.zeros(4, 3))
    assert "outside its shape" in pieces.Assembly().add(outside)


TOGETHER = [(10, 0), (10, 1), (20, 0), (20, 1), (30, 0), (30, 1), (40, 0), (40, 1), (50, 0),
            (50, 1)]
# Host 1's writes a checkpoint behind host 0's (a host's next write waits for its previous
# one, and the hosts train in lockstep: no further).
LAGGING = [(10, 0), (20, 0), (10, 1), (30, 0), (20, 1), (40, 0), (30, 1), (50, 0), (40, 1),
           (50, 1)]


@pytest.mark.parametrize("events", [TOGETHER, LAGGING], ids=["together", "host 1 behind"])
def test_each_host_rotates_only_its_own_files_and_keeps_k_complete_steps(tmp_path, events):
    """keep=2: after every write the newest 2 steps both hosts finished are still whole on
    storage (a host deletes nothing on another's account). In the end 2 complete steps are
    left, and of a host that wrote before other steps were complete at most 2 pieces more
    (deleted by its next writes): keep + 2 files a host, bounded however long the run."""
    store = CheckpointStore(LocalDirectory(str(tmp_path)), keep=2)
    finished = {0: set(), 1: set()}
    for step, host in events:
        write(store, step, only={host})
        finished[host].add(step)
        both = sorted(finished[0] & finished[1])
        complete = pieces.complete_steps(p.name for p in tmp_path.iterdir())
        assert set(both[-2:]) <= set(complete), (step, host, sorted(complete))
        assert store.load_latest()[0] == both[-1] if both else store.load_latest() is None
    names = sorted(p.name for p in tmp_path.iterdir())
    assert sorted(pieces.complete_steps(names)) == [40, 50]
    for host in (0, 1):
        assert len([name for name in names if pieces.parse_piece(name)[1] == host]) <= 4


def test_pieces_rotate_away_the_whole_files_and_other_host_counts_pieces_of_earlier_runs(
        tmp_path):
    store = CheckpointStore(LocalDirectory(str(tmp_path)), keep=1)
    store.save(5, {"step": 5, "model": {"b": torch.zeros(1)}})  # a one-host run before
    write(store, 6, hosts=4)  # a four-host run
    for step in (7, 8):  # host 0 rotates, at its write after a newer step is complete
        write(store, step, hosts=2)
    assert store.steps() == [7, 8]
    assert sorted(pieces.complete_steps(p.name for p in tmp_path.iterdir())) == [8]


def test_a_whole_checkpoints_rotation_counts_only_steps_that_can_be_restored(tmp_path):
    """A host's piece left of an earlier slice run (step 150, its other host's missing) is no
    checkpoint: keep=2 keeps 100 and 200 (the leftover counted would have cost 100), and the
    leftover goes once it is older than the checkpoints kept."""
    store = CheckpointStore(LocalDirectory(str(tmp_path)), keep=2)
    store.save(100, {"step": 100, "model": {"b": torch.zeros(1)}})
    write(store, 150, only={1})
    store.hosts = 1
    store.save(200, {"step": 200, "model": {"b": torch.zeros(1)}})
    assert store.steps() == [100, 150, 200]
    assert store.load_latest()[0] == 200
    store.save(300, {"step": 300, "model": {"b": torch.zeros(1)}})
    assert sorted(p.name for p in tmp_path.iterdir()) == [checkpoint_name(200),
                                                         checkpoint_name(300)]


def test_a_host_whose_pieces_never_meet_the_others_stops_with_one_line(tmp_path):
    """A local job dir on a slice: each host's folder holds only its own pieces, so no step
    is ever complete and none could be resumed. At keep + 2 of its steps the host stops."""
    store = CheckpointStore(LocalDirectory(str(tmp_path)), keep=2)
    for step in (10, 20, 30):
        write(store, step, only={1})
    with pytest.raises(TrainerError) as raised:
        write(store, 40, only={1})
    assert raised.value.exit_code == 64
    assert raised.value.message == (
        "{}/ holds 4 checkpoint pieces of this host (process 1) and not one complete "
        "checkpoint: the other hosts' pieces do not land there".format(tmp_path))
    assert "every host sees as one folder" in raised.value.hint


def test_consolidate_writes_the_whole_model_of_pieces(tmp_path):
    directory = checkpoint_directory(consolidate.OutputPaths.resolve(str(tmp_path), {}))
    store = CheckpointStore(directory, keep=2)
    write(store, 9)
    step, where = consolidate.consolidate(str(tmp_path))
    model = torch.load(where, weights_only=True)
    assert step == 9 and torch.equal(model["w"], state_on_devices(9)["model"]["w"])


def test_pieces_in_a_gcs_job_dir_commit_rotate_and_restore(gcs, scratch, caplog):
    """As on local disk, through Cloud Storage (fake-gcs-server): each piece an object of its
    own, the newest complete step restored, the incomplete one after it skipped."""
    from trainer.storage import open_dir

    store = CheckpointStore(open_dir("gs://{}/job/checkpoints".format(gcs.name)), keep=1)
    for step in (1, 2):
        write(store, step)
    write(store, 3, only={1})
    names = [blob.name.rsplit("/", 1)[-1]
             for blob in gcs.list_blobs(prefix="job/checkpoints/")]
    assert pieces.complete_steps(names) == {2: 2}
    assert pieces.piece_name(1, 1, 2) not in names  # host 1 rotated its own away
    step, loaded = store.load_latest()
    assert step == 2 and store.source == "gs://{}/job/checkpoints/{}".format(
        gcs.name, pieces.pieces_pattern(2, 2))
    assert_whole(loaded, 2)
    assert "skipping step 3" in caplog.text


@pytest.mark.parametrize("text", ["3", "two", "0", "8"])
def test_a_simulated_host_count_that_does_not_divide_the_devices_is_one_line(text):
    with pytest.raises(TrainerError, match="TRAINER_CHECKPOINT_HOSTS=.* divides the job's 4 "
                       "devices") as raised:
        pieces.layout_for(0, 1, 4, {pieces.SIMULATED_HOSTS: text})
    assert raised.value.exit_code == 64


def test_a_slice_writes_its_own_piece_and_one_host_one_file():
    assert pieces.layout_for(3, 16, 64, {}) == PieceLayout(16, ((3, None),))
    assert pieces.layout_for(0, 1, 4, {}) is None
    assert pieces.layout_for(0, 1, 4, {pieces.SIMULATED_HOSTS: "2"}) == PieceLayout(
        2, ((0, frozenset({0, 1})), (1, frozenset({2, 3}))))


def test_whole_names_and_piece_names_do_not_meet():
    assert pieces.parse_piece(checkpoint_name(5)) is None
    assert pieces.parse_piece(pieces.piece_name(5, 2, 4)) == (5, 2, 4)
    assert pieces.parse_piece("ckpt-000000005-host-00004-of-00004.pt") is None


@pytest.mark.spmd
@pytest.mark.parametrize("fsdp", [4, 2], ids=["fsdp 4", "data 2 x fsdp 2"])
def test_the_regions_of_a_model_split_by_fsdp_make_its_whole_state(tmp_path, fsdp):
    """Two layers split over the devices (rows over ``fsdp``, whole over ``data``; 10 rows
    over 4 devices leave the last shard padded) and AdamW's moments split as they are,
    written as 2 simulated hosts' pieces: each host writes only the regions of its own
    devices, each region once (on the 2-D mesh host 1's devices hold the second replica: it
    writes none), and the pieces load as the state fetched whole."""
    from trainer import devices, xla
    from trainer.checkpoints import named_tensors, to_cpu

    topology = devices.detect("auto")
    assert topology.devices == DEVICES
    dev = xla.device()
    torch.manual_seed(0)
    layer = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.Linear(16, 10)).to(dev)
    mesh = xla.BatchSharding(DEVICES, host_part=False, fsdp=fsdp)
    mesh.shard(layer[0].weight, 0)
    mesh.shard(layer[1].weight, 0)  # 10 rows over 4: the last shard padded
    optimizer = torch.optim.AdamW(layer.parameters(), lr=0.1)
    layer(torch.ones(2, 12, device=dev)).sum().backward()
    optimizer.step()
    xla.sync()
    tensors = {"model": layer.state_dict(), "optimizer": optimizer.state_dict()}
    written = pieces.take(tensors, PieceLayout.simulated(2, DEVICES), xla.sharded,
                          xla.local_regions, xla.to_host, {"step": 1})
    # (XLA may split the bias's moments too, by propagation.)
    split = set(written[0]["regions"])
    assert {"model.0.weight", "model.1.weight", "optimizer.state.0.exp_avg",
            "optimizer.state.0.exp_avg_sq"} <= split
    assert set(written[1]["regions"]) == (split if fsdp == 4 else set())
    rows = [bounds[0] for bounds, _ in written[0]["regions"]["model.0.weight"]["parts"]]
    assert rows == ([(0, 4), (4, 8)] if fsdp == 4 else [(0, 8), (8, 16)])
    last = [bounds[0] for host in written.values()
            for bounds, _ in host["regions"].get("model.1.weight", {}).get("parts", [])]
    assert last == ([(0, 3), (3, 6), (6, 9), (9, 10)] if fsdp == 4 else [(0, 5), (5, 10)])
    store = CheckpointStore(LocalDirectory(str(tmp_path)), keep=1)
    store.hosts = 2
    for host, piece in written.items():
        store.save_piece(1, host, piece)
    loaded = dict(named_tensors(store.load_latest()[1]))
    whole = dict(named_tensors(to_cpu(tensors)))
    assert loaded.keys() == whole.keys()
    assert all(torch.equal(loaded[name], whole[name]) for name in whole)


def test_64_hosts_of_4_chips_write_a_64th_each_and_commit_only_when_the_last_lands(tmp_path):
    """The size users rent: 64 hosts of 4 chips, a weight split over all 256 devices (rows
    over the devices, as ``xla.local_regions`` gives them). Each host's piece holds its 4
    devices' rows, a 64th of the weight; the hosts write in a shuffled order, and the step is a
    checkpoint only when the 64th lands; put together, it is the weight."""
    import random

    hosts, chips = 64, 4
    weight = torch.arange(1024 * 3, dtype=torch.float32).reshape(1024, 3)

    def rows_over_devices(tensors):
        rows = tensors[0].shape[0] // (hosts * chips)
        return [[(device, ((device * rows, (device + 1) * rows), (0, 3)),
                  tensor[device * rows:(device + 1) * rows].clone())
                 for device in range(hosts * chips)] for tensor in tensors]

    written = pieces.take({"model": {"w": weight}}, PieceLayout.simulated(hosts, hosts * chips),
                          lambda tensor: True, rows_over_devices, lambda tensors: [],
                          {"step": 5})
    assert all(sum(part.numel() for _, part in piece["regions"]["model.w"]["parts"])
               == weight.numel() // hosts for piece in written.values())
    store = CheckpointStore(LocalDirectory(str(tmp_path)), keep=1)
    store.hosts = hosts
    order = list(range(hosts))
    random.Random(0).shuffle(order)
    for count, host in enumerate(order, 1):
        store.save_piece(5, host, written[host])
        assert (store.load_latest() is None) == (count < hosts)
    assert torch.equal(store.load_latest()[1]["model"]["w"], weight)
