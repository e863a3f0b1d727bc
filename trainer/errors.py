"""The trainers' one exception type and their exit codes (documented in docs/trainers.md).

Only a trainer's ``main`` turns a ``TrainerError`` into a one-line message, a ``HINT:`` line and
its exit code.
"""

from __future__ import annotations

EX_USAGE = 64     # bad flag value
EX_DATAERR = 65   # missing or malformed input data
EX_SOFTWARE = 70  # a tool's worker process died (killed, or crashed in native code)
EX_IOERR = 74     # the job dir cannot be read or written
EX_NOPERM = 77    # Cloud Storage refused the job (403, no credentials, a missing bucket)
EX_CONFIG = 78    # the container lacks what the run needs (shared memory for the data workers)
# SIGTERM (maintenance, preemption, cancel): a checkpoint was written, then the trainer exits
# non-zero so that the platform restarts the replica, which resumes from that checkpoint.
EX_PREEMPTED = 143


class TrainerError(Exception):
    """A one-line ``message`` naming the flag, file or path at fault, and a ``hint``."""

    exit_code = EX_USAGE

    def __init__(self, message: str, hint: str = "", exit_code: int = 0) -> None:
        super().__init__(message)
        self.message = " ".join(str(message).split())
        self.hint = " ".join(str(hint).split())
        if exit_code:
            self.exit_code = exit_code


class DataError(TrainerError):
    exit_code = EX_DATAERR


class StorageError(TrainerError):
    exit_code = EX_IOERR


class Preempted(TrainerError):
    """SIGTERM arrived; a checkpoint was written (or there was nothing new to save)."""

    exit_code = EX_PREEMPTED
