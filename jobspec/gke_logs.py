"""``make gke-logs``: follow every host's log of a JobSet until the JobSet ends, across its
restarts.

``kubectl logs -f -l SELECTOR`` alone ends too soon: while a pod of the slice is still pulling
its image it fails that pod's stream, and without ``--ignore-errors`` it closes every other
stream with it; and it follows only the pods that exist when it starts, so a restart (a
preemption, a crash) ends it while the slice goes on in new pods. Here, for each restart
attempt in turn (JobSet labels its pods ``jobset.sigs.k8s.io/restart-attempt``):

1. wait until the attempt's pods exist and none is Pending (at most ``--wait`` seconds; then
   say so, with when to run it again, and exit 1);
2. follow all of them, each line prefixed with its pod, with ``--ignore-errors``;
3. when the streams end, ask the JobSet: ended (``status.terminalState``; on JobSet releases
   before it, a ``Completed`` or ``Failed`` condition that is ``True``): say how, exit 0
   for Completed, 1 for Failed; restarted: say so and follow the new attempt's pods from their
   start; neither: follow the same pods again from the time the streams ended.

Usage: ``python -m jobspec.gke_logs --context CONTEXT [--kubectl KUBECTL] [--streams N]
[--wait SECONDS] [--poll SECONDS] JOBSET``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import subprocess
import sys
import time
from typing import Any, Dict, List, NamedTuple, Optional

NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
ATTEMPT_LABEL = "jobset.sigs.k8s.io/restart-attempt"


class KubectlError(Exception):
    """kubectl failed or answered what is not JSON: the message says which call."""


class JobSetState(NamedTuple):
    restarts: int
    terminal: Optional[str]  # "Completed", "Failed", or None while it runs


class Follower:
    """Follows JobSet ``name`` through ``kubectl`` (its argv prefix, with the context)."""

    def __init__(self, kubectl: List[str], name: str, streams: int, wait_s: float,
                 poll_s: float) -> None:
        self.kubectl, self.name = kubectl, name
        self.streams, self.wait_s, self.poll_s = streams, wait_s, poll_s

    def run(self) -> int:
        attempt, since = None, None  # the attempt followed, and when its streams last ended
        while True:
            state = self.state()
            if state.terminal is not None:
                say("JobSet {} ended: {} after {} restart{}".format(
                    self.name, state.terminal, state.restarts, "" if state.restarts == 1
                    else "s"))
                return 0 if state.terminal == "Completed" else 1
            if state.restarts != attempt:
                if attempt is not None:
                    say("JobSet {} restarted (restart {}): following its new pods".format(
                        self.name, state.restarts))
                attempt, since = state.restarts, None
            if not self.wait_for_pods(attempt):
                continue  # it ended or restarted meanwhile: ask again
            if since is not None:
                time.sleep(self.poll_s)  # the same pods again: do not spin on finished ones
            self.follow(attempt, since)
            since = now_rfc3339()

    def selector(self, attempt: int) -> str:
        return "{}={},{}={}".format(NAME_LABEL, self.name, ATTEMPT_LABEL, attempt)

    def state(self) -> JobSetState:
        status = self.json(["get", "jobset", self.name]).get("status") or {}
        return JobSetState(int(status.get("restarts") or 0), terminal_state(status))

    def wait_for_pods(self, attempt: int) -> bool:
        """True once the attempt's pods exist and none is Pending; False when the JobSet
        ended or restarted first; ``Waited`` past ``wait_s``."""
        deadline = time.monotonic() + self.wait_s
        told = False
        while True:
            pods = self.json(["get", "pods", "-l", self.selector(attempt)]).get("items") or []
            phases = [(pod.get("status") or {}).get("phase") for pod in pods]
            if phases and "Pending" not in phases:
                return True
            state = self.state()
            if state.terminal is not None or state.restarts != attempt:
                return False
            if time.monotonic() >= deadline:
                raise Waited("no pod of JobSet {} (restart {}) started within {:.0f} s ({})"
                             .format(self.name, attempt, self.wait_s,
                                     "{} of {} Pending".format(phases.count("Pending"),
                                                               len(phases))
                                     if phases else "none created yet"))
            if not told:
                say("waiting for the pods of JobSet {} (restart {}) to start".format(
                    self.name, attempt))
                told = True
            time.sleep(self.poll_s)

    def follow(self, attempt: int, since: Optional[str]) -> None:
        """Every pod's log of the attempt, to this process's output, until all streams end."""
        start = ["--since-time=" + since] if since else ["--tail=-1"]
        subprocess.call(self.kubectl + ["logs", "-f", "-l", self.selector(attempt), "--prefix",
                                        "--ignore-errors",
                                        "--max-log-requests={}".format(self.streams)] + start)

    def json(self, args: List[str]) -> Dict[str, Any]:
        command = self.kubectl + args + ["-o", "json"]
        result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                universal_newlines=True)
        if result.returncode != 0:
            last = (result.stderr.strip().splitlines() or ["exit {}".format(result.returncode)])
            raise KubectlError("{}: {}".format(" ".join(shlex.quote(a) for a in command),
                                               last[-1]))
        try:
            answer = json.loads(result.stdout)
        except ValueError:
            raise KubectlError("{}: not JSON: {!r}".format(" ".join(command),
                                                           result.stdout[:80]))
        return answer if isinstance(answer, dict) else {}


TERMINAL_CONDITIONS = ("Completed", "Failed")


def terminal_state(status: Dict[str, Any]) -> Optional[str]:
    """"Completed" or "Failed" once the JobSet has ended, else None: its ``terminalState``,
    or on JobSet releases that do not set one yet, the ended condition that is ``True``."""
    if status.get("terminalState"):
        return str(status["terminalState"])
    for condition in status.get("conditions") or []:
        if condition.get("type") in TERMINAL_CONDITIONS and condition.get("status") == "True":
            return str(condition["type"])
    return None


class Waited(Exception):
    """The pods did not start in time."""


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def say(line: str) -> None:
    print("make gke-logs: " + line, file=sys.stderr, flush=True)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobspec.gke_logs",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("jobset")
    parser.add_argument("--context", required=True)
    parser.add_argument("--kubectl", default="kubectl")
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--wait", type=float, default=900.0)
    parser.add_argument("--poll", type=float, default=5.0)
    args = parser.parse_args(argv)
    kubectl = shlex.split(args.kubectl) + ["--context", args.context]
    follower = Follower(kubectl, args.jobset, args.streams, args.wait, args.poll)
    try:
        return follower.run()
    except Waited as waited:
        print("error: {}".format(waited), file=sys.stderr)
        print("HINT: make gke-status shows why (a node pool still being made, an image being "
              "pulled, too few TPU nodes); run make gke-logs again once its pods are Running",
              file=sys.stderr)
        return 1
    except KubectlError as error:
        print("error: {}".format(error), file=sys.stderr)
        print("HINT: check the JobSet's name (make gke-status) and kubectl's context "
              "({}: REGION or CLUSTER_LOCATION, PROJECT, CLUSTER)".format(args.context),
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
