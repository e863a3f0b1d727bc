"""Read a TPU node's state, health and address through TensorFlow's Cloud TPU client.

The address comes from the real ``TPUClusterResolver``; state and health from the Cloud TPU
``Client`` class the resolver itself uses (``cloud_tpu_client``'s when installed, else
TensorFlow's copy of it); the resolver alone ignores health. TensorFlow is
imported only when a ``NodeProbe`` is made: it costs seconds and hundreds of MB, and only the
TPU node path needs it.

Each ``poll()`` returns a ``NodeStatus`` or raises:
``TransientError`` (retry: 404, 408, 429, 5xx, connection errors, timeouts, node not ready),
``PermissionDeniedError`` (401/403, no credentials), ``TpuApiError`` (malformed answers: not
a Node object, wrong field types, unusable addresses).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Any, Optional

from launcher.errors import ConfigError, PermissionDeniedError, TpuApiError
from launcher.platforms.base import TpuNodeRef

READY = "READY"
HEALTHY = "HEALTHY"
# The longest a single API or metadata request may block; TF sets no timeout of its own.
REQUEST_TIMEOUT_S = 10.0
_RETRIABLE_HTTP = {404, 408, 429}


class TransientError(Exception):
    """A poll failed in a way that may heal by itself; the wait loop retries."""


@dataclass(frozen=True)
class NodeStatus:
    """One observation of the node; ``address`` is set once it is READY and HEALTHY."""

    state: str
    health: Optional[str] = None
    address: Optional[str] = None


class NodeProbe:
    """Polls one TPU node. Construct once, call ``poll()`` as often as needed."""

    def __init__(self, node: TpuNodeRef) -> None:
        # TF's C++ logging is read from the process environment at import; quiet it unless the
        # user chose a level. The trainer's environment is computed separately (no leak).
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        # TF 2.2x announces its oneDNN kernels at import through absl, before the level above
        # applies, which also makes absl warn about logging before InitializeLog. This process
        # only resolves an address and runs no kernels, so the choice changes nothing else.
        os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
        # TF's metadata and API requests have no timeout of their own: cap each one, so that a
        # stuck request is retried within a long wait (the wait loop cuts any request off at
        # its deadline). This process only resolves and then execs, so the global is harmless.
        socket.setdefaulttimeout(REQUEST_TIMEOUT_S)
        from tensorflow.python.distribute.cluster_resolver.tpu import tpu_cluster_resolver

        # The resolver module imports cloud-tpu-client's Client when that package is installed
        # (the XRT base images ship it) and TensorFlow's own otherwise. Both define the same
        # absl flags, so importing the other one as well dies with DuplicateFlagError: use the
        # class the resolver picked.
        Client = tpu_cluster_resolver.client.Client
        TPUClusterResolver = tpu_cluster_resolver.TPUClusterResolver
        self.node = node
        try:
            self._client = Client(tpu=node.name, zone=node.zone, project=node.project)
            self._resolver = TPUClusterResolver(tpu=node.name, zone=node.zone,
                                                project=node.project, job_name="worker")
        except Exception as error:  # metadata lookups for zone/project happen here
            raise ConfigError(
                "cannot look up the zone/project of TPU {!r} from the GCE metadata server "
                "({})".format(node.name, _describe(error)),
                'set TPU_CONFIG={"project": ..., "zone": ..., "tpu_node_name": ...}')

    def poll(self) -> NodeStatus:
        """Observe the node once (1 API call while not READY, 3 when it becomes usable)."""
        try:
            state = self._client.state()
            if not isinstance(state, str) or not state:
                raise TpuApiError("the Cloud TPU API returned node {!r} without a state".format(
                    self.node.name), "check TPU_API_DISCOVERY_URL or report the response")
            if state != READY:
                return NodeStatus(state)
            health = self._client.health()
            if health is not None and not isinstance(health, str):
                raise _not_a_node(self.node.name, "health is {!r}".format(health))
            if health != HEALTHY:
                return NodeStatus(state, health)
            workers = self._resolver.cluster_spec().as_dict().get("worker") or []
        except (TpuApiError, TransientError):
            raise
        except Exception as error:
            raise classify(error, self.node.name)
        if not workers:
            raise TpuApiError("TPU node {!r} is READY but has no network endpoint".format(
                self.node.name), "report this: the Cloud TPU API gave no address")
        return NodeStatus(state, health, workers[0])


def classify(error: BaseException, node_name: str) -> Exception:
    """Map an exception from TF/googleapiclient/oauth2client to the launcher's vocabulary.

    TF wraps HTTP errors in ``ValueError`` whose ``__context__`` is the ``HttpError``, so the
    status is read from the chain, never parsed from the message text.
    """
    http_status = _http_status(error)
    if http_status in (401, 403):
        return PermissionDeniedError(
            "the Cloud TPU API refused to read TPU node {!r} (HTTP {})".format(
                node_name, http_status),
            "grant the TPU service account roles/ml.serviceAgent on the project "
            "(gcloud projects add-iam-policy-binding ...)")
    if http_status is not None:
        if http_status in _RETRIABLE_HTTP or http_status >= 500:
            label = "not found yet" if http_status == 404 else "unavailable"
            return TransientError("Cloud TPU API: node {} (HTTP {})".format(label, http_status))
        return TpuApiError(
            "the Cloud TPU API answered HTTP {} for TPU node {!r}".format(http_status, node_name),
            "check the TPU name, zone and project in TPU_CONFIG")
    if _in_chain(error, lambda e: type(e).__name__ == "ApplicationDefaultCredentialsError"):
        return PermissionDeniedError(
            "no Google credentials to call the Cloud TPU API",
            "on Google Cloud the VM's service account is used; locally run "
            "`gcloud auth application-default login`")
    if _in_chain(error, _is_network_error):
        return TransientError("cannot reach the Cloud TPU API: {}".format(_describe(error)))
    if isinstance(error, RuntimeError) and "not yet ready" in str(error):
        return TransientError("node changed state while being read")
    if isinstance(error, (AttributeError, TypeError, KeyError, IndexError)):
        # The client indexes the answer as a Node object: these mean it was something else.
        return _not_a_node(node_name, _describe(error))
    return TpuApiError(
        "unusable answer from the Cloud TPU API for TPU node {!r}: {}".format(
            node_name, _describe(error)),
        "check TPU_API_DISCOVERY_URL and the API's response; rerun with more logging")


def _not_a_node(node_name: str, detail: str) -> TpuApiError:
    return TpuApiError(
        "the Cloud TPU API's answer for TPU node {!r} is not a Node resource ({})".format(
            node_name, detail),
        "expected a JSON object with state, health and networkEndpoints; check "
        "TPU_API_DISCOVERY_URL or report the response")


def _http_status(error: BaseException) -> Optional[int]:
    found = _find_in_chain(error, lambda e: type(e).__name__ == "HttpError")
    if found is None:
        return None
    status = getattr(getattr(found, "resp", None), "status", None)
    try:
        return int(status)
    except (TypeError, ValueError):
        return None


def _is_network_error(error: BaseException) -> bool:
    # httplib2's errors do not derive from OSError; socket.timeout does (3.3+).
    return isinstance(error, OSError) or type(error).__module__.startswith("httplib2")


def _in_chain(error: BaseException, predicate: Any) -> bool:
    return _find_in_chain(error, predicate) is not None


def _find_in_chain(error: Optional[BaseException], predicate: Any) -> Optional[BaseException]:
    seen = 0
    while error is not None and seen < 8:
        if predicate(error):
            return error
        error = error.__cause__ or error.__context__
        seen += 1
    return None


def _describe(error: BaseException) -> str:
    root = error
    while (root.__cause__ or root.__context__) is not None:
        root = root.__cause__ or root.__context__
    return "{}: {}".format(type(root).__name__, root)
