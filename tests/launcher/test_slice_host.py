"""A GKE pod of a multi-host slice (launcher.job_env.SliceHost, launcher.platforms.tpu_vm):
the launcher says which host it is and how many the slice has; a dry run without chips
rehearses what the host would get, a real run still stops (exit 78); variables that disagree
are named."""

import pytest

from conftest import clean_environ, make_tpu_sysfs, run_launcher
from launcher.errors import EX_CONFIG, ConfigError
from launcher.job_env import JobEnvironment, SliceHost
from launcher.platforms import tpu_vm

GKE_HOST_2 = {"TPU_WORKER_ID": "2", "TPU_WORKER_HOSTNAMES": "a,b,c,d"}


def test_the_slice_host_is_read_from_gkes_variables():
    host = JobEnvironment.from_environ(GKE_HOST_2).slice_host
    assert host == SliceHost(2, ("a", "b", "c", "d"))
    assert host.describe() == "host 3 of 4 (TPU_WORKER_ID=2; TPU_WORKER_HOSTNAMES: a, b, c, d)"


def test_no_hostnames_is_no_slice():
    assert JobEnvironment.from_environ({"TPU_WORKER_ID": "0"}).slice_host is None
    assert JobEnvironment.from_environ({}).slice_host is None


@pytest.mark.parametrize("environ,named", [
    ({"TPU_WORKER_ID": "4", "TPU_WORKER_HOSTNAMES": "a,b,c,d"}, "TPU_WORKER_ID='4'"),
    ({"TPU_WORKER_ID": "-1", "TPU_WORKER_HOSTNAMES": "a,b"}, "TPU_WORKER_ID='-1'"),
    ({"TPU_WORKER_ID": "\u0661", "TPU_WORKER_HOSTNAMES": "a,b"}, "TPU_WORKER_ID="),
    ({"TPU_WORKER_HOSTNAMES": "a,b,c,d"}, "TPU_WORKER_ID is not set"),
    ({"TPU_WORKER_ID": "0", "TPU_WORKER_HOSTNAMES": "a,,c"}, "TPU_WORKER_HOSTNAMES="),
    ({"TPU_WORKER_ID": "1", "TPU_WORKER_HOSTNAMES": "a,b,a,d"},
     "TPU_WORKER_HOSTNAMES lists 'a' twice"),
])
def test_variables_that_disagree_are_named(environ, named):
    with pytest.raises(ConfigError) as caught:
        JobEnvironment.from_environ(environ)
    assert named in caught.value.message and caught.value.hint


def test_a_slice_host_with_chips_says_where_it_is(tmp_path):
    platform = tpu_vm.detect(JobEnvironment.from_environ(GKE_HOST_2),
                             str(make_tpu_sysfs(tmp_path, "0x0063", chips=4)))
    assert ("slice", "host 3 of 4 (TPU_WORKER_ID=2; TPU_WORKER_HOSTNAMES: a, b, c, d)") \
        in platform.facts
    assert platform.warnings == ()


def test_the_dry_run_of_a_slice_host_without_chips_is_a_rehearsal(tmp_path):
    result = run_launcher("--dry-run", "--host-root", str(tmp_path), "--data_dir=gs://b/d",
                          env=clean_environ(LAUNCHER_TRAINER="python -m trainer.imagenet",
                                            **GKE_HOST_2))
    assert result.returncode == 0, result.stderr
    assert "launcher: slice: host 3 of 4 (TPU_WORKER_ID=2; TPU_WORKER_HOSTNAMES: a, b, c, " \
           "d)" in result.stderr
    assert "launcher: exported: PJRT_DEVICE=TPU" in result.stderr
    assert "warning: dry run without TPU chips: a real run stops here (exit 78)" \
        in result.stderr
    assert result.stdout.splitlines()[0] == "export PJRT_DEVICE=TPU"
    assert "-m trainer.imagenet --data_dir=gs://b/d" in result.stdout


def test_a_real_run_of_a_slice_host_without_chips_still_stops(tmp_path):
    result = run_launcher("--host-root", str(tmp_path), env=clean_environ(**GKE_HOST_2))
    assert result.returncode == EX_CONFIG
    assert "launcher: NoTpuChipsError: TPU_WORKER_ID=2 says this job has TPUs, but no TPU " \
           "chip is visible" in result.stderr
