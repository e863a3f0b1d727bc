"""What a process started under an arbitrary uid needs from its environment: a user name and
a home it can write.

Containers run as any uid (``docker run --user 1000:1000``, a pod's ``runAsUser`` under the
"restricted" Pod Security Standard), usually with no ``/etc/passwd`` entry for it and often on
a read-only root filesystem. Docker then sets ``HOME=/``, which such a user cannot write, and
no ``USER``. These functions return the variables to add for the trainer; they are empty for a
process that has a name and a writable home (a TPU VM's user, root in a container).
"""

from __future__ import annotations

import os
import pwd
import tempfile
from typing import Callable, Mapping, Optional, Tuple

# Where Python's getpass.getuser() looks before the password database.
_USER_VARIABLES = ("LOGNAME", "USER", "LNAME", "USERNAME")

Assignments = Tuple[Tuple[str, str], ...]


def user_name(environ: Mapping[str, str], uid: Optional[int] = None) -> Assignments:
    """``USER`` for a process whose uid has no entry in ``/etc/passwd`` and no user variable
    set: torch's import asks ``getpass.getuser()``, which raises ``KeyError`` there and ended
    the trainer with a traceback. Empty where a name is found."""
    if any(environ.get(name) for name in _USER_VARIABLES):
        return ()
    uid = os.getuid() if uid is None else uid
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return (("USER", "uid{}".format(uid)),)
    return ()


def home_directory(environ: Mapping[str, str],
                   writable: Callable[[str], bool] = lambda path: os.access(path, os.W_OK),
                   temp_dir: Callable[[], str] = tempfile.gettempdir) -> Assignments:
    """``HOME`` set to the temporary directory where the current one is unset, not a
    directory, or not writable: caches that live under it (``~/.cache`` of torch hub and
    Hugging Face, matplotlib's config) fail or warn on every run otherwise. Empty where the home
    works; also where no temporary directory is writable either (nothing better to offer)."""
    home = environ.get("HOME", "")
    if home and os.path.isdir(home) and writable(home):
        return ()
    try:
        return (("HOME", temp_dir()),)
    except FileNotFoundError:  # gettempdir found no writable directory
        return ()
