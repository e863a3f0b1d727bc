"""The system calls a command makes, counted by strace (``strace -f -c``: every thread and
child process, summed per call). ``bench/startup.py`` prints them for the trainer's start-up
and ``tests/trainer/test_startup.py`` bounds them."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from typing import Dict, List, Sequence, Tuple


class StraceUnavailable(Exception):
    """strace is not installed, or may not trace here (no ptrace in some containers)."""


def strace() -> str:
    """The strace executable; ``StraceUnavailable`` where there is none."""
    path = shutil.which("strace")
    if path is None:
        raise StraceUnavailable("strace is not installed (apt-get install strace)")
    return path


def count(argv: List[str], only: Sequence[str] = (), **run_options
          ) -> Tuple[subprocess.CompletedProcess, Dict[str, int]]:
    """Run ``argv`` under ``strace -f -c`` (``run_options`` as for ``subprocess.run``, whose
    result comes back with the counts): calls per system call name, and ``total``. With
    ``only`` (names of system calls), just those are counted (``total`` is their sum), and a
    seccomp filter stops the process at those calls alone: a Python start-up traced whole
    takes about twice as long as one traced for its mmap calls."""
    selection = ["-e", "trace=" + ",".join(only), "--seccomp-bpf"] if only else []
    with tempfile.TemporaryDirectory(prefix="syscalls-") as folder:
        summary = os.path.join(folder, "summary")
        result = subprocess.run([strace(), "-f", "-c", "-o", summary] + selection + ["--"]
                                + list(argv), **run_options)
        text = open(summary).read() if os.path.exists(summary) else ""
    counts = parse_summary(text)
    if "total" not in counts:  # strace itself failed, e.g. PTRACE_TRACEME refused
        stderr = result.stderr if isinstance(result.stderr, str) else ""
        raise StraceUnavailable("strace could not trace {}: {}".format(
            argv[0], (stderr.strip().splitlines() or ["no summary written"])[0]))
    return result, counts


def parse_summary(text: str) -> Dict[str, int]:
    """The calls column of a ``strace -c`` table, by system call name (and ``total``). Its
    rows are ``% time, seconds, usecs/call, calls, [errors,] syscall``: the errors column is
    empty for calls that never failed, so the calls are the fourth field, the name the last."""
    counts: Dict[str, int] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 5 and fields[3].isdigit():
            counts[fields[-1]] = int(fields[3])
    return counts
