"""The launcher's one exception hierarchy and the exit codes it maps to.

Every error the launcher can report is a ``LauncherError``: a one-line message naming the
variable or field at fault, and a hint with the fix. Only ``launcher.cli.main`` turns these
into output and an exit status; no other module prints errors or calls ``sys.exit``.

Exit codes follow sysexits(3) so that they do not collide with the trainer's own codes or with
128+signal (documented in docs/launcher.md):

====  ===================  ==========================================================
code  name                 meaning
====  ===================  ==========================================================
64    EX_USAGE             bad launcher command line
69    EX_UNAVAILABLE       the TPU was not usable before the deadline, or was lost
70    EX_SOFTWARE          a bug in the launcher (please report it)
76    EX_PROTOCOL          the Cloud TPU API answered something malformed
77    EX_NOPERM            the TPU API refused access (403)
78    EX_CONFIG            bad platform configuration (TPU_CONFIG, TF_CONFIG, ...)
126   -                    the trainer command exists but cannot be executed
127   -                    the trainer command was not found
====  ===================  ==========================================================
"""

from __future__ import annotations

EX_USAGE = 64
EX_UNAVAILABLE = 69
EX_SOFTWARE = 70
EX_PROTOCOL = 76
EX_NOPERM = 77
EX_CONFIG = 78
EX_CANNOT_EXECUTE = 126
EX_NOT_FOUND = 127


class LauncherError(Exception):
    """Base of every error the launcher reports to its user.

    ``message`` says what is wrong and names the variable, field or option; ``hint`` says how
    to fix it. Both must be single lines: ``main`` prints them as ``Name: message`` and
    ``HINT: hint``.
    """

    exit_code = EX_SOFTWARE

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = _one_line(message)
        self.hint = _one_line(hint)

    def __str__(self) -> str:
        return self.message


class UsageError(LauncherError):
    """The launcher's own command line is wrong."""

    exit_code = EX_USAGE


class ConfigError(LauncherError):
    """An environment variable or setting describing the job is missing or malformed."""

    exit_code = EX_CONFIG


class TpuUnavailableError(LauncherError):
    """The TPU did not become usable before the deadline, or it was preempted or terminated."""

    exit_code = EX_UNAVAILABLE


class PermissionDeniedError(LauncherError):
    """The Cloud TPU API answered 403: the job's service account may not read the node."""

    exit_code = EX_NOPERM


class TpuApiError(LauncherError):
    """The Cloud TPU API gave an answer that cannot be used (malformed, unexpected status)."""

    exit_code = EX_PROTOCOL


class TrainerExecError(LauncherError):
    """The trainer command could not be executed."""

    def __init__(self, message: str, hint: str, exit_code: int) -> None:
        super().__init__(message, hint)
        self.exit_code = exit_code


class Interrupted(BaseException):
    """SIGTERM or SIGINT arrived before the trainer started; exits with 128 + signal.

    A ``BaseException``, like ``KeyboardInterrupt``: it is raised from a signal handler into
    whatever code is running, and libraries on the wait path catch ``Exception`` broadly
    (TensorFlow's client rewraps any ``Exception`` as ``ValueError``), which would turn a
    cancel into an API error.
    """

    hint = ""

    def __init__(self, signum: int, name: str) -> None:
        self.message = "received {} while preparing the job; the trainer was not started".format(
            name)
        super().__init__(self.message)
        self.exit_code = 128 + signum


def _one_line(text: str) -> str:
    """Collapse whitespace so a message can never spill over several log lines."""
    return " ".join(str(text).split())
