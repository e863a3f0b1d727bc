"""launcher.tpu_wait: the polling loop, on a simulated clock (the real resolver is exercised in
test_tpu_api.py)."""

import pytest

from launcher.errors import PermissionDeniedError, TpuUnavailableError
from launcher.tpu_api import NodeStatus, TransientError
from launcher.tpu_wait import WaitPolicy, wait_until_ready


class SimulatedTime:
    """A clock that advances only when the loop sleeps (plus a fixed cost per poll)."""

    def __init__(self, poll_cost=0.01):
        self.now, self.poll_cost, self.sleeps = 0.0, poll_cost, []

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


DEFAULT_POLICY = WaitPolicy()


def run(answers, policy=DEFAULT_POLICY, poll_cost=0.01):
    """Poll a script of answers (NodeStatus or exception); returns (address|error, time, logs)."""
    time, logs, script = SimulatedTime(poll_cost), [], list(answers)

    def poll():
        time.now += time.poll_cost
        answer = script.pop(0) if len(script) > 1 else script[0]
        if isinstance(answer, Exception):
            raise answer
        return answer(time.now) if callable(answer) else answer

    try:
        result = wait_until_ready(poll, "n", policy, logs.append, time.clock, time.sleep)
    except Exception as error:  # noqa: BLE001 - returned for the test to inspect
        result = error
    return result, time, logs


READY = NodeStatus("READY", "HEALTHY", "10.0.0.2:8470")


def test_ready_at_once_returns_without_sleeping():
    address, time, _ = run([READY])
    assert address == "10.0.0.2:8470" and time.sleeps == []


def test_backoff_grows_and_is_capped_below_a_second():
    address, time, _ = run([NodeStatus("CREATING")] * 30 + [READY])
    assert address == "10.0.0.2:8470"
    assert time.sleeps[0] == pytest.approx(0.1)
    assert time.sleeps == sorted(time.sleeps) and max(time.sleeps) == pytest.approx(0.75)


def test_reaction_time_after_the_node_becomes_usable_is_under_a_second():
    flip = 300.0  # the node becomes usable 5 minutes in

    def node(now):
        return READY if now >= flip else NodeStatus("CREATING")

    _, time, _ = run([node], WaitPolicy(deadline_s=1200))
    assert flip <= time.now < flip + 0.8


def test_unhealthy_ready_node_is_waited_for():
    address, _, _ = run([NodeStatus("READY", "UNHEALTHY_MAINTENANCE")] * 3 + [READY])
    assert address == READY.address


def test_progress_is_logged_at_most_every_ten_seconds():
    _, time, logs = run([NodeStatus("CREATING")] * 200 + [READY])
    progress = [line for line in logs if line.startswith("waiting")]
    assert time.now > 100 and 1 < len(progress) <= time.now / 10 + 1
    assert "state CREATING" in progress[0] and "of 1200s" in progress[0]


def test_transient_errors_are_retried():
    address, _, _ = run([TransientError("HTTP 503")] * 5 + [READY])
    assert address == READY.address


def test_deadline_names_the_last_observation():
    error, time, _ = run([NodeStatus("CREATING")], WaitPolicy(deadline_s=30))
    assert isinstance(error, TpuUnavailableError)
    assert "within 30s" in error.message and "CREATING" in error.message
    assert 30 <= time.now < 31


def test_preempted_node_fails_after_the_grace_period_not_at_the_deadline():
    error, time, _ = run([NodeStatus("PREEMPTED")], WaitPolicy(lost_grace_s=20))
    assert isinstance(error, TpuUnavailableError) and "PREEMPTED" in error.message
    assert 20 <= time.now < 22


def test_preempted_node_that_recovers_within_grace_is_used():
    address, _, _ = run([NodeStatus("PREEMPTED")] * 5 + [NodeStatus("CREATING"), READY],
                        WaitPolicy(lost_grace_s=20))
    assert address == READY.address


def test_fatal_errors_end_the_wait_at_once():
    error, time, _ = run([PermissionDeniedError("403")])
    assert isinstance(error, PermissionDeniedError) and time.sleeps == []


def test_a_hung_request_is_cut_off_at_the_deadline():
    """Real time: the request would hang for a minute; the deadline is one second."""
    import time

    def hang():
        time.sleep(60)

    started = time.monotonic()
    with pytest.raises(TpuUnavailableError) as caught:
        wait_until_ready(hang, "n", WaitPolicy(deadline_s=1.0), lambda line: None)
    assert time.monotonic() - started < 2.0
    assert "did not answer within 1.0s" in caught.value.message
