"""A GKE slice rehearsed in the pjrt image (issues 33, 41): a pod of host 2 of a 4-host v5e
slice gets every variable GKE injects (tests/gke_pods.py: ``TPU_SKIP_MDS_QUERY``, the
accelerator type, the host and chip bounds, ``TPU_WORKER_ID``, ``TPU_WORKER_HOSTNAMES``, ...)
and the template's ``LAUNCHER_TRAINER``; no TPU chip is here. The launcher's dry run checks
that the variables agree, says which host it is, how many hosts the slice has and what it
would export; the ImageNet trainer's data plan for that host (the place the dry
run reported, as torch_xla would report it on the slice) is what ``python -m
trainer.data.plan --hosts=4`` prints. torch_xla's reading of the variables is checked outside
the image (tests/launcher/test_gke_pod.py); forming the slice needs a real one."""

import re

import numpy as np
from gke_pods import V5E_16_HOST_2
from shard_sets import split_shards

from containers import run_container
from trainer.data.shard_index import INDEX_NAME, ShardIndex

GKE_POD = dict(V5E_16_HOST_2, LAUNCHER_TRAINER="python -m trainer.imagenet")
# The slice of config/gke-jobset-v5e-16.yaml, with small batches and two data workers, so
# that the plan's /dev/shm fits a container's default 64 MB.
TRAINER_ARGS = ["--data_dir=/data", "--job-dir=gs://bucket/jobs/imagenet-v5e-16",
                "--batch_size=1", "--num_workers=2"]
# The trainer's plan for a host, from trainer.imagenet.build_data (what it logs at start).
TRAINER_PLAN = """
import sys
from trainer.config import TrainConfig
from trainer.devices import Topology
from trainer.imagenet import build_data
index, hosts, chips = (int(arg) for arg in sys.argv[1:])
topology = Topology(devices=hosts * chips, found=hosts * chips, local_devices=chips,
                    process_index=index, process_count=hosts)
source = build_data(TrainConfig(data_dir="/data", batch_size=1, num_workers=2), topology)
print("\\n".join(source.plan_lines()))
"""


def shard_index(folder):
    rng = np.random.default_rng(0)
    index = ShardIndex(["a", "b"], {"train": split_shards("train", 4096, 1024, rng, 1e5),
                                    "val": split_shards("val", 512, 512, rng, 1e5)})
    (folder / INDEX_NAME).write_bytes(index.to_json())
    return {str(folder): "/data:ro"}


def test_host_2_of_4_says_where_it_is_and_plans_like_the_plan_command(images, tmp_path):
    dry = run_container(images["pjrt"], "--dry-run", *TRAINER_ARGS, env=GKE_POD,
                        network="none")
    assert dry.returncode == 0, dry.stderr
    assert "launcher: platform: TPU VM (dry run: no TPU chip is visible here)" in dry.stderr
    place = re.search(r"launcher: slice: host (\d+) of (\d+) \(TPU_WORKER_ID=2; "
                      r"TPU_WORKER_HOSTNAMES: imagenet-v5e-16-slice-0-0", dry.stderr)
    assert place and place.groups() == ("3", "4"), dry.stderr
    assert "launcher: GKE slice: TPU_ACCELERATOR_TYPE=v5litepod-16, 4 hosts" in dry.stderr
    assert dry.stdout.splitlines()[0] == "export PJRT_DEVICE=TPU"
    assert re.search(r"# trainer: \S*python\S* -m trainer.imagenet --data_dir=/data", dry.stdout)
    host, hosts = int(place.group(1)) - 1, int(place.group(2))

    data = shard_index(tmp_path)
    trainer = run_container(images["pjrt"], "-c", TRAINER_PLAN, str(host), str(hosts), "4",
                            entrypoint="python", volumes=data, network="none")
    assert trainer.returncode == 0, trainer.stderr
    command = run_container(images["pjrt"], "-m", "trainer.data.plan", "--data_dir=/data",
                            "--hosts=4", "--devices_per_host=4", "--batch_size=1",
                            "--num_workers=2", entrypoint="python", volumes=data,
                            network="none")
    assert command.returncode == 0, command.stderr
    assert trainer.stdout.splitlines() == command.stdout.splitlines()
    assert command.stdout.startswith("slice: 4 hosts x 4 devices, global batch 16")
