"""The trainers as processes, as the launcher execs them: bad flags and data give one-line
errors with their exit codes; SIGTERM checkpoints and exits 143; kill -9 at any instant
(including during a checkpoint write) loses nothing, and the run resumes with a continuous
step count; a truncated newest checkpoint is skipped, and so is one with 4 KB of a tensor
overwritten, the one before it used; when every one is damaged the run stops (exit 65). No run
leaves anything in ``$TMPDIR``, however it ends."""

import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch
from checkpoint_damage import overwrite_inside_tensor
from mnist_files import write_mnist

from conftest import REPO, clean_environ, quick_compile
from trainer.checkpoints import SEAL_BYTES, checkpoint_name, non_finite
from trainer.data import tar_members
from trainer.data.shard_index import INDEX_NAME, Shard, ShardIndex


def trainer(module, *args, environ=None):
    return subprocess.Popen([sys.executable, "-m", module] + list(args), cwd=str(REPO),
                            env=clean_environ(PJRT_DEVICE="CPU", **(environ or {})),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

def finish(process, timeout=300):
    out, err = process.communicate(timeout=timeout)
    return process.returncode, out, err

@pytest.mark.parametrize("args, code, text", [
    (["--fake_data", "--batch_size=0"], 64, "--batch_size must be positive"),
    (["--fake_data", "--no_such_flag=1"], 64, "no_such_flag"),
    ([], 64, "--data_dir is not set"),
    (["--data_dir=/nonexistent"], 65, "train-images-idx3-ubyte"),
])
def test_bad_flags_and_data_are_one_line_errors(args, code, text):
    returncode, _, err = finish(trainer("trainer.mnist", *args))
    lines = err.strip().splitlines()
    assert returncode == code, err
    assert text in lines[-2] and lines[-1].startswith("HINT: ") and "Traceback" not in err

def test_help_prints_the_flags_and_exits_0():
    """absl's --help lives in absl.app, which the trainers do not run: it was "TrainerError:
    Unknown command line flag 'help'" with exit 64."""
    returncode, out, err = finish(trainer("trainer.imagenet", "--help"))
    assert returncode == 0, err
    assert out.startswith("ImageNet") and "--model:" in out and "Error" not in err

# One process a variable (a process start costs about 7 CPU seconds, most of a run that
# stops here): test_cli checks each bad value of each in the trainer's own process.
@pytest.mark.parametrize("name, value, kind", [
    ("TRAINER_GCS_RETRY_DEADLINE", "soon", "positive"),
    ("TRAINER_GCS_REFUSAL_RETRY", "-1", "non-negative"),
    ("TRAINER_STOP_DEADLINE", "0", "positive"),
])
def test_bad_retry_and_deadline_seconds_are_a_usage_error(name, value, kind):
    returncode, _, err = finish(trainer("trainer.mnist", "--fake_data", environ={name: value}))
    assert returncode == 64, err
    assert "{}={!r} is not a {} number".format(name, value, kind) in err

@pytest.mark.parametrize("train_examples, args, code, text", [
    (0, [], 65, "train-images-idx3-ubyte holds no examples"),
    (50, ["--batch_size=64"], 64, "--batch_size=64 is larger than the training set (50 "),
])
def test_data_that_cannot_train_is_refused(tmp_path, train_examples, args, code, text):
    data = write_mnist(tmp_path / "mnist", train_examples)
    returncode, _, err = finish(trainer("trainer.mnist", "--data_dir=" + str(data), *args))
    assert returncode == code, err
    assert text in err and "Traceback" not in err

def test_metrics_file_that_is_a_folder_is_a_storage_error(tmp_path):
    (tmp_path / "metrics.jsonl").mkdir()
    returncode, _, err = finish(trainer("trainer.mnist", "--fake_data", "--num_steps=2",
                                        "--job_dir=" + str(tmp_path)))
    assert returncode == 74, err
    # Read first (earlier lines are kept): an unreadable metrics file is never replaced.
    assert "cannot read {}: Is a directory".format(tmp_path / "metrics.jsonl") in err
    assert "Traceback" not in err

def test_checkpoint_of_another_model_is_refused_and_kept(tmp_path):
    foreign = tmp_path / "checkpoints" / checkpoint_name(7)
    foreign.parent.mkdir()
    torch.save({"step": 7, "model": torch.nn.Linear(3, 2).state_dict()}, str(foreign))
    content = foreign.read_bytes()
    returncode, _, err = finish(trainer("trainer.mnist", "--fake_data", "--num_steps=2",
                                        "--job_dir=" + str(tmp_path)))
    assert returncode == 65, err
    assert "checkpoint {} was written by another model".format(foreign) in err
    assert "Traceback" not in err
    assert os.listdir(str(foreign.parent)) == [foreign.name] and foreign.read_bytes() == content

def wait_for_line(process, needle, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if needle in line:
            return line
        if not line and process.poll() is not None:
            break
    raise AssertionError("never printed {!r}: {}".format(needle, process.stderr.read()))

def sigterm_at_step_10(job, *args, environ=None):
    """MNIST on fake data into ``job``, sent SIGTERM once it logged step 10: it must exit 143
    naming the stop; returns its one checkpoint's state."""
    process = trainer("trainer.mnist", "--fake_data", "--log_steps=5", "--job-dir=" + str(job),
                      *args, environ=environ)
    try:
        wait_for_line(process, "step 10/")
        process.send_signal(signal.SIGTERM)
        returncode, _, err = finish(process, 120)
    finally:
        process.kill()
    assert returncode == 143, err
    assert "stopped by SIGTERM at step" in err
    [checkpoint] = os.listdir(str(job / "checkpoints"))
    state = torch.load(str(job / "checkpoints" / checkpoint), weights_only=False)
    assert state["step"] >= 10
    return state


def test_sigterm_checkpoints_and_exits_143(tmp_path):
    sigterm_at_step_10(tmp_path)
    assert (tmp_path / "metrics.jsonl").read_text().count('"train"') >= 2

def metric_steps(job):
    return [json.loads(line)["step"] for line in (job / "metrics.jsonl").read_text().splitlines()
            if '"train"' in line]

def test_kill_9_anywhere_then_resume_continues_the_step_count(tmp_path):
    job = tmp_path / "job"
    args = ["--fake_data", "--num_epochs=2", "--num_steps=30", "--checkpoint_steps=1",
            "--log_steps=1", "--batch_size=32", "--job_dir=" + str(job)]
    caught_mid_write = False
    for kill_after in ("step 9/", "step 31/"):
        # A killed process cannot delete its local working folder: keep it out of /tmp.
        process = trainer("trainer.mnist", *args, environ={"TMPDIR": str(tmp_path)})
        try:
            wait_for_line(process, kill_after)
            # Kill during a checkpoint write when we can see one in flight, else right now.
            deadline = time.monotonic() + 2
            while time.monotonic() < deadline:
                if any(name.startswith(".tmp-") for name in os.listdir(str(job / "checkpoints"))):
                    caught_mid_write = True
                    break
            process.send_signal(signal.SIGKILL)
            process.wait(30)
        finally:
            process.kill()
        # Whatever instant it died at, every checkpoint left behind is complete.
        from trainer.checkpoints import CheckpointStore
        from trainer.storage import LocalDirectory

        store = CheckpointStore(LocalDirectory(str(job / "checkpoints")), keep=3)
        assert store.load_latest()[0] == store.steps()[-1]
    returncode, out, err = finish(trainer("trainer.mnist", *args))
    assert returncode == 0, err
    assert "resumed from" in out
    assert metric_steps(job) == list(range(1, 61))  # continuous, nothing twice
    assert json.loads((job / "summary.json").read_text())["global_step"] == 60
    assert caught_mid_write, "no kill landed during a checkpoint write"

def test_truncated_newest_checkpoint_is_skipped(tmp_path):
    job = tmp_path / "job"
    args = ["--fake_data", "--num_steps=5", "--log_steps=5", "--batch_size=32",
            "--job_dir=" + str(job)]
    assert finish(trainer("trainer.mnist", "--num_epochs=2", *args))[0] == 0
    newest = job / "checkpoints" / checkpoint_name(10)
    newest.write_bytes(newest.read_bytes()[:1000])
    returncode, out, err = finish(trainer("trainer.mnist", "--num_epochs=3", *args))
    assert returncode == 0, err
    assert "skipping damaged checkpoint" in out + err
    assert "resumed from {}".format(job / "checkpoints" / checkpoint_name(5)) in out
    assert metric_steps(job) == [5, 10, 15]

def test_a_tensor_damaged_in_the_last_checkpoint_is_skipped_and_the_model_is_finite(tmp_path):
    # The case: the run's last checkpoint with 4 KB of 0xFF inside one tensor loaded
    # as nan, the resume had nothing left to train, and model.pt held nan (exit 0).
    job, scratch = tmp_path / "job", tmp_path / "tmp"
    scratch.mkdir()
    args = ["--fake_data", "--num_epochs=1", "--num_steps=6", "--checkpoint_steps=2",
            "--keep_checkpoints=5", "--log_steps=2", "--batch_size=32", "--job_dir=" + str(job)]
    environ = {"TMPDIR": str(scratch)}
    returncode, _, err = finish(trainer("trainer.mnist", *args, environ=environ))
    assert returncode == 0, err
    folder = job / "checkpoints"
    assert sorted(os.listdir(str(folder))) == [checkpoint_name(step) for step in (2, 4, 6)]
    last, before = folder / checkpoint_name(6), folder / checkpoint_name(4)
    overwrite_inside_tensor(last)
    before.write_bytes(before.read_bytes()[:-SEAL_BYTES])  # as versions before the digest wrote
    returncode, out, err = finish(trainer("trainer.mnist", *args, environ=environ))
    assert returncode == 0, err
    logged = out + err
    assert ("skipping damaged checkpoint {}: its bytes differ from the SHA-256 recorded when "
            "it was written".format(last)) in logged
    assert "checkpoint {} has no digest".format(before) in logged
    assert "resumed from {}: epoch 1, step 4".format(before) in logged
    model = torch.load(str(job / "model.pt"), weights_only=False)
    assert non_finite(model) is None
    assert non_finite(torch.load(str(last), weights_only=False)) is None  # steps 5-6 again
    assert metric_steps(job) == [2, 4, 6]
    assert os.listdir(str(scratch)) == []

    # Every checkpoint damaged: one line naming them, exit 65, nothing written or deleted.
    for step in (2, 4, 6):
        overwrite_inside_tensor(folder / checkpoint_name(step))
    contents = {path.name: path.read_bytes() for path in folder.iterdir()}
    returncode, _, err = finish(trainer("trainer.mnist", *args, environ=environ))
    line = one_line_error(err, 65, returncode)
    assert line.startswith("DataError: every checkpoint in {} is damaged, so the run stops "
                           "instead of starting again at step 0: ".format(folder)), line
    assert all(name in line for name in contents)
    assert {path.name: path.read_bytes() for path in folder.iterdir()} == contents
    assert os.listdir(str(scratch)) == []


def stopped_by(signal_number, job, environ):
    """MNIST on fake data into ``job``, sent ``signal_number`` once it logged step 4."""
    process = trainer("trainer.mnist", "--fake_data", "--log_steps=2", "--num_steps=40",
                      "--job_dir=" + str(job), environ=environ)
    try:
        wait_for_line(process, "step 4/")
        process.send_signal(signal_number)
        return finish(process, 120)
    finally:
        process.kill()


TMPDIR_ENDINGS = {
    0: lambda job, environ: finish(trainer("trainer.mnist", "--fake_data", "--num_steps=2",
                                           "--job_dir=" + str(job), environ=environ)),
    143: lambda job, environ: stopped_by(signal.SIGTERM, job, environ),
    130: lambda job, environ: stopped_by(signal.SIGINT, job, environ),
    # A checkpoint of another model: the run ends before its first step.
    65: lambda job, environ: (job / "checkpoints").mkdir(parents=True) or torch.save(
        {"step": 7, "model": torch.nn.Linear(3, 2).state_dict()},
        str(job / "checkpoints" / checkpoint_name(7))) or finish(
            trainer("trainer.mnist", "--fake_data", "--job_dir=" + str(job), environ=environ)),
    74: lambda job, environ: (job / "metrics.jsonl").mkdir(parents=True) or finish(
        trainer("trainer.mnist", "--fake_data", "--num_steps=2", "--job_dir=" + str(job),
                environ=environ)),
}


@pytest.mark.parametrize("code", sorted(TMPDIR_ENDINGS))
def test_a_run_leaves_nothing_in_tmpdir_however_it_ends(tmp_path, code):
    # torch.distributed (torch_xla imports it) makes a folder there for its generated
    # _remote_module_non_scriptable.py and deletes it at exit, which os._exit skips: one
    # folder a run, 43 after 43 runs.
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    returncode, _, err = TMPDIR_ENDINGS[code](tmp_path / "job", {"TMPDIR": str(scratch)})
    assert returncode == code, err
    assert os.listdir(str(scratch)) == []

# --- ImageNet's data errors, raised in its data workers or not -------------------------------

IMAGENET = ["--model=resnet18", "--image_size=32", "--batch_size=8", "--num_epochs=1",
            "--warmup_epochs=0", "--log_steps=0"]


def damaged_copy(shards, folder, damage, splits=("train",)):
    """A copy of the shard set ``shards`` in ``folder`` with ``damage(path)`` done to each
    shard of ``splits``."""
    shutil.copytree(str(shards), str(folder))
    for split in splits:
        for shard in sorted(folder.glob(split + "-*.tar")):
            damage(shard)
    return folder


def indexed_as_they_are(folder):
    """Rewrite the set's index from its shards as they are now: damage done before the index
    was written (a broken writer), which the index's checksums then cannot catch."""
    index = ShardIndex.from_json((folder / INDEX_NAME).read_bytes(), INDEX_NAME)
    index.splits = {split: [Shard.of_bytes(shard.name, (folder / shard.name).read_bytes())
                            for shard in index.entries(split)] for split in index.splits}
    (folder / INDEX_NAME).write_bytes(index.to_json())
    return folder


def truncate_example_5(shard):
    """The image of example 5 of ``shard`` cut to a third (its header whole: it opens)."""
    members = []
    for name, data in tar_members.members(io.BytesIO(shard.read_bytes())):
        if name.startswith(shard.stem + "_000005.") and not name.endswith((".cls", ".json")):
            data = data[:len(data) // 3]
        members.append((name, data))
    shard.write_bytes(tar_members.tar_bytes(members))


def directory_instead(shard):
    shard.unlink()
    shard.mkdir()


def one_line_error(err, code, returncode):
    """The error line and the hint, the last two lines of stderr, and nothing like a
    traceback (as torch re-raised a worker's error: "Caught DataError in DataLoader worker
    process 0. Original Traceback ...")."""
    lines = err.strip().splitlines()
    assert returncode == code, err
    assert lines[-1].startswith("HINT: ") and "Traceback" not in err
    assert "in DataLoader worker process" not in err
    return lines[-2]


@pytest.mark.parametrize("workers, devices", [(0, 1), (3, 1), (0, 2)])
def test_an_image_that_does_not_decode_is_skipped_named_and_counted(photo_shards, tmp_path,
                                                                    workers, devices):
    """Example 5 of each train and val shard cut to a third: it ended the run (exit 65) the
    first time it was read. Now the first 5 of each epoch and evaluation are named, training
    gets another image of its batch in place of each, the evaluation leaves them out, and the
    run ends 0 with the counts, in and out of data workers alike, on 1 device or 2 (one
    process: its counts are the job's; several: ``BoundaryVote.job_sum``, test_spmd)."""
    data = indexed_as_they_are(damaged_copy(photo_shards, tmp_path / "shards",
                                            truncate_example_5, splits=("train", "val")))
    train, val = (len(list(data.glob(split + "-*.tar"))) for split in ("train", "val"))
    assert train > 5 and 0 < val < 5  # named up to 5 an epoch, then counted
    job = tmp_path / "job"
    returncode, out, err = finish(trainer("trainer.imagenet", "--data_dir=" + str(data),
                                          "--num_workers={}".format(workers),
                                          "--job_dir=" + str(job), *IMAGENET,
                                          environ={"CPU_NUM_DEVICES": str(devices)}))
    assert returncode == 0, err
    skipped = re.findall(r"skipped a damaged image \((epoch 1|the evaluation after epoch 1)\): "
                         r"{}/(train|val)-(\d{{6}})\.tar#\2-\3_000005: (.+)".format(
                             re.escape(str(data))), out)
    assert [(where, split) for where, split, _, _ in skipped] == \
        [("epoch 1", "train")] * 5 + [("the evaluation after epoch 1", "val")] * val, out
    assert "more damaged images in epoch 1: counted, not named" in out
    assert "Traceback" not in err
    # 192 examples in 24 steps of 8 (12 of 16): every damaged one is in a trained step.
    [evaluation] = [json.loads(line) for line in (job / "metrics.jsonl").read_text().splitlines()
                    if json.loads(line)["kind"] == "eval"]
    assert (evaluation["train_damaged_images"], evaluation["eval_damaged_images"]) == (train, val)
    summary = json.loads((job / "summary.json").read_text())
    assert (summary["train_damaged_images"], summary["eval_damaged_images"]) == (train, val)
    assert "epoch 1: {} damaged images skipped in training".format(train) in out


def test_past_max_bad_images_the_run_stops_naming_the_first_files(photo_shards, tmp_path):
    data = indexed_as_they_are(damaged_copy(photo_shards, tmp_path / "shards",
                                            truncate_example_5))
    returncode, _, err = finish(trainer("trainer.imagenet", "--data_dir=" + str(data),
                                        "--num_workers=1", "--max_bad_images=2",
                                        "--job_dir=" + str(tmp_path / "job"), *IMAGENET))
    line = one_line_error(err, 65, returncode)
    assert re.fullmatch(r"DataError: 3 damaged images in epoch 1 on this host, more than "
                        r"--max_bad_images=2 allows \(2 of 192\): first {0}/train-\d{{6}}"
                        r"\.tar#train-\d{{6}}_000005, .*".format(re.escape(str(data))),
                        line), line


@pytest.mark.parametrize("workers", [0, 3])
def test_a_shard_that_cannot_be_read_is_a_storage_error_naming_it(photo_shards, tmp_path,
                                                                  workers):
    data = damaged_copy(photo_shards, tmp_path / "shards", directory_instead)
    returncode, _, err = finish(trainer("trainer.imagenet", "--data_dir=" + str(data),
                                        "--num_workers={}".format(workers),
                                        "--job_dir=" + str(tmp_path / "job"), *IMAGENET))
    line = one_line_error(err, 74, returncode)
    assert re.fullmatch(r"StorageError: cannot read {}/train-\d{{6}}\.tar: Is a directory"
                        .format(re.escape(str(data))), line), line


def test_shards_without_their_index_are_an_interrupted_make_shards(photo_shards, tmp_path):
    data = damaged_copy(photo_shards, tmp_path / "shards", lambda shard: None)
    (data / "index.json").unlink()
    returncode, _, err = finish(trainer("trainer.imagenet", "--data_dir=" + str(data),
                                        "--job_dir=" + str(tmp_path / "job"), *IMAGENET))
    line = one_line_error(err, 65, returncode)
    assert line.endswith("but no index.json: an interrupted make_shards (or copy)?")
    assert "make_shards with the same options" in err.splitlines()[-1]


def children_of(pid):
    """The processes any thread of ``pid`` started (``/proc``'s children list is per thread)."""
    return [child for task in os.listdir("/proc/{}/task".format(pid))
            for child in open("/proc/{}/task/{}/children".format(pid, task)).read().split()]


def test_a_data_worker_killed_mid_epoch_ends_the_run_with_one_line_and_exit_70(
        photo_shards, tmp_path):
    # The kernel's out-of-memory killer sends SIGKILL to a data worker: torch noticed it with
    # a RuntimeError raised wherever the trainer was (often inside a step), a traceback and
    # exit 1.
    # Its first step's compile is most of its time: XLA's quick compile (conftest) halves it.
    process = trainer("trainer.imagenet", "--data_dir=" + str(photo_shards),
                      "--num_workers=2", "--job_dir=" + str(tmp_path / "job"),
                      "--model=resnet18", "--image_size=32", "--batch_size=4",
                      "--num_epochs=1", "--warmup_epochs=0", "--log_steps=1",
                      environ=quick_compile({"XLA_FLAGS": os.environ.get("XLA_FLAGS", "")}))
    try:
        wait_for_line(process, "step 3/")
        workers = children_of(process.pid)
        assert len(workers) >= 2, "the data workers are not running"
        os.kill(int(workers[0]), signal.SIGKILL)
        returncode, _, err = finish(process, 120)
    finally:
        process.kill()
    line = one_line_error(err, 70, returncode)
    assert re.search(r"a data worker died: DataLoader worker \(pid\(?s?\)? {}\)".format(
        workers[0]), line), line
    assert "out-of-memory killer" in err.splitlines()[-1]


def test_a_group_wide_sigterm_mid_epoch_checkpoints_and_the_epoch_resumes_exactly(
        photo_shards, tmp_path):
    # systemd, timeout, Slurm and `kill -- -PGID` signal the whole process group: the data
    # workers too. They must leave the stop to the trainer (they ended with "DataLoader worker
    # ... is killed by signal: Terminated", exit 1 and no checkpoint).
    # Both runs pay a compile and their steps: at 16 px in batches of 8, compiled quickly
    # (conftest), half the steps of 32 px in 4s and a seventh of the compile, which leaves
    # steps of tenths of a second, so that the stop at step 3 still lands mid-epoch.
    job = tmp_path / "job"
    args = ["--data_dir=" + str(photo_shards), "--num_workers=2", "--job_dir=" + str(job),
            "--model=resnet18", "--image_size=16", "--batch_size=8", "--num_epochs=1",
            "--warmup_epochs=0", "--log_steps=1"]
    quick = quick_compile({"XLA_FLAGS": os.environ.get("XLA_FLAGS", "")})
    process = subprocess.Popen([sys.executable, "-m", "trainer.imagenet"] + args,
                               cwd=str(REPO), env=clean_environ(PJRT_DEVICE="CPU", **quick),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        wait_for_line(process, "step 3/")
        assert len(children_of(process.pid)) >= 2, "the data workers are not running"
        os.killpg(process.pid, signal.SIGTERM)
        returncode, _, err = finish(process, 120)
    finally:
        process.kill()
    assert returncode == 143, err
    assert "Traceback" not in err and "DataLoader worker" not in err
    stopped = int(re.search(r"stopped by SIGTERM at step (\d+); checkpoint", err).group(1))
    assert 3 <= stopped < 24  # mid-epoch: 192 training photographs in batches of 8
    returncode, out, err = finish(trainer("trainer.imagenet", *args, environ=quick))
    assert returncode == 0, err
    assert "resumed from" in out
    # The epoch goes on at the step after the checkpoint: every step once, so (the order
    # being arithmetic on the step) every example of the epoch once.
    assert metric_steps(job) == list(range(1, 25))
    assert json.loads((job / "summary.json").read_text())["global_step"] == 24


def test_an_adamw_run_stopped_by_sigterm_and_resumed_ends_with_the_uninterrupted_weights(
        tmp_path):
    # AdamW's state (step, exp_avg, exp_avg_sq) goes through the checkpoint: a run stopped
    # mid-epoch and resumed ends bit for bit where the run without the stop ends (MNIST's net
    # has no dropout, so nothing random is left to differ).
    args = ["--optimizer=adamw", "--num_epochs=1", "--num_steps=24", "--batch_size=8"]
    stopped, whole = tmp_path / "stopped", tmp_path / "whole"
    saved = sigterm_at_step_10(stopped, *args)
    assert set(saved["optimizer"]["state"][0]) == {"step", "exp_avg", "exp_avg_sq"}
    assert float(saved["optimizer"]["state"][0]["step"]) == saved["step"]
    for job in (stopped, whole):
        returncode, _, err = finish(trainer("trainer.mnist", "--fake_data", "--log_steps=5",
                                            "--job-dir=" + str(job), *args))
        assert returncode == 0, err
    ours = torch.load(str(stopped / "model.pt"), map_location="cpu")
    reference = torch.load(str(whole / "model.pt"), map_location="cpu")
    assert ours.keys() == reference.keys()
    assert all(torch.equal(ours[name], reference[name]) for name in ours)
