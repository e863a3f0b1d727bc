"""make gke-logs (``jobspec.gke_logs``) against a kubectl that plays a cluster from a script: it
waits for the JobSet's pods to start, follows all of them with ``--ignore-errors``, follows
the new pods after a restart from their start, and stops when the JobSet ends, saying how; pods
that do not start in time, and a JobSet kubectl cannot find, are one line with a hint."""

import json
import subprocess
import sys

import pytest

from conftest import REPO, WRITES_THE_CHECKOUT, clean_environ

pytestmark = WRITES_THE_CHECKOUT

CONTEXT = "gke_my-proj_europe-west4_tpu-cluster"
JOBSET = "imagenet-run-1"
# Answers from the script (CLUSTER_SCRIPT): "jobset" a list of the JobSet's states, one per
# ``get jobset`` (the last repeats); "pods" per restart attempt a list of the pods' phases, one
# per ``get pods``; "logs" per attempt the lines ``logs -f`` prints before its streams end.
# Every call is recorded (CLUSTER_CALLS).
KUBECTL = """#!{python}
import json, os, sys
args = sys.argv[1:]
with open(os.environ["CLUSTER_CALLS"], "a") as handle:
    handle.write(json.dumps(args) + "\\n")
with open(os.environ["CLUSTER_SCRIPT"]) as handle:
    script = json.load(handle)
counts_path = os.environ["CLUSTER_SCRIPT"] + ".counts"
counts = json.load(open(counts_path)) if os.path.exists(counts_path) else {{}}
def next_of(key, answers):
    n = counts.get(key, 0)
    counts[key] = n + 1
    json.dump(counts, open(counts_path, "w"))
    return answers[min(n, len(answers) - 1)]
def attempt():
    selector = args[args.index("-l") + 1]
    return selector.split("jobset.sigs.k8s.io/restart-attempt=")[1]
verb = args[2]
if verb == "get" and args[3] == "jobset":
    state = next_of("jobset", script["jobset"])
    if state is None:
        sys.exit('Error from server (NotFound): jobsets "{{}}" not found'.format(args[4]))
    print(json.dumps({{"status": state}}))
elif verb == "get" and args[3] == "pods":
    phases = next_of("pods" + attempt(), script["pods"][attempt()])
    print(json.dumps({{"items": [{{"status": {{"phase": p}}}} for p in phases]}}))
elif verb == "logs" and not any(a.startswith("--since-time=") for a in args):
    for line in script["logs"].get(attempt(), []):  # all of them before the time asked for
        print(line)
"""


@pytest.fixture
def cluster(tmp_path):
    """``cluster(script, *make_args)``: make gke-logs against the scripted kubectl; returns
    (result, kubectl calls)."""
    kubectl = tmp_path / "kubectl"
    kubectl.write_text(KUBECTL.format(python=sys.executable))
    kubectl.chmod(0o755)

    def run(script, *args):
        (tmp_path / "script.json").write_text(json.dumps(script))
        calls = tmp_path / "calls.jsonl"
        env = clean_environ(CLUSTER_SCRIPT=str(tmp_path / "script.json"),
                            CLUSTER_CALLS=str(calls))
        result = subprocess.run(
            ["make", "--no-print-directory", "-C", str(REPO), "-o", ".venv/.installed",
             "gke-logs", "PROJECT=my-proj", "REGION=europe-west4", "CLUSTER=tpu-cluster",
             "GKE_JOB_NAME=" + JOBSET, "KUBECTL=" + str(kubectl), "GKE_LOG_POLL=0.05"]
            + list(args),
            env=env, capture_output=True, text=True, timeout=120)
        recorded = [json.loads(line) for line in calls.read_text().splitlines()]
        return result, recorded

    return run


RUNNING = {"restarts": 0}


def printed(result):
    """The log lines make gke-logs passed on (make's echo of its recipe left out)."""
    return [line for line in result.stdout.splitlines() if line.startswith("[pod/")]


def logs_calls(calls):
    return [call for call in calls if call[2] == "logs"]


def test_it_waits_for_the_pods_follows_a_restart_and_stops_when_the_jobset_ends(cluster):
    script = {
        # running; restarted once (a preemption); completed after the second attempt
        "jobset": [RUNNING, RUNNING, RUNNING, RUNNING, {"restarts": 1}, {"restarts": 1},
                   {"restarts": 1, "terminalState": "Completed"}],
        "pods": {"0": [[], ["Pending", "Pending", "Running", "Running"], ["Running"] * 4],
                 "1": [["Running"] * 4]},
        "logs": {"0": ["[pod/imagenet-run-1-slice-0-0-abcde/trainer] step 10"],
                 "1": ["[pod/imagenet-run-1-slice-0-0-fghij/trainer] resumed at step 10"]},
    }
    result, calls = cluster(script, "GKE_LOG_WAIT=60")
    assert result.returncode == 0, result.stderr
    assert printed(result) == script["logs"]["0"] + script["logs"]["1"]  # each line once
    assert "waiting for the pods of JobSet imagenet-run-1 (restart 0) to start" in result.stderr
    assert "JobSet imagenet-run-1 restarted (restart 1): following its new pods" in result.stderr
    assert result.stderr.rstrip().endswith(
        "make gke-logs: JobSet imagenet-run-1 ended: Completed after 1 restart")
    selector = "jobset.sigs.k8s.io/jobset-name={},jobset.sigs.k8s.io/restart-attempt=".format(
        JOBSET)
    follows = logs_calls(calls)
    assert follows[0] == ["--context", CONTEXT, "logs", "-f", "-l", selector + "0", "--prefix",
                          "--ignore-errors", "--max-log-requests=64", "--tail=-1"]
    restarted = [call for call in follows if call[5] == selector + "1"]
    assert restarted and restarted[0][-1] == "--tail=-1"  # the new pods from their start
    # Not before every pod of the attempt had started.
    first_follow = calls.index(follows[0])
    assert sum(1 for call in calls[:first_follow] if call[3:4] == ["pods"]) == 3


def test_a_failed_jobset_ends_it_with_exit_1(cluster):
    result, _ = cluster({"jobset": [RUNNING, RUNNING, {"restarts": 0,
                                                        "terminalState": "Failed"}],
                         "pods": {"0": [["Running"] * 4]}, "logs": {"0": ["exit 78"]}})
    assert result.returncode != 0
    assert "JobSet imagenet-run-1 ended: Failed after 0 restarts" in result.stderr


def test_a_jobset_release_without_terminal_state_ends_it_by_its_condition(cluster):
    # JobSet releases before terminalState say it in status.conditions alone.
    suspended = {"type": "Suspended", "status": "False"}
    completed = {"type": "Completed", "status": "True"}
    result, _ = cluster({"jobset": [RUNNING, {"restarts": 0, "conditions": [suspended]},
                                    {"restarts": 0, "conditions": [suspended, completed]}],
                         "pods": {"0": [["Running"] * 4]}, "logs": {"0": ["done"]}})
    assert result.returncode == 0, result.stderr
    assert "JobSet imagenet-run-1 ended: Completed after 0 restarts" in result.stderr


def test_streams_that_end_while_the_jobset_runs_resume_where_they_ended(cluster):
    result, calls = cluster({"jobset": [RUNNING, RUNNING, RUNNING, RUNNING,
                                        {"restarts": 0, "terminalState": "Completed"}],
                             "pods": {"0": [["Running"] * 4]},
                             "logs": {"0": ["[pod/p/trainer] line"]}},
                            "GKE_LOG_WAIT=60")
    assert result.returncode == 0, result.stderr
    first, *again = logs_calls(calls)
    assert first[-1] == "--tail=-1" and again
    assert all(call[-1].startswith("--since-time=20") for call in again), again
    assert printed(result) == ["[pod/p/trainer] line"]


def test_pods_that_do_not_start_say_when_to_run_it_again(cluster):
    result, calls = cluster({"jobset": [RUNNING], "pods": {"0": [["Pending"] * 4]},
                             "logs": {}}, "GKE_LOG_WAIT=0")
    assert result.returncode != 0 and logs_calls(calls) == []
    error, hint = [line for line in result.stderr.splitlines()
                   if line.startswith(("error:", "HINT:"))]
    assert error == ("error: no pod of JobSet imagenet-run-1 (restart 0) started within 0 s "
                     "(4 of 4 Pending)")
    assert "run make gke-logs again once its pods are Running" in hint


def test_a_jobset_kubectl_cannot_find_is_one_line_naming_the_context(cluster):
    result, _ = cluster({"jobset": [None], "pods": {}, "logs": {}})
    assert result.returncode != 0
    error, hint = [line for line in result.stderr.splitlines()
                   if line.startswith(("error:", "HINT:"))]
    assert "get jobset imagenet-run-1 -o json: Error from server (NotFound)" in error
    assert CONTEXT in hint and "Traceback" not in result.stderr
