"""trainer.profiling: ``--profile_steps=FIRST,COUNT`` writes torch_xla's profile of those
steps where TensorBoard's profile plugin and xprof look
(``JOB_DIR/tensorboard/plugins/profile/RUN/HOST.xplane.pb``), for a local and a ``gs://`` job
dir (fake-gcs-server), on the XLA CPU device; flags it cannot honour are one-line usage
errors."""

import subprocess
import sys

import pytest

from conftest import REPO, clean_environ
from trainer.config import parse_profile_steps
from trainer.errors import TrainerError

RUN = ["--fake_data", "--num_epochs=1", "--num_steps=8", "--log_steps=0",
       "--profile_steps=3,2"]


def run_mnist(*args, **environ):
    return subprocess.run([sys.executable, "-m", "trainer.mnist"] + RUN + list(args),
                          cwd=str(REPO), env=clean_environ(PJRT_DEVICE="CPU", **environ),
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("step_mode", ["compiled", "lazy"])
def test_a_profile_lands_in_the_local_job_dir(tmp_path, step_mode):
    result = run_mnist("--job_dir=" + str(tmp_path), "--step_mode=" + step_mode,
                       "--log_steps=1")  # a progress line's sync in every captured step
    assert result.returncode == 0, result.stderr
    assert "profiling steps 3 to 4" in result.stdout
    [profile] = (tmp_path / "tensorboard" / "plugins" / "profile").glob("*/*.xplane.pb")
    # The captured steps are annotated: their step numbers are in the trace.
    assert b"train_step" in profile.read_bytes()


def test_a_profile_lands_in_a_gs_job_dir(gcs, tmp_path):
    import os

    result = run_mnist("--job_dir=gs://{}/job".format(gcs.name),
                       STORAGE_EMULATOR_HOST=os.environ["STORAGE_EMULATOR_HOST"],
                       HOME=str(tmp_path))
    assert result.returncode == 0, result.stderr
    names = [blob.name for blob in gcs.list_blobs(prefix="job/tensorboard/plugins/profile/")]
    assert [name for name in names if name.endswith(".xplane.pb")], names


def test_profiling_needs_a_job_dir():
    result = run_mnist()
    assert result.returncode == 64
    assert result.stderr.strip().splitlines()[-2].startswith(
        "TrainerError: --profile_steps needs a TensorBoard folder")
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("text", ["3", "0,2", "3,0", "a,b", "3,2,1", "-1,2"])
def test_profile_steps_that_are_not_first_count_are_refused(text):
    with pytest.raises(TrainerError) as raised:
        parse_profile_steps(text)
    assert raised.value.message.startswith("--profile_steps must be FIRST,COUNT")


def test_profile_steps_parse():
    assert parse_profile_steps("") is None
    assert parse_profile_steps("10, 5") == (10, 5)


def test_on_a_slice_only_the_host_that_writes_outputs_profiles():
    from trainer.profiling import ProfileWindow

    # Another host of a slice has no local TensorBoard folder (it writes no outputs).
    assert ProfileWindow.for_run((3, 2), "gs://bucket/job/tensorboard", None, print) is None
    # Without a job dir every host refuses alike.
    with pytest.raises(TrainerError) as raised:
        ProfileWindow.for_run((3, 2), None, None, print)
    assert raised.value.exit_code == 64


def test_a_run_stopped_inside_the_window_writes_the_steps_it_captured(tmp_path):
    # Its resumed run starts past those steps: this is that run's only profile.
    import signal

    process = subprocess.Popen(
        [sys.executable, "-m", "trainer.mnist", "--fake_data", "--num_epochs=1",
         "--num_steps=100000", "--log_steps=1", "--profile_steps=3,100000",
         "--job_dir=" + str(tmp_path)], cwd=str(REPO), env=clean_environ(PJRT_DEVICE="CPU"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in process.stdout:
            if "step 6/" in line:
                break
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 143, err
    assert "(stopped early)" in out, out
    assert list((tmp_path / "tensorboard" / "plugins" / "profile").glob("*/*.xplane.pb"))
