"""Wait until a TPU node is usable (READY and HEALTHY) and return its ``host:port``.

Polling starts fast and backs off exponentially up to ``max_interval_s`` (0.75 s), so the
trainer starts within about a second of the TPU becoming usable; the platform's own loop
polled every 10 s. Transient failures (not ready, 404 while the node is created, 5xx,
timeouts, connection errors) are retried until ``deadline_s``; a node that stays PREEMPTED,
TERMINATED, STOPPED or DELETING for ``lost_grace_s`` is given up on. A request that hangs is
cut off when the deadline passes (``_within``). A progress line is logged at most every
``progress_every_s``.
"""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional

from launcher.errors import TpuUnavailableError
from launcher.tpu_api import NodeStatus, TransientError

LOST_STATES = frozenset(("PREEMPTED", "TERMINATED", "STOPPED", "STOPPING", "DELETING"))
# A request is cut off when the deadline passes, but is always given at least this long.
MIN_REQUEST_S = 0.5


class _RequestTimedOut(BaseException):
    """A poll outlived the time left. A ``BaseException``, so that the API clients on the way,
    which catch ``Exception`` and rewrap it, let it through unchanged."""


@dataclass(frozen=True)
class WaitPolicy:
    """How long and how often to poll; all times in seconds."""

    deadline_s: float = 1200.0
    lost_grace_s: float = 60.0
    first_interval_s: float = 0.1
    max_interval_s: float = 0.75
    backoff: float = 1.6
    progress_every_s: float = 10.0


def wait_until_ready(poll: Callable[[], NodeStatus], node_name: str, policy: WaitPolicy,
                     log: Callable[[str], None],
                     clock: Callable[[], float] = time.monotonic,
                     sleep: Callable[[float], None] = time.sleep) -> str:
    """Poll until the node has an address; return it or raise ``TpuUnavailableError``.

    ``poll`` raises ``TransientError`` for failures worth retrying; anything else it raises
    (permission denied, malformed answers) ends the wait at once.
    """
    start = clock()
    interval = policy.first_interval_s
    last_progress: Optional[float] = None
    lost_since: Optional[float] = None
    last_seen = "no answer yet"
    while True:
        allowed = max(policy.deadline_s - (clock() - start), MIN_REQUEST_S)
        try:
            status: Optional[NodeStatus] = _within(allowed, poll)
        except TransientError as error:
            status, last_seen = None, " ".join(str(error).split())
        except _RequestTimedOut:
            status, last_seen = None, "the Cloud TPU API did not answer within {:.1f}s".format(
                allowed)
        now = clock()
        elapsed = now - start
        if status is not None:
            if status.address:
                log("TPU node {} is READY and HEALTHY after {:.1f}s: {}".format(
                    node_name, elapsed, status.address))
                return status.address
            last_seen = "state {}, health {}".format(status.state, status.health or "-")
            lost_since = (lost_since if lost_since is not None else now) if (
                status.state in LOST_STATES) else None
            if lost_since is not None and now - lost_since >= policy.lost_grace_s:
                raise TpuUnavailableError(
                    "TPU node {} is {} (for {:.0f}s)".format(node_name, status.state,
                                                             now - lost_since),
                    "the TPU was preempted or stopped; resubmit the job (the platform retries "
                    "a failed replica) or use a non-preemptible TPU")
        if elapsed >= policy.deadline_s:
            raise TpuUnavailableError(
                "TPU node {} was not usable within {:.0f}s (last: {})".format(
                    node_name, policy.deadline_s, last_seen),
                "raise --tpu-wait-timeout (LAUNCHER_TPU_WAIT_TIMEOUT) or check the TPU's "
                "state with `gcloud compute tpus describe`")
        if last_progress is None or now - last_progress >= policy.progress_every_s:
            log("waiting for TPU node {}: {}; {:.0f}s of {:.0f}s".format(
                node_name, last_seen, elapsed, policy.deadline_s))
            last_progress = now
        sleep(max(0.0, min(interval, policy.deadline_s - elapsed)))
        interval = min(interval * policy.backoff, policy.max_interval_s)


def _within(seconds: float, poll: Callable[[], NodeStatus]) -> NodeStatus:
    """``poll()``, interrupted with ``_RequestTimedOut`` after ``seconds`` of real time.

    The API clients set no deadline of their own and reuse connections whose socket timeout
    was fixed when they opened, so only a timer bounds a hung request by the time left. Needs
    the main thread (signals); elsewhere the poll runs unbounded.
    """
    if threading.current_thread() is not threading.main_thread():
        return poll()

    def on_alarm(signum: int, frame: object) -> None:
        raise _RequestTimedOut()

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return poll()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
