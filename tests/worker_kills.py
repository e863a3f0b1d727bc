"""Kill a tool's worker process mid-task, for real: one input file is a FIFO, so the worker
that reads it blocks there, found by the FIFO among its open files, then SIGKILLed."""

import errno
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import List, Tuple


def run_and_kill_the_reader(command: List[str], fifo: Path, timeout: float = 60.0
                            ) -> Tuple[int, int, str]:
    """Run ``command``, SIGKILL the child process that reads ``fifo`` (``kill_the_reader``)
    and wait for the command to end, at most ``timeout`` seconds after the kill (a tool that
    hangs fails with ``TimeoutExpired``): (the killed worker's pid, the exit code, stderr)."""
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        killed = kill_the_reader(fifo, run.pid)
        _, stderr = run.communicate(timeout=timeout)
    finally:
        run.kill()
        run.wait()
    return killed, run.returncode, stderr


def living_children(parent: int) -> List[int]:
    """Process ids of ``parent``'s children that have not ended (zombies excluded)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/{}/stat".format(entry)) as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # it ended while we looked
        if int(fields[1]) == parent and fields[0] != "Z":
            found.append(int(entry))
    return sorted(found)


def kill_the_reader(fifo: Path, parent: int, timeout: float = 120.0) -> int:
    """Wait until a child of ``parent`` has ``fifo`` open for reading (it blocks reading it,
    as no one writes), SIGKILL that child, and return its process id. The FIFO is held open
    for writing meanwhile, so the reader's open returns and its read waits."""
    deadline = time.monotonic() + timeout
    writer = None
    try:
        while writer is None:
            try:  # succeeds only once a reader is opening the FIFO
                writer = os.open(str(fifo), os.O_WRONLY | os.O_NONBLOCK)
            except OSError as error:
                if error.errno != errno.ENXIO or time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
        while time.monotonic() < deadline:
            for child in living_children(parent):
                if _has_open(child, fifo):
                    os.kill(child, signal.SIGKILL)
                    return child
            time.sleep(0.02)
        raise TimeoutError("no child of {} opened {}".format(parent, fifo))
    finally:
        if writer is not None:
            os.close(writer)


def _has_open(pid: int, path: Path) -> bool:
    folder = "/proc/{}/fd".format(pid)
    try:
        links = [os.readlink(os.path.join(folder, fd)) for fd in os.listdir(folder)]
    except OSError:
        return False
    return str(path) in links
