"""trainer.parallel.mesh: --sharding and --mesh as the devices' mesh, the usage errors of each,
and --sharding=auto's choice from the model state's bytes and the chip's memory."""

import pytest

from trainer.chips import GIB
from trainer.config import TrainConfig
from trainer.errors import TrainerError
from trainer.parallel.mesh import (
    AUTO_STATE_SHARE,
    MeshShape,
    device_memory,
    mesh_shape,
    resolve,
)


@pytest.mark.parametrize("sharding, mesh, devices, shape", [
    ("dp", "", 8, MeshShape(8, 1)),
    ("fsdp", "", 8, MeshShape(1, 8)),
    ("fsdp", "data:2,fsdp:4", 8, MeshShape(2, 4)),
    ("fsdp", "fsdp:4,data:2", 8, MeshShape(2, 4)),
    ("fsdp", "data:2", 8, MeshShape(2, 4)),
    ("fsdp", "fsdp:2", 8, MeshShape(4, 2)),
    ("fsdp", "", 1, MeshShape(1, 1)),
])
def test_the_mesh_is_every_device_as_data_times_fsdp(sharding, mesh, devices, shape):
    assert mesh_shape(sharding, mesh, devices) == shape


@pytest.mark.parametrize("mesh, devices, text", [
    ("data:2,fsdp:4", 4, "--mesh=data:2,fsdp:4 is 8 devices; the job has 4"),
    ("fsdp:16", 8, "--mesh=fsdp:16 is 16 devices; the job has 8"),
    ("fsdp:3", 8, "--mesh=fsdp:3 is 6 devices; the job has 8"),
])
def test_a_mesh_of_another_device_count_is_a_usage_error(mesh, devices, text):
    with pytest.raises(TrainerError) as raised:
        mesh_shape("fsdp", mesh, devices)
    assert raised.value.message == text and raised.value.exit_code == 64


@pytest.mark.parametrize("flags, text", [
    (dict(sharding="zero3"), "--sharding='zero3' is not one of dp, fsdp, auto"),
    (dict(sharding="fsdp", mesh="data=2"), "--mesh='data=2' is not data:D,fsdp:F"),
    (dict(sharding="fsdp", mesh="model:2"), "--mesh='model:2' is not data:D,fsdp:F"),
    (dict(sharding="fsdp", mesh="fsdp:0"), "--mesh='fsdp:0' is not data:D,fsdp:F"),
    (dict(sharding="fsdp", mesh="fsdp:2,fsdp:2"), "--mesh='fsdp:2,fsdp:2' is not data:D,"),
    (dict(mesh="fsdp:4"), "--mesh=fsdp:4 is for --sharding=fsdp, not --sharding=dp"),
])
def test_bad_flags_are_one_line_before_anything_starts(flags, text):
    with pytest.raises(TrainerError) as raised:
        TrainConfig(fake_data=True, **flags)
    assert raised.value.message.startswith(text) and raised.value.exit_code == 64


@pytest.mark.parametrize("kind, memory", [
    ("TPU v5 lite", 16 * GIB), ("TPU v6 lite", 32 * GIB), ("TPU v5", 95 * GIB),
    ("TPU v5p", 95 * GIB), ("TPU v4", 32 * GIB), ("TPU7x", 192 * GIB), ("CPU", None),
    ("TPU v9", None)])
def test_each_chips_memory_comes_from_its_kind(kind, memory):
    assert device_memory(kind) == memory


def test_auto_shards_what_would_take_over_half_a_chip_and_nothing_where_memory_is_unknown():
    v5e = 16 * GIB
    assert resolve("auto", int(AUTO_STATE_SHARE * v5e), v5e)[0] == "dp"
    choice, why = resolve("auto", int(AUTO_STATE_SHARE * v5e) + 1, v5e)
    assert choice == "fsdp" and "more than 50% of a device's 17 GB" in why
    assert resolve("auto", 10 ** 12, None) == ("dp", "--sharding=auto: dp, the device's memory "
                                                     "is unknown")
    assert resolve("fsdp", 1, v5e)[0] == "fsdp" and resolve("dp", 10 ** 12, v5e)[0] == "dp"
