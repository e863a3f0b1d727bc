"""trainer.imagenet on the real XLA CPU device: ResNet-18 at a small image size, with fake
data, a real class-folder tree, and real photographs in shards on fake-gcs-server."""

import importlib.util
import json
import math
import os
import subprocess
import sys

import pytest
import torch

os.environ.setdefault("PJRT_DEVICE", "CPU")

from conftest import REPO, clean_environ, make_image_folder, quick_compile, upload_folder  # noqa: E402
from trainer import imagenet  # noqa: E402
from trainer.config import TrainConfig  # noqa: E402
from trainer.data.images import normalize  # noqa: E402
from trainer.errors import DataError, TrainerError  # noqa: E402
from trainer.outputs import OutputPaths  # noqa: E402

SMALL = dict(model="resnet18", image_size=32, batch_size=4, num_epochs=1, num_steps=2,
             log_steps=1, num_workers=0)

# How far the device's float32 logits can be from a float64 computation with the same weights,
# as a fraction of the largest logit: rounding errors of a sum of n terms grow like sqrt(n)*u
# (u = 2^-24; probabilistic analysis, Higham & Mary 2019), n <= 4,608 in ResNet-18 (3x3x512),
# over about 20 layers: 20 * sqrt(4608) * 6e-8 = 8e-5. Ten times that, on any x86 CPU.
AMBIGUOUS = 1e-3


def assert_device_counts(summary, config, job, examples, num_classes):
    """The run's top-1/top-5 (``summary``) are hit counts over exactly ``len(examples)``
    examples (no padding counted), equal to a float64 host recomputation with the saved model
    (``job/model.pt``) except where an example's deciding logits are closer than
    ``AMBIGUOUS``: there the device's rounding may decide either way."""
    model = imagenet.build_model(config, num_classes).double().eval()
    model.load_state_dict(torch.load(str(job / "model.pt"), map_location="cpu"))
    images = normalize(torch.stack([image for image, _ in examples])).double()
    labels = torch.tensor([label for _, label in examples])
    with torch.no_grad():
        logits = model(images)
    ranked = logits.sort(dim=1, descending=True).values
    close = (ranked[:, :-1] - ranked[:, 1:]) <= AMBIGUOUS * ranked.abs().max()
    top = logits.topk(5, dim=1).indices
    for key, k in (("final_accuracy", 1), ("final_top5", 5)):
        device_hits = summary[key] * len(examples)
        assert abs(device_hits - round(device_hits)) < 1e-6, (key, summary[key])
        host_hits = int((top[:, :k] == labels[:, None]).any(dim=1).sum())
        # An example can change sides only if its k-th and (k+1)-th logits are that close.
        ambiguous = int(close[:, k - 1].sum())
        assert abs(round(device_hits) - host_hits) <= ambiguous, (key, host_hits, ambiguous)


def test_fake_data_reports_top1_and_top5(tmp_path):
    # The counts over fake data's 1000 classes are the claim, not the network:
    # tests/tiny_model.py compiles in a second, where ResNet-18 took 41 CPU seconds (the class
    # folders below still count ResNet-18's).
    config = TrainConfig(fake_data=True, **dict(SMALL, model="tiny_model:build"))
    summary = imagenet.run(config, paths=OutputPaths.resolve(str(tmp_path), {}))
    assert summary["global_step"] == 2 and summary["trainer"] == "imagenet-tiny_model:build"
    x, y = imagenet.build_data(config)._batch  # fake data evaluates its one batch
    assert_device_counts(summary, config, tmp_path, list(zip(x, y.tolist())),
                         imagenet.NUM_CLASSES)


def test_real_class_folders(tmp_path):
    # 7 classes, so that the top 5 is not every class; 3 images each, so that the last
    # evaluation batch of 4 is padded: its padding must not count.
    # Whole epochs (no --num_steps, which also shortens evaluation): 5 steps of 4 of the 21.
    data = make_image_folder(tmp_path / "data", classes=7, per_class=3)
    config = TrainConfig(data_dir=str(data), **dict(SMALL, num_steps=0))
    summary = imagenet.run(config, paths=OutputPaths.resolve(str(tmp_path / "job"), {}))
    assert summary["global_step"] == 5
    data = imagenet.build_data(config)
    try:  # every evaluation example once, without the padding
        examples = [(x[row], y[row].item()) for x, y in data.eval_batches()
                    for row in range(len(y)) if y[row] >= 0]
    finally:
        data.close()
    assert len(examples) == 21
    assert_device_counts(summary, config, tmp_path / "job", examples, 7)


def test_train_and_val_with_different_class_folders_are_a_data_error(tmp_path):
    # One missing folder in val/ used to shift every label after it, silently.
    data = make_image_folder(tmp_path / "data")
    (data / "val" / "class1").rename(data / "val" / "class9")
    with pytest.raises(DataError) as raised:
        imagenet.run(TrainConfig(data_dir=str(data), **SMALL), paths=OutputPaths())
    assert raised.value.exit_code == 65
    assert raised.value.message == (
        "{0}/train and {0}/val have different class folders: class1 only in train/, class9 "
        "only in val/".format(data))


def test_bad_model_and_missing_folders_are_clear_errors(tmp_path):
    with pytest.raises(TrainerError, match="--model=resnet5 is neither a torchvision "
                       "classification model nor PACKAGE.MODULE:CALLABLE"):
        imagenet.run(TrainConfig(fake_data=True, **dict(SMALL, model="resnet5")))
    with pytest.raises(DataError, match="no images in .*/train/<class>/"):
        imagenet.run(TrainConfig(data_dir=str(tmp_path), **SMALL))


@pytest.mark.parametrize("model", ["resnet18", "resnet50", "mobilenet_v3_small"])
@pytest.mark.parametrize("batch,image_size", [(1, 1), (1, 32), (1, 33), (2, 1), (2, 32)])
def test_the_batch_norm_rule_refuses_exactly_what_torch_cannot_train(model, batch, image_size):
    # Derived from the model (its forward pass on the meta device), so MobileNet's squeeze
    # and excitation, which pools to 1x1 ahead of no BatchNorm, takes what ResNet cannot.
    torch.manual_seed(0)
    config = TrainConfig(model=model, fake_data=True, image_size=image_size)
    net = imagenet.build_model(config, num_classes=10).train()
    images = torch.rand(batch, 3, image_size, image_size)
    try:
        net(images)
        trainable = True
    except ValueError as error:
        assert "more than 1 value per channel" in str(error)
        trainable = False
    if trainable:
        imagenet.check_model(config, net, 10, batch)
    else:
        with pytest.raises(TrainerError, match="one value per channel"):
            imagenet.check_model(config, net, 10, batch)


@pytest.mark.parametrize("hosts,chips", [(1, 1), (1, 4), (2, 4), (64, 4)])
def test_one_image_per_chip_is_refused_only_where_the_whole_slice_has_one(hosts, chips):
    # The model sees the global batch (one SPMD program over every chip of the slice), so
    # --batch_size=1 at 16 px trains on any slice of 2 chips or more, up to v5e-256's 256.
    from trainer import devices

    topology = devices.choose(None, hosts * chips, chips, (hosts - 1, hosts),
                              spmd_available=True)
    global_batch = topology.global_batch(1)
    assert global_batch == hosts * chips
    config = TrainConfig(model="resnet18", fake_data=True, image_size=16)
    net = imagenet.build_model(config, num_classes=10)
    if global_batch == 1:
        with pytest.raises(TrainerError, match="one value per channel"):
            imagenet.check_model(config, net, 10, global_batch)
    else:
        imagenet.check_model(config, net, 10, global_batch)


def test_a_batch_of_one_tiny_image_is_a_usage_error_before_any_step(tmp_path):
    config = TrainConfig(fake_data=True, job_dir=str(tmp_path / "job"),
                         **dict(SMALL, batch_size=1))
    with pytest.raises(TrainerError) as refused:
        imagenet.run(config)
    assert refused.value.exit_code == 64
    assert refused.value.message == (
        "a global batch of 1 at --image_size=32 leaves --model=resnet18's BatchNorm layers one "
        "value per channel, which cannot be trained")
    assert refused.value.hint == "use a larger --batch_size, or --image_size=33 or more"
    assert not (tmp_path / "job").exists()


def test_resnet18_learns_real_photographs_streamed_from_cloud_storage(photo_shards, gcs,
                                                                      tmp_path):
    # 8 classes of real photographs (tests/photos.py), 192 training and 64 test images, read
    # as shards from fake-gcs-server by one data worker process. Chance is 12.5 %. At 32 px
    # 4 epochs reached 87.5 %, 97 % and 91 % here (seeds 1, 2, 3; 64 px: 97 % at seed 1, in
    # three times the time); a model that learns nothing stays near chance, and 32 or more
    # of 64 right at chance is a binomial tail under 1e-12. 50 % (4 x chance) leaves room for
    # other CPUs' rounding.
    config = TrainConfig(data_dir=upload_folder(photo_shards, gcs, "shards"), model="resnet18",
                         image_size=32, batch_size=16, num_epochs=4, warmup_epochs=0, lr=0.05,
                         lr_batch=0, num_workers=1, log_steps=0)
    summary = imagenet.run(config, paths=OutputPaths.resolve(str(tmp_path), {}))
    assert summary["global_step"] == 4 * 12  # 8 shards of 24, one stream, batches of 16
    assert summary["final_accuracy"] >= 0.5, summary["final_accuracy"]
    # Cumulative: nothing compiles after the first epoch.
    assert summary["compiles_after_each_epoch"] == [summary["compile_count"]] * 4


def test_shards_resume_with_any_worker_count_but_not_with_another_seed(photo_shards, tmp_path):
    # The order of a shard set depends on the seed and the global batch, not on the data
    # workers: 2 workers' run resumes with 1 (and 0). Another --seed would be other examples.
    # A claim about the data, not the network: tests/tiny_model.py compiles in a second where
    # ResNet-18 took most of this test's 73 CPU seconds.
    small = dict(SMALL, model="tiny_model:build")
    config = TrainConfig(data_dir=str(photo_shards), **dict(small, num_workers=2))
    imagenet.run(config, paths=OutputPaths.resolve(str(tmp_path), {}))
    summary = imagenet.run(TrainConfig(data_dir=str(photo_shards), **dict(
        small, num_workers=1, num_epochs=2)), paths=OutputPaths.resolve(str(tmp_path), {}))
    assert summary["global_step"] == 4
    with pytest.raises(TrainerError) as raised:
        imagenet.run(TrainConfig(data_dir=str(photo_shards), **dict(small, seed=2,
                                                                    num_epochs=3)),
                     paths=OutputPaths.resolve(str(tmp_path), {}))
    assert raised.value.exit_code == 64
    assert "read its data with seed=1; this run with seed=2" in raised.value.message
    assert "seed=1 resumes at the same data position" in raised.value.hint
    # A checkpoint of the order before block boundaries moved and steps were mixed (issue
    # 31): its same step is other examples, so it is refused too, naming what changed.
    saved = sorted((tmp_path / "checkpoints").iterdir())[-1]
    snapshot = torch.load(str(saved), map_location="cpu", weights_only=False)
    assert snapshot["data_layout"] == {"seed": 1, "block_examples": 32, "block_boundaries": 2,
                                       "mixing_steps": 4}
    snapshot["data_layout"] = {"seed": 1, "block_examples": 32}
    torch.save(snapshot, str(saved))
    with pytest.raises(TrainerError) as raised:
        imagenet.run(TrainConfig(data_dir=str(photo_shards), **dict(small, num_epochs=3)),
                     paths=OutputPaths.resolve(str(tmp_path), {}))
    assert raised.value.exit_code == 64
    assert ("read its data with block_boundaries=None mixing_steps=None; this run with "
            "block_boundaries=2 mixing_steps=4") in raised.value.message


def train_losses(job):
    return [line["loss"] for line in map(json.loads, (job / "metrics.jsonl").read_text()
                                         .splitlines()) if line["kind"] == "train"]


# Beyond ResNet, at small sizes they take: fake data is one fixed batch of random labels, which
# a model that trains memorizes, so its loss falls; 8 steps at a rate that moves the weights.
# Each in a process of its own with XLA's quick compile (conftest.QUICK_COMPILE): the compile
# is nearly all of such a run's time, and an XLA client takes its flags once, as it starts.
FAMILY = ["--fake_data", "--image_size=32", "--batch_size=4", "--num_epochs=1",
          "--num_steps=8", "--lr=0.05", "--lr_batch=0", "--warmup_epochs=0",
          "--label_smoothing=0", "--log_steps=1", "--num_workers=0", "--checkpoint_epochs=0"]


def train_in_a_process(args, job, **environ):
    """``python -m trainer.imagenet ARGS --job_dir=JOB``, compiled quickly; its result."""
    return subprocess.run(
        [sys.executable, "-m", "trainer.imagenet"] + args + ["--job_dir=" + str(job)],
        cwd=str(REPO), env=quick_compile(clean_environ(PJRT_DEVICE="CPU", **environ)),
        capture_output=True, text=True, timeout=600)


def assert_learned(job, trainer, below=None):
    """The run in ``job`` trained ``trainer`` for its 8 steps, and its last loss is below
    ``below`` (default: its first)."""
    assert json.loads((job / "summary.json").read_text())["trainer"] == trainer
    losses = train_losses(job)
    assert len(losses) == 8 and losses[-1] < (losses[0] if below is None else below), losses


# An untrained model guesses: its loss is about ln 1000 = 6.9 whatever its dropout draws (a
# model that does not train, at --lr=0, stays within 6.77-7.23 here: EfficientNet's stochastic
# depth moves it most, and its last loss can be below its first). Memorizing the batch takes it
# a nat lower, the right class e times likelier (MobileNet 5.8 after 8 steps, EfficientNet 0.4).
UNTRAINED_LOSS_LESS_A_NAT = math.log(imagenet.NUM_CLASSES) - 1


@pytest.mark.parametrize("model", ["mobilenet_v3_small", "efficientnet_b0"])
def test_torchvision_families_beyond_resnet_learn(model, tmp_path):
    done = train_in_a_process(FAMILY + ["--model=" + model], tmp_path)
    assert done.returncode == 0, done.stderr
    assert_learned(tmp_path, "imagenet-" + model, below=UNTRAINED_LOSS_LESS_A_NAT)



def no_network_prefix():
    """``unshare -rn`` where this host lets a process have a network namespace of its own (no
    interface but loopback), else nothing: the proxies the test sets then stop a request."""
    try:
        works = subprocess.run(["unshare", "-rn", "true"], capture_output=True).returncode == 0
    except OSError:
        works = False
    return ["unshare", "-rn"] if works else []


@pytest.mark.skipif(importlib.util.find_spec("timm") is None,
                    reason="timm is not installed (requirements/dev.lock pins it: make venv)")
def test_a_timm_model_by_its_builder_learns_without_network(tmp_path):
    # timm's smallest ViT (test_vit: 6 blocks of width 64, 0.3 M weights) through the same
    # form as vit_small_patch16_224; its weights start random, so a job without any network
    # trains (a request for pretrained weights would fail or hang here).
    job = tmp_path / "job"
    args = ["--model=timm.models:test_vit", "--fake_data", "--image_size=32", "--batch_size=4",
            "--num_epochs=1", "--num_steps=8", "--lr=0.05", "--lr_batch=0", "--warmup_epochs=0",
            "--label_smoothing=0", "--log_steps=1", "--num_workers=0", "--checkpoint_epochs=0",
            "--job_dir=" + str(job)]
    closed = "http://127.0.0.1:9"  # the discard port: nothing listens
    environ = clean_environ(PJRT_DEVICE="CPU", HTTP_PROXY=closed, HTTPS_PROXY=closed,
                            HF_HUB_DISABLE_TELEMETRY="1")
    done = subprocess.run(no_network_prefix() + [sys.executable, "-m", "trainer.imagenet"] +
                          args, cwd=str(REPO), env=environ, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    assert json.loads((job / "summary.json").read_text())["trainer"] == (
        "imagenet-timm.models:test_vit")
    losses = train_losses(job)
    assert len(losses) == 8 and losses[-1] < losses[0], losses


TINY_VIT = '''
import torch
from torchvision.models.vision_transformer import VisionTransformer


def build(num_classes, image_size):
    """torchvision's ViT, two layers of width 32: patches of 8 px."""
    return VisionTransformer(image_size=image_size, patch_size=8, num_layers=2, num_heads=2,
                             hidden_dim=32, mlp_dim=64, num_classes=num_classes)
'''


def test_a_vit_of_the_users_own_on_pythonpath_learns_in_the_trainer_process(tmp_path):
    package = tmp_path / "code" / "my_models"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "nets.py").write_text(TINY_VIT)
    model = ["--model=my_models.nets:build"]
    on_path = dict(PYTHONPATH=str(tmp_path / "code"))
    done = train_in_a_process(model + FAMILY + ["--image_size=16"], tmp_path / "job", **on_path)
    assert done.returncode == 0, done.stderr
    # No dropout: at --lr=0 each step's loss would equal the first.
    assert_learned(tmp_path / "job", "imagenet-my_models.nets:build")
    # Its patch does not divide 20 px: refused before anything compiles, naming the flag.
    done = train_in_a_process(model + ["--fake_data", "--image_size=20"], tmp_path / "job2",
                              **on_path)
    assert done.returncode == 64, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-2:] == [
        "TrainerError: --model=my_models.nets:build cannot take --image_size=20: "
        "AssertionError: Input shape indivisible by patch size!",
        "HINT: use --image_size=24 (the smallest size above it that the model takes)"]
