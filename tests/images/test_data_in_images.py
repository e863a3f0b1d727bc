"""The ImageNet data package inside the xrt image, whose Python is 3.7 with torch 1.11 and
google-cloud-storage 2.10: real photographs made into shards on fake-gcs-server by the shard
command, then read back by the trainer's reader with two worker processes."""

from containers import run_container

READ_BACK = """
import sys
from trainer.data.shard_source import ShardSource
source = ShardSource(sys.argv[1], 64, 8, 2, 1)
x, y = next(source.train_batches(0, 3))
labels = [int(label) for _, batch in source.eval_batches() for label in batch if label >= 0]
print("%d.%d" % sys.version_info[:2], tuple(x.shape), x.dtype, len(labels), len(set(labels)))
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
    assert read.stdout.split() == ["3.7", "(8,", "3,", "64,", "64)", "torch.uint8", "64", "8"]
