"""A training command of the user's own in both images, run the way the platforms run it (the
image's entrypoint, `-- python SCRIPT`): dumb-init is PID 1, so `docker stop` ends a script
without a SIGTERM handler at once (143), a handler runs and its exit code is the container's,
orphans are reaped, exit codes pass through, and the init holds little memory even after the
launcher imported TensorFlow to resolve a TPU node. Under `docker run --init` a wrapper's
children still get the SIGTERM; the data tools start with nothing blocked, a command with
SIGPIPE and SIGXFSZ at their defaults; the command is looked up on PATH as a shell does. The
script is tests/user_command.py, which tests/launcher/test_pid1.py also runs in a PID namespace
without Docker."""

import json

import pytest
from signal_state import (
    MASK_AT_START,
    RESET_BITS,
    STOP_BITS,
    commands_on_path,
    masks_at_start,
    status_fields,
)

import fake_cloud_tpu as fake
from conftest import SEED_TF_CONFIG, SEED_TPU_CONFIG, TESTS
from containers import (
    RUNTIMES,
    TESTS_IN_CONTAINER,
    container_environ,
    docker,
    run_container,
    stop_when_logged,
)

SCRIPT = ["--", "python", TESTS_IN_CONTAINER + "/user_command.py"]
# The stand-in of the xrt base has no torch_xla 1.11 to detect XRT from
# (docs/submitting.md: rehearse).
RUNTIME_ENV = {"xrt": {"LAUNCHER_XLA_RUNTIME": "xrt"}, "pjrt": {}}
INIT_RSS_GOAL_KB = 30 * 1024  # issue 27: under 30 MB resident while the command runs


def stop_script(image, runtime, *args, volumes=None, command=SCRIPT, run_options=()):
    """The image's entrypoint with ``-- python user_command.py ARGS`` (or ``command`` ARGS),
    stopped by ``docker stop`` once the script printed "ready"."""
    mounts = ["-v", "{}:{}:ro".format(TESTS, TESTS_IN_CONTAINER)]
    for host_path, container_path in (volumes or {}).items():
        mounts += ["-v", "{}:{}".format(host_path, container_path)]
    env = [item for key, value in RUNTIME_ENV[runtime].items()
           for item in ("-e", "{}={}".format(key, value))]
    return stop_when_logged(["--network", "none"] + list(run_options) + mounts + env + [image]
                            + list(command) + list(args), "ready", timeout=120)


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


# The wrapper, with a trap so that the shell outlives the SIGTERM (a shell runs its trap
# once the child it waits for has ended); as in tests/launcher/test_pid1.py.
WRAPPER = ["--", "sh", "-c", 'trap "echo wrapper: TERM" TERM; "$@"; echo "wrapper: end $?"',
           "sh", "python", TESTS_IN_CONTAINER + "/user_command.py"]


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_under_docker_run_init_a_wrappers_children_get_docker_stops_sigterm(images, runtime,
                                                                            tmp_path):
    """docker-init (tini) signals the launcher's process alone: without an init of the
    launcher's own, the shell would wait for a script that never hears of the stop."""
    stopped = stop_script(images[runtime], runtime, "handler", "/out/saved", "7",
                          command=WRAPPER, run_options=["--init"],
                          volumes={str(tmp_path): "/out"})
    assert stopped.code == 0 and stopped.seconds < 5.0, stopped
    assert stopped.stdout.split("ready")[-1].split() == ["wrapper:", "TERM", "wrapper:", "end",
                                                         "7"]
    assert (tmp_path / "saved").read_text() == "checkpoint\n"


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_data_tool_starts_with_the_stop_signals_unblocked(images, runtime, tmp_path):
    """`-- python -m trainer.data.make_shards` kept SIGTERM and SIGINT blocked for good."""
    (tmp_path / "sitecustomize.py").write_text(MASK_AT_START)
    result = run_container(images[runtime], "--", "python", "-m", "trainer.data.make_shards",
                           "--help", env=dict(RUNTIME_ENV[runtime], PYTHONPATH="/site"),
                           volumes={str(tmp_path): "/site:ro"}, network="none")
    assert result.returncode == 0, result.stderr
    masks = masks_at_start(result.stderr)
    assert len(masks) == 2 and masks[-1] & STOP_BITS == 0, result.stderr


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_an_execd_command_starts_with_sigpipe_and_sigxfsz_at_their_defaults(images, runtime):
    result = run_container(images[runtime], "--init=exec", "--", "cat", "/proc/self/status",
                           env=RUNTIME_ENV[runtime], network="none")
    assert result.returncode == 0, result.stderr
    status = status_fields(result.stdout)
    assert status["Pid"].strip() == "1"
    assert int(status["SigIgn"], 16) & RESET_BITS == 0, status["SigIgn"]
    assert int(status["SigBlk"], 16) & STOP_BITS == 0, status["SigBlk"]


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_the_command_is_looked_up_on_path_as_a_shell_does(images, runtime, tmp_path):
    """An unexecutable file of the same name earlier on PATH is passed over (it was 126)."""
    commands_on_path(tmp_path)
    path = "/cmds/first:/cmds/second:" + image_path(images[runtime])
    result = run_container(images[runtime], "--", "train-cmd", network="none",
                           env=dict(RUNTIME_ENV[runtime], PATH=path),
                           volumes={str(tmp_path): "/cmds:ro"})
    assert (result.returncode, result.stdout.strip()) == (0, "ran second"), result.stderr


def image_path(image):
    """The image's own PATH (the xrt base puts its conda env first)."""
    env = docker("image", "inspect", "--format", "{{json .Config.Env}}", image).stdout
    return [item.split("=", 1)[1] for item in json.loads(env) if item.startswith("PATH=")][0]
