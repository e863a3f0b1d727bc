"""The launcher's whole input space, explored by hypothesis: platform and runtime variables,
``LAUNCHER_*`` settings, launcher options, trainer arguments and ``--`` commands, with the real
resolver against the emulated Cloud TPU API, whose answer depends on the node's name (ready,
permission denied, garbage, never created, still creating).

Properties, for every input:
- the exit code is one the README documents for the situation, never 70 (a launcher bug);
- every line is the launcher's own; a failure ends in one error line and one ``HINT:`` line;
- no fake TPU: the trainer gets ``PJRT_DEVICE=TPU`` only from the user or from visible TPU
  chips, never from other Google PCI devices (a gVNIC, an NVMe disk, an unknown id);
- no silent CPU: when the job asks for a TPU (a TPU node, a TPU machine in ``TF_CONFIG`` or
  ``CLUSTER_SPEC``, visible chips), the trainer never gets ``PJRT_DEVICE=CPU`` unless the user
  set exactly that;
- ``XRT_TPU_CONFIG`` reaches the trainer only from a TPU node, the user's own TPU address or
  local chips, and never together with ``PJRT_DEVICE``.
"""

import io
import json
from contextlib import redirect_stderr, redirect_stdout

import pytest
from hypothesis import HealthCheck, assume, event, example, given, settings
from hypothesis import strategies as st

import fake_cloud_tpu as fake
from conftest import (
    GVNIC,
    SEED_TF_CONFIG,
    SEED_TPU_CONFIG,
    RecordingExec,
    examples,
    make_tpu_sysfs,
)
from launcher.cli import main, parse_command_line
from launcher.errors import (
    EX_CANNOT_EXECUTE,
    EX_CONFIG,
    EX_NOPERM,
    EX_NOT_FOUND,
    EX_PROTOCOL,
    EX_SOFTWARE,
    EX_UNAVAILABLE,
    EX_USAGE,
    LauncherError,
)

pytestmark = pytest.mark.tensorflow

# 126 / 127: the trainer command cannot be executed / is not on PATH: the launcher looks it up
# as a shell does before anything is exec'd (issue 32).
DOCUMENTED = {0, EX_USAGE, EX_UNAVAILABLE, EX_PROTOCOL, EX_NOPERM, EX_CONFIG, EX_CANNOT_EXECUTE,
              EX_NOT_FOUND}
VERTEX_TPU = json.dumps({"cluster": {"workerpool0": ["cmle-host:2222"]}, "environment": "cloud",
                         "task": {"type": "workerpool0", "index": 0}, "job": {
                             "workerPoolSpecs": [{"machineSpec": {
                                 "machineType": "ct5lp-hightpu-4t",
                                 "acceleratorType": "TPU_V5_LITEPOD"}}]}})
VERTEX_CPU = json.dumps({"cluster": {"workerpool0": ["cmle-host:2222"]}, "environment": "cloud",
                         "task": {"type": "workerpool0", "index": 0}, "job": {
                             "workerPoolSpecs": [{"machineSpec": {
                                 "machineType": "n1-standard-4"}}]}})
# Values that ask for a TPU, per variable (what the oracle needs to know about the inputs).
ASKS_FOR_TPU = {"TF_CONFIG": {SEED_TF_CONFIG, VERTEX_TPU}, "CLUSTER_SPEC": {VERTEX_TPU}}

# Nodes the emulated API answers differently, by name (see ``NodesByName``).
NODE_ANSWERS = {"ready-tpu": fake.ready(), "denied-tpu": fake.error(403),
                "garbage-tpu": (200, "[1, 2]"), "never-tpu": fake.error(404),
                "creating-tpu": fake.state("CREATING")}
anything = st.text(max_size=24)
often = st.sampled_from  # readability: the plausible values, drawn as often as ``anything``
names = st.one_of(often(sorted(NODE_ANSWERS)),
                  st.from_regex(r"[a-z][-a-z0-9]{0,20}[a-z0-9]", fullmatch=True), anything)
seconds = st.one_of(often(["1", "0.5", "1e-9"]), often(["0", "-1", "inf", "nan", "soon"]),
                    anything)
ENVIRONMENT = {
    "TPU_CONFIG": st.one_of(st.just(SEED_TPU_CONFIG), st.builds(
        lambda name, zone, project: json.dumps({"project": project, "zone": zone,
                                                "tpu_node_name": name}),
        names, often(["us-central1-b", "us-central1-b", "Zone!", ""]),
        often([fake.PROJECT, fake.PROJECT, "p q"])), often(["{}", "[]", "null"]), anything),
    "TF_CONFIG": st.one_of(often([SEED_TF_CONFIG, VERTEX_TPU, VERTEX_CPU]),
                           often(["{}", '{"job": "x"}', "[" * 3000]), anything),
    "CLUSTER_SPEC": st.one_of(often([VERTEX_TPU, VERTEX_CPU, '{"task": 1}']), anything),
    "TPU_NAME": names,
    "PJRT_DEVICE": st.one_of(often(["TPU", "CPU", " cpu ", "CUDA", "TPUU"]), anything),
    "XRT_TPU_CONFIG": st.one_of(st.just("tpu_worker;0;10.0.0.2:8470"), anything),
    "TPU_IP_ADDRESS": st.one_of(st.just("10.0.0.2"), anything),
    "TPU_ACCELERATOR_TYPE": st.one_of(st.just("v5litepod-4"), anything),
    "LAUNCHER_TRAINER": st.one_of(often(["python -m trainer.imagenet", "/bin/true --x"]),
                                  often(["''", " ", "python 'unclosed"]), anything),
    "LAUNCHER_XLA_RUNTIME": st.one_of(often(["xrt", "XRT"]), often(["pjrt", "cuda"]), anything),
    "LAUNCHER_TPU_WAIT_TIMEOUT": seconds,
    "LAUNCHER_TPU_LOST_GRACE": seconds,
    "LAUNCHER_HOST_ROOT": often(["CHIPS", "NO_CHIPS", "/nonexistent", "", "relative/dir"]),
    "LAUNCHER_INIT": st.one_of(often(["group", "child", "exec", " Exec "]), often(["tini", ""]),
                               anything),
}
# Each input is a scenario the platforms really produce, with up to three variables
# perturbed or added: purely random environments almost never get past the first check.
SCENARIOS = st.one_of(
    st.builds(lambda name: {"TPU_CONFIG": json.dumps({
        "project": fake.PROJECT, "zone": fake.ZONE, "tpu_node_name": name}),
        "TF_CONFIG": SEED_TF_CONFIG, "LAUNCHER_XLA_RUNTIME": "xrt"}, names),
    st.builds(lambda name: {"TPU_NAME": name, "LAUNCHER_XLA_RUNTIME": "xrt"}, names),
    st.just({"CLUSTER_SPEC": VERTEX_TPU, "LAUNCHER_HOST_ROOT": "CHIPS"}),
    st.just({}))
PERTURBATIONS = st.lists(st.sampled_from(sorted(ENVIRONMENT)), max_size=3, unique=True).flatmap(
    lambda chosen: st.fixed_dictionaries({name: ENVIRONMENT[name] for name in chosen}))
OPTIONS = st.lists(st.one_of(
    st.sampled_from(["--dry-run", "--xla-runtime=xrt", "--xla-runtime=pjrt", "--xla-runtime",
                     "--trainer=", "--host-root=CHIPS", "--host-root=NO_CHIPS",
                     "--tpu-wait-timeout=1", "--init=child", "--init=exec", "--init"]),
    st.builds("{}={}".format, st.sampled_from(["--trainer", "--xla-runtime",
                                               "--tpu-wait-timeout", "--tpu-lost-grace",
                                               "--host-root", "--init"]), anything)),
    max_size=3)
TRAINER_ARGS = st.lists(st.one_of(st.sampled_from(["--job-dir=gs://b/j", "--lr=0.1", "--",
                                                   "x y", "--password=hunter2"]), anything),
                        max_size=3)
COMMAND = st.one_of(st.just([]), st.lists(st.one_of(st.sampled_from(["/bin/true", "python", "",
                                                                      " ", "--x"]), anything),
                                          max_size=3).map(lambda rest: ["--"] + rest))


class NodesByName(fake.FakeCloudTpuApi):
    """The emulated API, answering each node by its name (``NODE_ANSWERS``; else READY)."""

    def _next_answer(self, path):
        return NODE_ANSWERS.get(path.split("?")[0].rpartition("/")[2], fake.ready())


@pytest.fixture(scope="module")
def emulated_api(metadata_server, tmp_path_factory):
    """One Cloud TPU API for the module; TensorFlow reads os.environ itself."""
    api = NodesByName().start()
    patch = pytest.MonkeyPatch()
    for name, value in fake.client_environ(api.discovery_url, metadata_server.host, str(
            tmp_path_factory.mktemp("gcloud"))).items():
        patch.setenv(name, value)
    yield api
    patch.undo()
    api.stop()


@pytest.fixture(scope="module")
def chips(tmp_path_factory):
    """A host with 4 TPU chips, its gVNIC, and a Persistent Disk NVMe controller."""
    return str(make_tpu_sysfs(tmp_path_factory.mktemp("host"), others=(GVNIC, "0x001f")))


@pytest.fixture(scope="module")
def no_chips(tmp_path_factory):
    """A host with Google PCI devices but no TPU: a gVNIC, an NVMe disk, an unknown id."""
    return str(make_tpu_sysfs(tmp_path_factory.mktemp("cpu-host"), "0x0099", chips=1,
                              others=(GVNIC, "0x001f")))


def visible(chips, environ, argv):
    """Whether the launcher may have looked at the fake host with TPU chips: the last
    ``--host-root`` flag wins over ``LAUNCHER_HOST_ROOT``."""
    flags = [arg.split("=", 1)[1] for arg in argv if arg.startswith("--host-root=")]
    return (flags[-1] if flags else environ.get("LAUNCHER_HOST_ROOT")) == chips


def asks_for_tpu(environ, argv, chips):
    return (any(environ.get(name, "").strip() for name in ("TPU_CONFIG", "TPU_NAME"))
            or any(environ.get(name) in values for name, values in ASKS_FOR_TPU.items())
            or visible(chips, environ, argv))


def waits_long(environ, argv):
    """Whether the launcher would wait more than 2 s for a node that never gets ready (the
    generated seconds can be any number): such inputs are left out, or a run could wait for
    hours; the wait itself is tested in test_tpu_wait."""
    try:
        wait = parse_command_line(argv, environ).wait
    except (LauncherError, SystemExit):
        return False
    return wait.deadline_s > 2


@settings(max_examples=examples(400), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scenario=SCENARIOS, changes=PERTURBATIONS, options=OPTIONS, trainer_args=TRAINER_ARGS,
       command=COMMAND)
# Cases found by earlier runs, kept: a NUL in an option; a --host-root flag that overrides
# LAUNCHER_HOST_ROOT on a Vertex job without TPU; PJRT_DEVICE next to an XRT address on the
# legacy platform (issue 17: two runtimes configured at once); a record separator in a value
# the summary prints (once two log lines); -h first among the arguments (help, exit 0); a CPU
# host with only non-TPU Google devices; PJRT_DEVICE set empty next to a resolved TPU node
# (make fuzz found it: the empty variable reached the trainer next to XRT_TPU_CONFIG).
@example(scenario={"CLUSTER_SPEC": VERTEX_TPU, "LAUNCHER_HOST_ROOT": "CHIPS"}, changes={},
         options=["--host-root=\0"], trainer_args=[], command=[])
@example(scenario={"CLUSTER_SPEC": VERTEX_TPU, "LAUNCHER_HOST_ROOT": "CHIPS"},
         changes={"CLUSTER_SPEC": VERTEX_CPU}, options=["--host-root=0"], trainer_args=[],
         command=[])
@example(scenario={"TPU_CONFIG": SEED_TPU_CONFIG, "TF_CONFIG": SEED_TF_CONFIG,
                   "LAUNCHER_XLA_RUNTIME": "xrt"},
         changes={"TPU_IP_ADDRESS": "10.0.0.2", "PJRT_DEVICE": "TPU"}, options=[],
         trainer_args=[], command=[])
@example(scenario={"CLUSTER_SPEC": VERTEX_TPU, "LAUNCHER_HOST_ROOT": "CHIPS"},
         changes={"TPU_ACCELERATOR_TYPE": "0\x1e0"}, options=[], trainer_args=[], command=[])
@example(scenario={}, changes={}, options=[], trainer_args=["-h"], command=[])
@example(scenario={}, changes={}, options=["--trainer=--"], trainer_args=[], command=[])
@example(scenario={"TPU_CONFIG": json.dumps({"project": fake.PROJECT, "zone": fake.ZONE,
                                             "tpu_node_name": "a"}),
                   "TF_CONFIG": SEED_TF_CONFIG, "LAUNCHER_XLA_RUNTIME": "xrt"},
         changes={"PJRT_DEVICE": ""}, options=[], trainer_args=[], command=[])
@example(scenario={"CLUSTER_SPEC": VERTEX_CPU, "LAUNCHER_HOST_ROOT": "NO_CHIPS"}, changes={},
         options=[], trainer_args=[], command=[])
# A trainer command not on PATH after a resolved TPU node: the launcher's own 127 (found when
# the launcher started looking commands up itself).
@example(scenario={"TPU_CONFIG": json.dumps({"project": fake.PROJECT, "zone": fake.ZONE,
                                             "tpu_node_name": "ready-tpu"}),
                   "TF_CONFIG": SEED_TF_CONFIG, "LAUNCHER_XLA_RUNTIME": "xrt"},
         changes={}, options=["--trainer=0"], trainer_args=[], command=[])
def test_every_input_ends_the_documented_way(emulated_api, chips, no_chips, scenario, changes,
                                             options, trainer_args, command):
    def hosts(text):
        return text.replace("NO_CHIPS", no_chips).replace("CHIPS", chips)

    environ = {name: hosts(value) for name, value in dict(scenario, **changes).items()}
    environ.setdefault("LAUNCHER_TPU_WAIT_TIMEOUT", "1")  # not the default 20 minutes
    argv = [hosts(arg) for arg in options] + trainer_args + command
    assume(not waits_long(environ, argv))
    execvpe, err = RecordingExec(), io.StringIO()
    with redirect_stderr(err), redirect_stdout(io.StringIO()):
        code = main(argv, environ, execvpe)
    lines = err.getvalue().splitlines()
    event("exit {}{}".format(code, " via XRT_TPU_CONFIG" if any(
        "XRT_TPU_CONFIG" in env for _, _, env in execvpe.calls) else ""))
    assert code != EX_SOFTWARE, lines
    assert code in DOCUMENTED, lines
    assert all(line.startswith("launcher: ") for line in lines), lines
    if code:
        assert lines[-1].startswith("launcher: HINT: ") and len(lines[-2]) > len("launcher: ")
        assert execvpe.calls == []
        return
    for _, _, env in execvpe.calls:
        if env.get("PJRT_DEVICE") == "TPU" and not environ.get("PJRT_DEVICE", "").strip():
            assert visible(chips, environ, argv), lines  # never a TPU that is not there
        if env.get("PJRT_DEVICE") == "CPU" and asks_for_tpu(environ, argv, chips):
            assert environ.get("PJRT_DEVICE", "").strip().upper() == "CPU", lines
        if env.get("XRT_TPU_CONFIG") and not environ.get("XRT_TPU_CONFIG"):
            assert "PJRT_DEVICE" not in env, lines
            assert any(environ.get(name) for name in ("TPU_CONFIG", "TPU_NAME",
                                                      "TPU_IP_ADDRESS")) or visible(
                chips, environ, argv), lines
