"""trainer.imagenet on the real XLA CPU device: ResNet-18 at a small image size, with fake
data and with a real class-folder tree."""

import os

import pytest

os.environ.setdefault("PJRT_DEVICE", "CPU")

from trainer import imagenet  # noqa: E402
from trainer.config import TrainConfig  # noqa: E402
from trainer.errors import DataError, TrainerError  # noqa: E402
from trainer.outputs import OutputPaths  # noqa: E402

SMALL = dict(model="resnet18", image_size=32, batch_size=4, num_epochs=1, num_steps=2,
             log_steps=1, num_workers=0)

def make_image_folder(root, classes=3, per_class=4):
    from PIL import Image

    for split in ("train", "val"):
        for label in range(classes):
            folder = root / split / "class{}".format(label)
            folder.mkdir(parents=True)
            for index in range(per_class):
                color = (80 * label, 255 - 60 * index, 120)
                Image.new("RGB", (40, 36), color).save(str(folder / "{}.png".format(index)))
    return root

def test_resnet18_fake_data_reports_top1_and_top5(tmp_path):
    summary = imagenet.run(TrainConfig(fake_data=True, **SMALL),
                           paths=OutputPaths.resolve(str(tmp_path), {}))
    assert summary["global_step"] == 2 and summary["trainer"] == "imagenet-resnet18"
    assert 0.0 <= summary["final_accuracy"] <= summary["final_top5"] <= 1.0

def test_real_class_folders(tmp_path):
    data = make_image_folder(tmp_path / "data")
    summary = imagenet.run(TrainConfig(data_dir=str(data), **SMALL), paths=OutputPaths())
    assert summary["global_step"] == 2
    assert summary["final_top5"] == 1.0  # 3 classes: the top "5" is every class

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
    with pytest.raises(TrainerError, match="--model=resnet5 is not a supported model"):
        imagenet.run(TrainConfig(fake_data=True, **dict(SMALL, model="resnet5")))
    with pytest.raises(DataError, match="train not found"):
        imagenet.run(TrainConfig(data_dir=str(tmp_path), **SMALL))
