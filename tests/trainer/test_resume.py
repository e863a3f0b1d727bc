"""trainer.resume: a checkpoint records which training examples the run read (the shard
set's identity: shard names, counts and checksums from the index), and a resume on another
shard set (the same images re-made with another ``make_shards --seed``) is refused with one
line and a hint (exit 65) before anything trains or is overwritten: never a silent mix of
two orders, with some examples trained twice and others never."""

import shutil
import subprocess
import sys

import pytest

from conftest import REPO, clean_environ, make_image_folder
from trainer.data.make_shards import convert

RUN = ["--model=resnet18", "--image_size=16", "--batch_size=8", "--num_workers=0",
       "--warmup_epochs=0", "--log_steps=0", "--num_steps=2"]


def imagenet(*args):
    return subprocess.run([sys.executable, "-m", "trainer.imagenet"] + RUN + list(args),
                          cwd=str(REPO), env=clean_environ(PJRT_DEVICE="CPU"),
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def first_epoch(photo_shards, tmp_path_factory):
    """One epoch on a copy of the photo shards: (its data folder, its job dir). The two
    resumes below share it (a run costs half a minute); each resumes a copy of the job dir,
    and only the refusal rewrites the data folder."""
    root = tmp_path_factory.mktemp("first-epoch")
    data, job = root / "shards", root / "job"
    shutil.copytree(str(photo_shards), str(data))
    first = imagenet("--data_dir=" + str(data), "--job_dir=" + str(job), "--num_epochs=1")
    assert first.returncode == 0, first.stderr
    return data, job


def test_a_resume_on_a_remade_shard_set_is_refused(photos, first_epoch, tmp_path):
    data, first_job = first_epoch
    job = tmp_path / "job"
    shutil.copytree(str(first_job), str(job))
    # The same images, shuffled into the shards by another seed, in the same folder.
    shutil.rmtree(str(data))
    convert(str(photos), str(data), shard_size=24, seed=1, workers=1)
    again = imagenet("--data_dir=" + str(data), "--job_dir=" + str(job), "--num_epochs=2")
    assert again.returncode == 65, again.stderr
    error, hint = again.stderr.strip().splitlines()[-2:]
    assert error.startswith("DataError: checkpoint {}/checkpoints/ckpt-000000002.pt was "
                            "trained on 192 training examples in 8 shards (digest ".format(job))
    assert "; --data_dir holds 192 training examples in 8 shards (digest " in error
    assert hint.startswith("HINT: resume with the --data_dir the run started with")
    assert "Traceback" not in again.stderr
    assert sorted(path.name for path in (job / "checkpoints").iterdir()) == [
        "ckpt-000000002.pt"]  # nothing was overwritten


def test_a_resume_on_the_same_shard_set_goes_on(photo_shards, first_epoch, tmp_path):
    # The shard set the first epoch read, by its identity: a copy of it (photo_shards is what
    # the first epoch copied) in another folder, so also whatever the refusal did to that one.
    job = tmp_path / "job"
    shutil.copytree(str(first_epoch[1]), str(job))
    result = imagenet("--data_dir=" + str(photo_shards), "--job_dir=" + str(job),
                      "--num_epochs=2")
    assert result.returncode == 0, result.stderr
    assert "resumed from" in result.stdout


def test_a_class_folder_run_resumed_on_other_files_is_refused(tmp_path):
    data, job = make_image_folder(tmp_path / "images", classes=2, per_class=8), tmp_path / "job"
    first = imagenet("--data_dir=" + str(data), "--job_dir=" + str(job), "--num_epochs=1")
    assert first.returncode == 0, first.stderr
    # (Another --seed is refused as for shards: the source's layout records it,
    # tests/trainer/data/test_folder_source.py.)
    (data / "train" / "class0" / "extra.png").write_bytes(
        (data / "train" / "class0" / "0.png").read_bytes())
    files = imagenet("--data_dir=" + str(data), "--job_dir=" + str(job), "--num_epochs=2")
    assert files.returncode == 65, files.stderr
    error = files.stderr.strip().splitlines()[-2]
    assert "was trained on 16 training examples in class-folder files (digest " in error
    assert "--data_dir holds 17 training examples in class-folder files" in error
    assert "Traceback" not in files.stderr
