"""The digest a registry serves for ``NAME:TAG`` now, read from its HTTP API (the Docker
Registry / OCI distribution API) without pulling a byte of the image: one ``HEAD
/v2/REPOSITORY/manifests/TAG``, whose ``Docker-Content-Digest`` header is the digest Docker
pulls by (an index's for a multi-platform tag, as ``docker pull`` records it).

Authentication is the registries' token flow: a 401 names a token service
(``WWW-Authenticate: Bearer realm=...,service=...``), which gives a pull token anonymously for
public images (Google's base images are) and, where it refuses, for the user's account:
``gcloud auth print-access-token`` as the password of ``oauth2accesstoken``, as Google's
registries (gcr.io, ``*-docker.pkg.dev``) take it. ``localhost`` and ``127.0.0.1`` are spoken
to over plain HTTP, as Docker does.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from typing import Callable, Dict, Optional, Tuple

# What a manifest can be; the registry answers with the one it holds.
MANIFEST_TYPES = ", ".join((
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json"))
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


class RegistryError(Exception):
    """The registry cannot say; the message is one line."""


def split_reference(reference: str) -> Tuple[str, str, str]:
    """(registry host, repository, tag) of ``HOST/REPO:TAG`` (Docker Hub's short names are
    not bases of ours: a reference without a registry host is refused)."""
    name, _, tag = reference.rpartition(":")
    if not name or "/" in tag:
        name, tag = reference, "latest"
    host, _, repository = name.partition("/")
    if not repository or not ("." in host or ":" in host or host == "localhost"):
        raise RegistryError("{} names no registry host (HOST/REPOSITORY:TAG)".format(reference))
    return host, repository, tag


def manifest_digest(reference: str, password: Optional[Callable[[], str]] = None,
                    timeout: float = 30) -> str:
    """``sha256:...`` that the registry serves for ``reference`` now. ``password``: called
    for the user's token where the anonymous one is refused (default: gcloud's)."""
    host, repository, tag = split_reference(reference)
    scheme = "http" if host.split(":")[0] in ("localhost", "127.0.0.1") else "https"
    url = "{}://{}/v2/{}/manifests/{}".format(scheme, host, repository, tag)
    headers = {"Accept": MANIFEST_TYPES}
    answer = _head(url, headers, timeout)
    if isinstance(answer, urllib.error.HTTPError):
        challenge = answer.headers.get("WWW-Authenticate", "")
        if answer.code != 401 or not challenge.lower().startswith("bearer "):
            raise _answered(url, answer)
        fields = _challenge_fields(challenge)
        token = _token(fields, repository, None, timeout)  # anonymous: public images
        if token is not None:
            answer = _head(url, dict(headers, Authorization="Bearer " + token), timeout)
        if token is None or (isinstance(answer, urllib.error.HTTPError)
                             and answer.code in (401, 403)):
            token = _token(fields, repository, (password or gcloud_access_token)(), timeout)
            if token is None:
                raise RegistryError("{} refused a pull token for your account".format(
                    fields.get("realm")))
            answer = _head(url, dict(headers, Authorization="Bearer " + token), timeout)
        if isinstance(answer, urllib.error.HTTPError):
            raise _answered(url, answer)
    digest = answer.get("Docker-Content-Digest", "")
    if not DIGEST.match(digest):
        raise RegistryError("{} gave no sha256 Docker-Content-Digest ({!r})".format(url, digest))
    return digest


def gcloud_access_token() -> str:
    """The user's Google access token (what ``gcloud auth configure-docker`` makes Docker
    send)."""
    try:
        result = subprocess.run(["gcloud", "auth", "print-access-token"], capture_output=True,
                                text=True, timeout=60)
    except OSError as error:
        raise RegistryError("the registry refused an anonymous pull and gcloud cannot give "
                            "your token ({})".format(error))
    if result.returncode != 0:
        raise RegistryError("gcloud auth print-access-token failed: {}".format(
            " ".join(result.stderr.split())[-200:]))
    return result.stdout.strip()


def _head(url: str, headers: Dict[str, str], timeout: float):
    """The response's headers, or the HTTPError the registry answered with."""
    request = urllib.request.Request(url, headers=headers, method="HEAD")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return dict(response.headers)
    except urllib.error.HTTPError as error:
        return error
    except (OSError, ValueError) as error:
        raise RegistryError("{} cannot be reached: {}".format(url, error))


def _answered(url: str, error: urllib.error.HTTPError) -> RegistryError:
    return RegistryError("{} answered {} {}".format(url, error.code, error.reason))


def _challenge_fields(challenge: str) -> Dict[str, str]:
    return dict(re.findall(r'(\w+)="([^"]*)"', challenge))


def _token(fields: Dict[str, str], repository: str, password: Optional[str],
           timeout: float) -> Optional[str]:
    """A pull token from the challenge's service (None: it refused, 401 or 403)."""
    realm = fields.get("realm")
    if not realm:
        raise RegistryError("the registry's Bearer challenge names no realm")
    query = {"scope": fields.get("scope") or "repository:{}:pull".format(repository)}
    if fields.get("service"):
        query["service"] = fields["service"]
    request = urllib.request.Request(realm + "?" + urllib.parse.urlencode(query))
    if password is not None:
        basic = base64.b64encode("oauth2accesstoken:{}".format(password).encode()).decode()
        request.add_header("Authorization", "Basic " + basic)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            answer = json.loads(response.read().decode("utf-8"))
    except urllib.error.HTTPError as error:
        if error.code in (401, 403):
            return None
        raise RegistryError("{} refused a pull token: {} {}".format(realm, error.code,
                                                                    error.reason))
    except (OSError, ValueError) as error:
        raise RegistryError("{} gave no pull token: {}".format(realm, error))
    token = answer.get("token") or answer.get("access_token")
    if not token:
        raise RegistryError("{} answered without a token".format(realm))
    return token
