"""The ImageNet data path in both images, on real photographs (``tests/photos.py``): in the
xrt image (Python 3.7, torch 1.11, google-cloud-storage 2.10) the shard command writes shards
to fake-gcs-server and the trainer's reader streams them back with two worker processes
(into the step ring, the same batches as without workers); in
the pjrt image ImageNet trains from those shards on two CPU devices in bf16 through the
launcher; Docker's default /dev/shm stops ImageNet at start with one line naming
--shm-size."""

import json
import re

from conftest import upload_folder
from containers import docker, run_container, stop_when_logged

READ_BACK = """
import sys
from trainer.data.resample import torch_resamples_uint8
from trainer.data.shard_source import ShardSource
source = ShardSource(sys.argv[1], 64, 8, 2, 1)
x, y = next(source.train_batches(0, 3))
labels = [int(label) for _, batch in source.eval_batches() for label in batch if label >= 0]
# The workers decoded into the step ring (torch 1.11's shared storage): the same batch as
# decoded in this process, and no group had to be copied.
alone = ShardSource(sys.argv[1], 64, 8, 0, 1)
x0, y0 = next(alone.train_batches(0, 3))
print("%d.%d" % sys.version_info[:2], tuple(x.shape), x.dtype, len(labels), len(set(labels)),
      torch_resamples_uint8(), bool(x.equal(x0) and y.equal(y0)), source.stream.copied)
"""
FAST_PATHS = """
import io, random
import numpy, torch
from PIL import Image
from trainer.data import jpeg_decode, resample
print(resample.torch_resamples_uint8(), jpeg_decode.available())
print(jpeg_decode.described())
# The module this image's build stage compiled gives a full decode's pixels, box by box.
noise = numpy.random.RandomState(0).randint(0, 256, (203, 301, 3), dtype=numpy.uint8)
buffer = io.BytesIO()
Image.fromarray(noise).save(buffer, "JPEG", quality=85)
data, rng, exact = buffer.getvalue(), random.Random(0), 0
full = jpeg_decode.scaled(data, 301, 203, 1).permute(1, 2, 0)
for _ in range(200):
    left, top = rng.randrange(301), rng.randrange(203)
    box = (left, top, rng.randint(left + 1, 301), rng.randint(top + 1, 203))
    block = jpeg_decode.region(data, 301, 203, 1, box, False)
    exact += torch.equal(block, full[box[1]:box[3], box[0]:box[2]])
print(exact, "of 200 boxes exact")
"""


def test_shards_are_written_and_streamed_on_python_37(images, photos, gcs, gcs_server):
    shards = "gs://{}/shards".format(gcs.name)
    env = {"STORAGE_EMULATOR_HOST": gcs_server.url}
    made = run_container(images["xrt"], "-m", "trainer.data.make_shards", "--source=/photos",
                         "--dest=" + shards, "--shard_size=40", entrypoint="python", env=env,
                         volumes={str(photos): "/photos:ro"})
    assert made.returncode == 0, made.stderr
    assert "192 train and 64 val examples in 7 shards; 0 files skipped" in made.stdout
    read = run_container(images["xrt"], "-c", READ_BACK, shards, entrypoint="python", env=env)
    assert read.returncode == 0, read.stderr
    # torch 1.11 has no uint8 antialiased resize: Pillow's path decoded and resized them.
    assert read.stdout.split() == ["3.7", "(8,", "3,", "64,", "64)", "torch.uint8", "64", "8",
                                   "False", "True", "0"]


def test_the_pjrt_image_decodes_and_resizes_on_the_fast_paths(images):
    # torch 2.9's uint8 resize and torchvision's JPEG decoder both work in the image, so
    # plain JPEGs never take the slower Pillow path there; the region decoder built by the
    # Dockerfile's stage loads with the libjpeg-turbo copied next to it (no Debian package in
    # the final stage) and decodes the crops.
    result = run_container(images["pjrt"], "-c", FAST_PATHS, entrypoint="python",
                           network="none")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "True True" and lines[2] == "200 of 200 boxes exact"
    assert re.fullmatch(r"JPEGs decoded by libjpeg-turbo 2\.\d+\.\d+, the crop's region only "
                        r"\(fast IDCT\)", lines[1]), lines[1]


def test_imagenet_trains_from_shards_on_two_devices_in_bf16_in_the_pjrt_image(
        images, photo_shards, gcs, gcs_server, tmp_path):
    shards = upload_folder(photo_shards, gcs, "shards")
    result = run_container(
        images["pjrt"], "--data_dir=" + shards, "--model=resnet18", "--image_size=64",
        "--batch_size=8", "--num_epochs=1", "--num_steps=3", "--warmup_epochs=0",
        "--precision=bf16", "--log_steps=1", "--job-dir=/out",
        env={"LAUNCHER_TRAINER": "python -m trainer.imagenet", "CPU_NUM_DEVICES": "2",
             "STORAGE_EMULATOR_HOST": gcs_server.url},
        volumes={str(tmp_path): "/out"})
    assert result.returncode == 0, result.stderr
    # Pillow and torchvision come with the base image (the stand-in installs them as the
    # release image does); the shards stream from gs:// through the image's storage client.
    assert "data: {} shards (192 train, 64 val examples)".format(shards) in result.stdout
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (summary["devices"], summary["global_batch"], summary["global_step"],
            summary["precision"], summary["step_path"]) == (2, 16, 3, "bf16", "compiled")
    # One execution on both devices per step: 3 training and 3 evaluation (--num_steps).
    assert summary["executions_per_epoch"] == [3 + 3]
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["ckpt-000000003.pt"]


def test_docker_default_shared_memory_stops_imagenet_at_start_with_one_line(
        images, photo_shards, tmp_path):
    """Docker's 64 MB /dev/shm cannot hold what 224 px batches of 128 in flight need: the
    trainer stops before its first data worker starts, naming --shm-size, instead of a worker
    dying of a bus error minutes later; with the size it names, the same run gets past the
    check and trains (stopped here by docker stop)."""
    args = ["--data_dir=/shards", "--model=resnet18", "--image_size=224", "--batch_size=128",
            "--num_epochs=1", "--warmup_epochs=0", "--job-dir=/out"]
    mounts = ["-v", "{}:/shards:ro".format(photo_shards), "-v", "{}:/out".format(tmp_path)]
    env = ["-e", "LAUNCHER_TRAINER=python -m trainer.imagenet"]
    small = docker("run", "--rm", "--network", "none", *(mounts + env), images["pjrt"], *args,
                   check=False)
    lines = [line for line in small.stderr.splitlines() if line.strip()]
    assert small.returncode == 78, small.stderr
    # The default workers follow the host's cores (one less): any count, the same line.
    assert re.fullmatch(r"/dev/shm has 6\d MB free; \d+ data workers? needs? [\d,]+ MB of "
                        r"shared memory for the batches in flight", lines[-2].split(": ", 1)[1])
    assert "--shm-size=" in lines[-1] and lines[-1].startswith("HINT: ")
    assert "Traceback" not in small.stderr and "Bus error" not in small.stderr
    size = re.search(r"--shm-size=(\d+g)", lines[-1]).group(1)

    # "data plan:" is logged once the reader and its check are done.
    logs = stop_when_logged(["--network", "none", "--shm-size", size] + mounts + env
                            + [images["pjrt"]] + args, "data plan: ")
    assert logs.code == 143, logs.stderr
    assert "shared memory" not in logs.stderr
