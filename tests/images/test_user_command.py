"""A training command of the user's own in both images, run the way the platforms run it (the
image's entrypoint, `-- python SCRIPT`): dumb-init is PID 1, so `docker stop` ends a script
without a SIGTERM handler at once (143), a handler runs and its exit code is the container's,
orphans are reaped, exit codes pass through, and the init holds little memory even after the
launcher imported TensorFlow to resolve a TPU node. The script is tests/user_command.py, which
tests/launcher/test_pid1.py also runs in a PID namespace without Docker."""

import pytest

import fake_cloud_tpu as fake
from conftest import SEED_TF_CONFIG, SEED_TPU_CONFIG, TESTS
from containers import (
    RUNTIMES,
    TESTS_IN_CONTAINER,
    container_environ,
    run_container,
    stop_when_logged,
)

SCRIPT = ["--", "python", TESTS_IN_CONTAINER + "/user_command.py"]
# The stand-in of the xrt base has no torch_xla 1.11 to detect XRT from
# (docs/submitting.md: rehearse).
RUNTIME_ENV = {"xrt": {"LAUNCHER_XLA_RUNTIME": "xrt"}, "pjrt": {}}
INIT_RSS_GOAL_KB = 30 * 1024  # issue 27: under 30 MB resident while the command runs


def stop_script(image, runtime, *args, volumes=None):
    """The image's entrypoint with ``-- python user_command.py ARGS``, stopped by ``docker
    stop`` once the script printed "ready"."""
    mounts = ["-v", "{}:{}:ro".format(TESTS, TESTS_IN_CONTAINER)]
    for host_path, container_path in (volumes or {}).items():
        mounts += ["-v", "{}:{}".format(host_path, container_path)]
    env = [item for key, value in RUNTIME_ENV[runtime].items()
           for item in ("-e", "{}={}".format(key, value))]
    return stop_when_logged(["--network", "none"] + mounts + env + [image] + SCRIPT
                            + list(args), "ready", timeout=120)


def run_script(image, runtime, *args, env=None):
    return run_container(image, *(SCRIPT + list(args)),
                         env=dict(RUNTIME_ENV[runtime], **(env or {})),
                         volumes={str(TESTS): TESTS_IN_CONTAINER + ":ro"})


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_docker_stop_ends_a_script_without_a_handler_within_5s_with_143(images, runtime):
    stopped = stop_script(images[runtime], runtime, "sleep")
    assert stopped.code == 143 and stopped.seconds < 5.0, stopped


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_handler_runs_on_docker_stop_and_its_code_is_the_containers(images, runtime,
                                                                     tmp_path):
    stopped = stop_script(images[runtime], runtime, "handler", "/out/saved", "7",
                          volumes={str(tmp_path): "/out"})
    assert (stopped.code, stopped.seconds < 5.0) == (7, True), stopped
    assert (tmp_path / "saved").read_text() == "checkpoint\n"


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_orphaned_grandchildren_leave_no_zombie(images, runtime):
    result = run_script(images[runtime], runtime, "orphans")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-2:] == ["zombies:", "0"]


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_exit_codes_pass_through(images, runtime):
    codes = [run_script(images[runtime], runtime, *args).returncode
             for args in (["exit", "0"], ["exit", "3"], ["kill"])]
    assert codes == [0, 3, 137]


def test_the_init_holds_little_memory_after_a_tpu_node_resolve(images, cloud):
    """The launcher imported TensorFlow (~600 MB) to resolve the node, then exec'd dumb-init:
    PID 1 keeps none of it."""
    cloud.api.answer_with(fake.ready(ip="10.240.3.4"))
    env = dict(container_environ(cloud), TPU_CONFIG=SEED_TPU_CONFIG, TF_CONFIG=SEED_TF_CONFIG)
    result = run_script(images["xrt"], "xrt", "init", env=env)
    assert result.returncode == 0, result.stderr
    assert "launcher: TPU address: 10.240.3.4:8470" in result.stderr
    init_line, pid_line = result.stdout.splitlines()[-2:]
    _, name, rss_kb = init_line.split()
    assert name == "dumb-init" and int(rss_kb) < INIT_RSS_GOAL_KB, init_line
    assert pid_line.split()[2] == "1"  # the script is the init's child
