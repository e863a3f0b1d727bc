"""trainer.data.worker_pool: every task's result from real worker processes; a worker that is
SIGKILLed or exits while it holds a task ends the run at once, naming the task (where
``multiprocessing.Pool`` waits forever); a task's error reaches the caller unchanged."""

import os
import signal
import threading

import pytest
import worker_kills

from trainer.data.worker_pool import WorkerDied, results
from trainer.errors import DataError


def pid_and_double(task):
    return os.getpid(), task * 2


def kill_myself_at_3(task):
    """Task 3 dies of a real SIGKILL, as from the OOM killer; the others take a moment."""
    if task == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    threading.Event().wait(0.05)
    return task


def exit_at_2(task):
    if task == 2:
        os._exit(3)
    return task


def data_error_at_1(task):
    if task == 1:
        raise DataError("shard 1 is broken", "write it again", 65)
    return task


def dies_after_sending_1(task):
    """Task 1's result is sent, then its worker dies (SIGKILL) before it takes another; task
    0 comes back first, while task 1 still takes a moment."""
    if task == 1:
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGKILL)).start()
        threading.Event().wait(0.1)
    return task


def unpicklable(task):
    return lambda: task


@pytest.fixture
def no_workers_left():
    """Checks that the test leaves no worker process behind (the session's other children,
    a fake-gcs-server for one, are there before and after)."""
    before = worker_kills.living_children(os.getpid())
    yield
    assert worker_kills.living_children(os.getpid()) == before


def test_every_result_comes_from_the_worker_processes(no_workers_left):
    made = list(results(pid_and_double, list(range(10)), 3, str, "resume"))
    assert sorted(double for _, double in made) == [task * 2 for task in range(10)]
    pids = {pid for pid, _ in made}
    assert os.getpid() not in pids and 1 <= len(pids) <= 3


def test_no_workers_or_one_task_runs_in_this_process(no_workers_left):
    """workers=0 is none, as a tool's --workers=0 and the trainers' --num_workers=0 say; one
    worker is one process of its own."""
    assert [pid for pid, _ in results(pid_and_double, [1, 2], 0, str, "")] == [os.getpid()] * 2
    assert [pid for pid, _ in results(pid_and_double, [1], 4, str, "")] == [os.getpid()]
    [one] = {pid for pid, _ in results(pid_and_double, [1, 2], 1, str, "")}
    assert one != os.getpid()


def test_a_sigkilled_worker_is_named_with_its_task_and_the_rest_are_stopped(no_workers_left):
    with pytest.raises(WorkerDied) as caught:
        list(results(kill_myself_at_3, list(range(40)), 2, "making task {}".format,
                     "run it again to resume"))
    error = caught.value
    assert error.exit_code == 70
    assert " was killed by SIGKILL while making task 3; run it again to resume" in error.message
    assert "out-of-memory killer" in error.hint and "--workers" in error.hint


def test_a_worker_that_exits_is_named_with_its_status(no_workers_left):
    with pytest.raises(WorkerDied, match=r"worker process \d+ exited with status 3 while "
                                         r"doing 2; again"):
        list(results(exit_at_2, list(range(6)), 2, "doing {}".format, "again"))


def test_a_tasks_error_reaches_the_caller_unchanged(no_workers_left):
    with pytest.raises(DataError) as caught:
        list(results(data_error_at_1, list(range(4)), 2, str, ""))
    assert (caught.value.message, caught.value.hint, caught.value.exit_code) == (
        "shard 1 is broken", "write it again", 65)
    with pytest.raises(RuntimeError, match="function.*cannot be sent back"):
        list(results(unpicklable, [1, 2], 2, str, ""))


def test_a_caller_that_stops_reading_stops_the_workers(no_workers_left):
    made = results(kill_myself_at_3, [0, 1, 2], 2, str, "")
    next(made)
    made.close()


def test_a_worker_that_dies_between_tasks_is_named_with_the_task_it_could_not_take(
        no_workers_left):
    # The caller dwells on the first result (task 0's) while task 1's worker sends its result
    # and dies: handing that worker the next task fails, and that task must not be lost.
    made = results(dies_after_sending_1, list(range(6)), 2, "doing {}".format, "again")
    first = next(made)
    threading.Event().wait(1.0)
    with pytest.raises(WorkerDied) as caught:
        list(made)
    assert first == 0
    assert caught.value.exit_code == 70
    assert " was killed by SIGKILL while " in caught.value.message
    assert caught.value.message.endswith("; again")
