"""An emulated Cloud TPU API (v1) and GCE metadata server on loopback, for the real
``TPUClusterResolver``.

The TPU API serves a discovery document (so ``googleapiclient`` builds a real client from it)
and ``GET v1/projects/P/locations/Z/nodes/N``; what the node endpoint answers is scripted per
request (``script``) or switched at any instant (``set_node``), which the benchmark uses. The
metadata server answers oauth2client's GCE probe, hands out a token, and tells project/zone.

``client_environ()`` returns the variables that point TensorFlow, oauth2client and google-auth
at these servers (and nowhere else, so nothing probes the real metadata address).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, List, Optional, Sequence, Tuple, Union

PROJECT = "j79edad251b5e3ba2-ml"
ZONE = "us-central1-b"
NODE = "cmle-training-14556593641811293930-tpu"

Answer = Tuple[int, Union[dict, str, None]]  # (HTTP status, JSON body or raw text)


def node_body(state: str = "READY", health: Optional[str] = "HEALTHY",
              ip: str = "10.240.1.2", port: str = "8470") -> dict:
    """A Node resource as the Cloud TPU API v1 returns it."""
    body = {"name": "projects/{}/locations/{}/nodes/{}".format(PROJECT, ZONE, NODE),
            "acceleratorType": "v3-8", "tensorflowVersion": "pytorch-1.12", "state": state}
    if health is not None:
        body["health"] = health
    if state == "READY":
        body["networkEndpoints"] = [{"ipAddress": ip, "port": int(port)}]
    return body


def ready(**kwargs) -> Answer:
    return 200, node_body(**kwargs)


def state(name: str, health: Optional[str] = None) -> Answer:
    return 200, node_body(state=name, health=health)


def error(status: int, message: str = "error") -> Answer:
    return status, {"error": {"code": status, "message": message}}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class FakeCloudTpuApi:
    """The Cloud TPU API. ``script`` answers node GETs in order; the last answer repeats."""

    def __init__(self, script: Sequence[Answer] = (ready(),), port: int = 0) -> None:
        self._lock = threading.Lock()
        self._script: List[Answer] = list(script)
        self.node_requests: List[float] = []  # monotonic time of each node GET
        self.node_paths: List[str] = []  # the path of each node GET
        self.node_delay_s = 0.0  # hold each node answer this long (a slow API)
        self.server = _Server(("127.0.0.1", port), self._handler())
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def discovery_url(self) -> str:
        return "http://127.0.0.1:{}/discovery/v1/apis/{{api}}/{{apiVersion}}/rest".format(
            self.port)

    def answer_with(self, *answers: Answer) -> None:
        """From now on, node GETs get ``answers`` in order, then the last one forever."""
        with self._lock:
            self._script = list(answers)

    def _next_answer(self, path: str) -> Answer:
        with self._lock:
            self.node_requests.append(time.monotonic())
            self.node_paths.append(path)
            return self._script.pop(0) if len(self._script) > 1 else self._script[0]

    def _discovery(self) -> dict:
        return {
            "kind": "discovery#restDescription", "discoveryVersion": "v1", "id": "tpu:v1",
            "name": "tpu", "version": "v1", "protocol": "rest",
            "rootUrl": "http://127.0.0.1:{}/".format(self.port), "servicePath": "",
            "batchPath": "batch", "parameters": {},
            "schemas": {"Node": {"id": "Node", "type": "object", "properties": {
                "name": {"type": "string"}, "state": {"type": "string"},
                "health": {"type": "string"}, "networkEndpoints": {"type": "array", "items": {
                    "type": "object"}}}}},
            "resources": {"projects": {"resources": {"locations": {"resources": {"nodes": {
                "methods": {"get": {
                    "id": "tpu.projects.locations.nodes.get", "path": "v1/{+name}",
                    "flatPath": "v1/projects/{projectsId}/locations/{locationsId}/nodes/"
                                "{nodesId}",
                    "httpMethod": "GET", "parameterOrder": ["name"],
                    "parameters": {"name": {"type": "string", "location": "path",
                                            "required": True,
                                            "pattern": "^projects/[^/]+/locations/[^/]+/"
                                                       "nodes/[^/]+$"}},
                    "response": {"$ref": "Node"}}}}}}}}},
        }

    def _handler(self):
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                if self.path.startswith("/discovery/"):
                    return _reply(self, 200, api._discovery())
                if self.path.startswith("/v1/projects/"):
                    status, body = api._next_answer(self.path)
                    time.sleep(api.node_delay_s)
                    return _reply(self, status, body)
                return _reply(self, 404, {"error": {"code": 404, "message": "no route"}})

            def log_message(self, *args) -> None:
                pass

        return Handler

    def start(self) -> "FakeCloudTpuApi":
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


_ACCOUNTS = "/computeMetadata/v1/instance/service-accounts/"


class FakeMetadataServer:
    """The GCE metadata server, as far as oauth2client and TF's client use it."""

    def __init__(self, project: str = PROJECT, zone: str = ZONE) -> None:
        routes: Dict[str, Tuple[str, str]] = {
            "/": ("text/plain", ""),
            "/computeMetadata/v1/instance/service-accounts/default/token": (
                "application/json", json.dumps({"access_token": "fake-access-token",
                                                "expires_in": 3600, "token_type": "Bearer"})),
            "/computeMetadata/v1/instance/service-accounts/default": (
                "application/json", json.dumps({"email": "tpu-job@{}.iam.gserviceaccount.com"
                                                .format(project), "aliases": ["default"],
                                                "scopes": ["https://www.googleapis.com/auth/"
                                                           "cloud-platform"]})),
            "/computeMetadata/v1/project/project-id": ("text/plain", project),
            "/computeMetadata/v1/instance/zone": ("text/plain",
                                                  "projects/1234/zones/{}".format(zone)),
        }
        failing = self._failing = {"status": 500, "left": 0}

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                if failing["left"] > 0:
                    failing["left"] -= 1
                    return _reply(self, failing["status"], "failing on purpose")
                path = self.path.split("?")[0].rstrip("/") or "/"
                if path.startswith(_ACCOUNTS) and path.endswith("/token"):
                    path = _ACCOUNTS + "default/token"  # by alias or by e-mail
                content_type, body = routes.get(path, (None, ""))
                if content_type is None:
                    return _reply(self, 404, "not found")
                _reply(self, 200, body, content_type, {"Metadata-Flavor": "Google"})

            def log_message(self, *args) -> None:
                pass

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.host = "127.0.0.1:{}".format(self.server.server_address[1])
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> "FakeMetadataServer":
        self._thread.start()
        return self

    def fail(self, status: int, times: int) -> None:
        """Answer the next ``times`` requests with ``status`` (an outage, or a refusal)."""
        self._failing.update(status=status, left=times)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _reply(handler: BaseHTTPRequestHandler, status: int, body: Union[dict, str, None],
           content_type: Optional[str] = None, headers: Optional[Dict[str, str]] = None
           ) -> None:
    """Send ``body`` (JSON for dicts, text otherwise) with ``status`` and extra ``headers``."""
    data = (body if isinstance(body, str) else json.dumps(body)).encode()
    handler.send_response(status)
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.send_header("Content-Type", content_type or (
        "text/plain" if isinstance(body, str) else "application/json"))
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def client_environ(discovery_url: str, metadata_host: str, cloudsdk_config: str) -> Dict[str, str]:
    """Variables that point every Google client library at the emulators."""
    return {
        "TPU_API_DISCOVERY_URL": discovery_url,
        "GCE_METADATA_IP": metadata_host,
        "GCE_METADATA_HOST": metadata_host,
        "GCE_METADATA_ROOT": metadata_host,
        "CLOUDSDK_CONFIG": cloudsdk_config,
        "NO_GCE_CHECK": "False",
    }
