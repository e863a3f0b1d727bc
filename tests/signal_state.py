"""What a command starts with, as the signal tests read it (tests/launcher/test_exec_command.py,
test_pid1.py, tests/images/test_user_command.py): the ``SigBlk``/``SigIgn`` masks of
``/proc/PID/status``, a ``sitecustomize`` that makes every Python started report its mask at
start-up, and a PATH whose first file of a name cannot be executed."""

import signal
from pathlib import Path
from typing import Dict, List

STOP_BITS = (1 << (signal.SIGTERM - 1)) | (1 << (signal.SIGINT - 1))
RESET_BITS = (1 << (signal.SIGPIPE - 1)) | (1 << (signal.SIGXFSZ - 1))

# Put first on PYTHONPATH as sitecustomize.py: each Python process started writes one line.
MASK_AT_START = """import sys
with open("/proc/self/status") as status:
    blocked = [line.split()[1] for line in status if line.startswith("SigBlk:")]
sys.stderr.write("mask at start-up: {}\\n".format(blocked[0]))
"""


def masks_at_start(stderr: str) -> List[int]:
    """The masks that the processes started with ``MASK_AT_START`` reported, in order."""
    return [int(line.split()[-1], 16) for line in stderr.splitlines()
            if line.startswith("mask at start-up: ")]


def status_fields(text: str) -> Dict[str, str]:
    """``/proc/PID/status`` as a mapping (``SigBlk``, ``SigIgn``: hex masks)."""
    return dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)


def commands_on_path(folder: Path, name: str = "train-cmd") -> List[Path]:
    """``folder/first/NAME`` that cannot be executed, then ``folder/second/NAME`` that prints
    "ran second": the folders, in PATH order."""
    folders = []
    for part, mode in (("first", 0o644), ("second", 0o755)):
        (folder / part).mkdir(parents=True, exist_ok=True)
        script = folder / part / name
        script.write_text("#!/bin/sh\necho ran {}\n".format(part))
        script.chmod(mode)
        folders.append(folder / part)
    return folders
