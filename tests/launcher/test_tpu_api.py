"""launcher.tpu_api + launcher.tpu_wait with the real TPUClusterResolver against the emulated
Cloud TPU API and metadata server on loopback."""

import os
import socket
import threading
import time

import pytest

import fake_cloud_tpu as fake
from launcher.errors import PermissionDeniedError, TpuApiError, TpuUnavailableError
from launcher.launch import resolve_tpu_node
from launcher.platforms.base import TpuNodeRef
from launcher.tpu_wait import WaitPolicy

pytestmark = pytest.mark.tensorflow
# Longer than googleapiclient's own single retry of the discovery request (about 1-2 s).
OUTAGE_S = 4.0

NODE = TpuNodeRef(fake.NODE, fake.ZONE, fake.PROJECT)
FAST = WaitPolicy(deadline_s=15, lost_grace_s=1.0)


@pytest.fixture(scope="module", autouse=True)
def tensorflow_imported(metadata_server, tmp_path_factory):
    """Import TensorFlow's client once the metadata address is set (oauth2client reads it at
    import), and before any timing, so that the tests measure the wait, not the import."""
    saved = dict(os.environ)
    os.environ.update(fake.client_environ("unused", metadata_server.host,
                                          str(tmp_path_factory.mktemp("gcloud"))))
    pytest.importorskip(
        "tensorflow.python.distribute.cluster_resolver.tpu.tpu_cluster_resolver")
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture
def api_env(cloud, monkeypatch):
    """Point TensorFlow's client at the emulators (TF reads os.environ itself)."""
    for name, value in cloud.environ.items():
        monkeypatch.setenv(name, value)
    for name in ("TPU_NAME", "TPU_CONFIG", "GOOGLE_APPLICATION_CREDENTIALS"):
        monkeypatch.delenv(name, raising=False)
    return cloud


def resolve(policy=FAST, node=NODE):
    logs = []
    return resolve_tpu_node(node, policy, logs.append), logs


def test_ready_and_healthy(api_env):
    address, logs = resolve()
    assert address == "10.240.1.2:8470"
    assert "READY and HEALTHY" in logs[-1]


def test_creating_then_ready_after_several_polls(api_env):
    api_env.api.answer_with(*[fake.state("CREATING")] * 4, fake.ready(ip="10.9.8.7"))
    address, logs = resolve()
    assert address == "10.9.8.7:8470"
    assert "state CREATING" in logs[0]


def test_ready_but_in_maintenance_waits_for_healthy(api_env):
    api_env.api.answer_with(fake.ready(health="UNHEALTHY_MAINTENANCE"),
                            fake.ready(health="UNHEALTHY_MAINTENANCE"), fake.ready())
    address, logs = resolve()
    assert address == "10.240.1.2:8470"
    assert "UNHEALTHY_MAINTENANCE" in logs[0]
    # The resolver alone would have accepted the node at the first poll.
    assert len(api_env.api.node_requests) >= 4


def test_not_found_until_created(api_env):
    api_env.api.answer_with(fake.error(404), fake.error(404), fake.state("CREATING"), fake.ready())
    assert resolve()[0] == "10.240.1.2:8470"


def test_bursts_of_503_are_retried(api_env):
    api_env.api.answer_with(*[fake.error(503)] * 5, fake.ready(), )
    assert resolve()[0] == "10.240.1.2:8470"


def test_connection_refused_until_the_api_comes_up(cloud, monkeypatch):
    with socket.socket() as probe:  # a port nobody listens on, for now
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    discovery_url = cloud.api.discovery_url.replace(str(cloud.api.port), str(port))
    for name, value in fake.client_environ(discovery_url, cloud.metadata.host,
                                           str(cloud.sdk_config)).items():
        monkeypatch.setenv(name, value)
    late = []  # the server binds its port only when started: until then, connections are refused
    timer = threading.Timer(OUTAGE_S, lambda: late.append(fake.FakeCloudTpuApi(port=port).start()))
    timer.start()
    try:
        started = time.monotonic()
        address, logs = resolve()
        assert address == "10.240.1.2:8470" and time.monotonic() - started >= OUTAGE_S
        assert "cannot reach the Cloud TPU API" in logs[0]
    finally:
        timer.join()
        for api in late:
            api.stop()


def test_permission_denied_fails_fast_with_the_role_hint(api_env):
    api_env.api.answer_with(fake.error(403, "Permission denied"))
    started = time.monotonic()
    with pytest.raises(PermissionDeniedError) as caught:
        resolve()
    assert time.monotonic() - started < 5
    assert "HTTP 403" in caught.value.message and "roles/ml.serviceAgent" in caught.value.hint


def test_preempted_fails_after_grace(api_env):
    api_env.api.answer_with(fake.state("PREEMPTED"))
    with pytest.raises(TpuUnavailableError, match="PREEMPTED"):
        resolve()


def test_deadline_exceeded(api_env):
    api_env.api.answer_with(fake.state("CREATING"))
    started = time.monotonic()
    with pytest.raises(TpuUnavailableError, match="not usable within 2s"):
        resolve(WaitPolicy(deadline_s=2))
    assert 2 <= time.monotonic() - started < 4


def test_ready_without_endpoints_is_malformed(api_env):
    body = fake.node_body()
    del body["networkEndpoints"]
    api_env.api.answer_with((200, body))
    with pytest.raises(TpuApiError):
        resolve()


def test_zone_and_project_come_from_metadata_when_only_the_name_is_known(api_env):
    assert resolve(node=TpuNodeRef(fake.NODE))[0] == "10.240.1.2:8470"
    # The metadata server's project and zone are the ones the API was asked about.
    path = api_env.api.node_paths[-1].split("?")[0]
    assert path == "/v1/projects/{}/locations/{}/nodes/{}".format(fake.PROJECT, fake.ZONE,
                                                                  fake.NODE)
