"""trainer.data.shared_memory: too little room in /dev/shm for the data workers' batches stops
the run at start with exit 78, one line and a hint naming ``docker run --shm-size``; checked on
real filesystems (a 1 MB tmpfs mounted in a user and mount namespace stands in for a small
container's /dev/shm)."""

import shutil
import subprocess
import sys

import pytest

from conftest import REPO, clean_environ
from trainer.data import shared_memory
from trainer.errors import EX_CONFIG, TrainerError


def test_too_little_room_names_the_size_and_the_workers_that_fit(tmp_path):
    free = shared_memory.free_bytes(str(tmp_path))
    assert free > 0
    per_worker = free // 8
    needed = 10 * per_worker + per_worker // 2  # 10 workers and the trainer's share
    with pytest.raises(TrainerError) as raised:
        shared_memory.check(needed, 10, per_worker, str(tmp_path))
    error = raised.value
    assert error.exit_code == EX_CONFIG == 78
    assert error.message.startswith("{} has ".format(tmp_path))
    assert "10 data workers need" in error.message
    assert "docker run --shm-size={}g".format(-(-needed * 11 // 10 // 2 ** 30)) in error.hint
    assert "(up to 7 fit)" in error.hint
    shared_memory.check(free // 2, 10, per_worker, str(tmp_path))  # room enough
    shared_memory.check(needed, 0, per_worker, str(tmp_path))  # no workers, no shared memory
    shared_memory.check(needed, 10, per_worker, str(tmp_path / "absent"))  # nothing to check


def test_when_the_workers_share_one_ring_the_hint_is_a_smaller_batch_or_no_workers(tmp_path):
    free = shared_memory.free_bytes(str(tmp_path))
    with pytest.raises(TrainerError) as raised:
        shared_memory.check(free + 1, 10, 0, str(tmp_path))  # none of it is a worker's own
    assert "or lower --batch_size" in raised.value.hint
    assert "or --num_workers=0, which decodes in the training process" in raised.value.hint
    assert "lower --num_workers" not in raised.value.hint


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux's unshare")
def test_the_trainer_stops_at_start_in_a_container_with_too_little_shared_memory(
        photo_shards, tmp_path):
    small = tmp_path / "shm"
    small.mkdir()
    command = ("mount -t tmpfs -o size=1m tmpfs {} && exec {} -m trainer.imagenet "
               "--data_dir={} --model=resnet18 --image_size=64 --batch_size=16 "
               "--num_workers=2 --job_dir={}".format(small, sys.executable, photo_shards,
                                                      tmp_path / "job"))
    result = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
                             command], cwd=str(REPO), capture_output=True, text=True,
                            timeout=300, env=clean_environ(PJRT_DEVICE="CPU",
                                                           TRAINER_SHM_DIR=str(small)))
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 78, result.stderr
    assert lines[-2].startswith("TrainerError: {} has 1 MB free; 2 data workers need ".format(
        small)), lines
    assert lines[-1].startswith("HINT: give the container more: docker run --shm-size=1g")
    assert "Traceback" not in result.stderr
