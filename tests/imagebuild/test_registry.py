"""imagebuild.registry against a registry on loopback that speaks the distribution API's
token flow as gcr.io and Artifact Registry do (401 with a Bearer challenge, a token service,
anonymous tokens for public repositories only): the digest comes from one HEAD, nothing is
pulled. Debian's real registry, without auth, answers the same HEAD in the container tier
(tests/images/test_reproducible.py, through make pin-bases' module)."""

import base64
import http.server
import re
import subprocess
import sys
import threading

import pytest

from conftest import REPO
from imagebuild.registry import RegistryError, manifest_digest, split_reference

DIGEST = "sha256:" + "c" * 64
PASSWORD = "ya29.user-token"


class Registry(http.server.BaseHTTPRequestHandler):
    """public/base:2.9 for anyone, private/base:1 for oauth2accesstoken:PASSWORD."""

    requests = []

    def log_message(self, *args):
        pass

    def do_GET(self):  # the token service
        Registry.requests.append(("GET", self.path))
        scope = self.path.split("scope=")[1].split("&")[0]
        basic = self.headers.get("Authorization", "")
        user = base64.b64decode(basic[6:]).decode() if basic.startswith("Basic ") else ""
        if "private" in scope and user != "oauth2accesstoken:" + PASSWORD:
            self.send_response(403)
            self.end_headers()
            return
        body = b'{"token": "t-' + (b"user" if user else b"anon") + b'"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_HEAD(self):  # the manifests
        Registry.requests.append(("HEAD", self.path))
        repository, tag = self.path[len("/v2/"):].split("/manifests/")
        token = self.headers.get("Authorization", "")
        wanted = "Bearer t-user" if repository.startswith("private") else "Bearer t-"
        if not token.startswith(wanted):
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Bearer realm="http://{}/token",service="reg",'
                             'scope="repository:{}:pull"'.format(self.headers["Host"], repository))
            self.end_headers()
            return
        known = {("public/base", "2.9"), ("private/base", "1")}
        self.send_response(200 if (repository, tag) in known else 404)
        if (repository, tag) in known:
            self.send_header("Docker-Content-Digest", DIGEST)
        self.end_headers()


@pytest.fixture
def registry():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Registry)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Registry.requests = []
    yield "127.0.0.1:{}".format(server.server_address[1])
    server.shutdown()


def test_a_public_tag_is_one_head_with_an_anonymous_token(registry):
    assert manifest_digest(registry + "/public/base:2.9") == DIGEST
    assert [method for method, _ in Registry.requests] == ["HEAD", "GET", "HEAD"]
    assert all("/blobs/" not in path for _, path in Registry.requests)  # nothing pulled


def test_a_private_tag_takes_the_users_token(registry):
    asked = []
    digest = manifest_digest(registry + "/private/base:1",
                             password=lambda: asked.append(1) or PASSWORD)
    assert digest == DIGEST and asked == [1]
    with pytest.raises(RegistryError, match="refused a pull token for your account"):
        manifest_digest(registry + "/private/base:1", password=lambda: "wrong")


def test_what_the_registry_cannot_say_is_one_line(registry):
    with pytest.raises(RegistryError, match=r"/v2/public/base/manifests/9\.9 answered 404"):
        manifest_digest(registry + "/public/base:9.9")
    with pytest.raises(RegistryError, match="cannot be reached"):
        manifest_digest("127.0.0.1:9/public/base:2.9", timeout=2)
    with pytest.raises(RegistryError, match="names no registry host"):
        split_reference("ubuntu:22.04")
    assert split_reference("us-central1-docker.pkg.dev/p/r/xla:r2.9.0_3.10_tpuvm") == (
        "us-central1-docker.pkg.dev", "p/r/xla", "r2.9.0_3.10_tpuvm")
    assert split_reference("localhost:5000/a/b") == ("localhost:5000", "a/b", "latest")


def test_make_pin_bases_pins_without_docker(registry, tmp_path):
    """What make pin-bases runs, on a checkout whose bases live on this registry, with no
    docker to pull anything with."""
    from imagebuild.pin_bases import FILES, current_bases

    for name in FILES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text((REPO / name).read_text())
    makefile = tmp_path / "Makefile"
    makefile.write_text(re.sub(r"^(BASE_IMAGE_\w+ := ).*$", r"\g<1>" + registry +
                               "/public/base:2.9", makefile.read_text(), flags=re.MULTILINE))
    result = subprocess.run([sys.executable, "-m", "imagebuild.pin_bases", "--root",
                             str(tmp_path)], cwd=str(REPO), capture_output=True, text=True,
                            env={"PATH": "/nonexistent", "DOCKER": "/nonexistent/docker"},
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert set(current_bases(tmp_path).values()) == {registry + "/public/base:2.9@" + DIGEST}
    assert all(method in ("HEAD", "GET") for method, _ in Registry.requests)
