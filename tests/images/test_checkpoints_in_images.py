"""Checkpoints on each image's own torch (1.11 on Python 3.7 in the xrt image, 2.9 in the pjrt
image): the file the trainer writes ends in its SHA-256 trailer and plain ``torch.load`` still
reads it; one damaged byte makes the reader refuse it and fall back to the one before."""

import pytest

from containers import run_container

ROUND_TRIP = """
import sys, torch
from trainer.checkpoints import CheckpointStore
from trainer.storage import open_dir
folder = "/tmp/checkpoints"
store = CheckpointStore(open_dir(folder), keep=3)
weights = torch.arange(4096, dtype=torch.float32)
store.save(1, {"step": 1, "w": weights})
store.save(2, {"step": 2, "w": weights * 2})
newest = folder + "/ckpt-000000002.pt"
plain = torch.load(newest)
data = bytearray(open(newest, "rb").read())
data[len(data) // 2] ^= 0xFF  # inside the tensors' bytes
open(newest, "wb").write(bytes(data))
step, state = store.load_latest()
print("%d.%d" % sys.version_info[:2], torch.__version__.split("+")[0],
      bool(plain["w"].equal(weights * 2)), step, bool(state["w"].equal(weights)))
"""


@pytest.mark.parametrize("runtime,python,torch_version", [("xrt", "3.7", "1.11.0"),
                                                           ("pjrt", "3.10", "2.9.0")])
def test_a_sealed_checkpoint_loads_plainly_and_a_damaged_one_is_refused(images, runtime,
                                                                       python, torch_version):
    result = run_container(images[runtime], "-c", ROUND_TRIP, entrypoint="python")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [python, torch_version, "True", "1", "True"]
    assert "skipping damaged checkpoint /tmp/checkpoints/ckpt-000000002.pt" in result.stderr
    assert "Traceback" not in result.stderr
